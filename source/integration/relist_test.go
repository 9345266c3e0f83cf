package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/source"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/globalmirror/globalmirror/test/localkube"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// changes records the bases a Source says changed.
type changes struct {
	mu   sync.Mutex
	keys []source.Key
}

func (c *changes) Changed(k source.Key) {
	c.mu.Lock()
	c.keys = append(c.keys, k)
	c.mu.Unlock()
}

func (c *changes) Skipped(metav1.Object, string, aggregate.Skip) {}

func (c *changes) take() []source.Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.keys
	c.keys = nil
	return out
}

// TestRelistOfAnUnchangedWorldTellsNoOne compacts etcd past every watch's
// version and restarts the API server, so that every feed gets 410 Gone and
// lists again: a world that did not change meanwhile must tell no handler
// about any base (each would rebuild its answers, all of them at once, in
// the middle of the relist's own garbage), while what did change is told;
// and what the index holds as it was must not be decoded again.
func TestRelistOfAnUnchangedWorldTellsNoOne(t *testing.T) {
	if env == nil {
		t.Skip("needs a control plane (not -short)")
	}
	const ns = "relist"
	cluster := env.Cluster("source")
	c := cluster.Client
	ctx := t.Context()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	peer := fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}
	// Linkerd's full shape for two bases in two clusters, local services,
	// and a global Service as the controller writes it.
	base := func(name string) {
		local := fixture.LocalService(ns, name, peer)
		create(t, c, local, fixture.Slice(local, name+"-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready(name+"-0", "10.0.0.1")))
		for _, cl := range []string{"east", "west"} {
			mirror := fixture.HeadlessMirror(ns, name, cl, peer)
			create(t, c, mirror, fixture.Slice(mirror, mirror.Name+"-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
				fixture.Ready(name+"-0", "10.1.0.1"), fixture.Ready(name+"-1", "10.1.0.2")))
			for i, up := range []bool{true, false} {
				svc, sl := fixture.EndpointMirror(ns, fmt.Sprintf("%s-%d-%s", name, i, cl), cl, mirror.Name, up)
				svc.Spec.ClusterIP = ""
				create(t, c, svc, sl)
			}
		}
		global := fixture.Service(ns, name+aggregate.DefaultSuffix, map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy}, corev1.ClusterIPNone, peer)
		create(t, c, global)
	}
	base("db")
	base("kafka")

	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	fs := &feeds{}
	path := kubeclient.Paged
	if streams, err := localkube.StreamsListsAsReleased(ctx, c); err != nil {
		t.Fatal(err)
	} else if streams {
		path = kubeclient.Streamed
	}
	src, err := source.New(source.Config{Client: c, API: cluster.Config, Namespaces: []string{ns}, LocalSelector: sel, Counters: fs.counters})
	if err != nil {
		t.Fatal(err)
	}
	seen := &changes{}
	src.AddHandler(seen)
	src.Start(ctx)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !src.WaitForSync(wctx) {
		t.Fatal("did not sync")
	}
	time.Sleep(time.Second) // the watches settle
	seen.take()
	lists, current := fs.lists(), fs.count("services", "current")+fs.count("endpointslices", "current")
	before := map[[2]string]int64{}
	for _, r := range []string{"services", "endpointslices"} {
		for _, what := range []string{string(path), "current"} {
			before[[2]string{r, what}] = fs.count(r, what)
		}
	}

	// Every watch's version compacted away, then the API server restarted:
	// each feed lists again.
	if _, err := cluster.CompactEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	// Once back, a change to one base in each feed (a Service; a mirror's
	// slice; a local slice) after the relists: the others must stay untold.
	probe := fixture.HeadlessMirror(ns, "probe", "east", peer)
	create(t, c, probe, fixture.Slice(probe, "probe-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("probe-0", "10.2.0.1")))
	localProbe := fixture.LocalService(ns, "probe", peer)
	create(t, c, localProbe, fixture.Slice(localProbe, "probe-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("probe-0", "10.0.0.9")))
	probeKey := source.Key{Namespace: ns, Base: "probe"}
	if err := await.Poll(ctx, 30*time.Second, 20*time.Millisecond, func(context.Context) string {
		if n := fs.lists(); n <= lists {
			return fmt.Sprintf("a feed has not listed again (%d lists each)", n)
		}
		in := src.Input(probeKey)
		if n := len(in.Members); n != 2 {
			return fmt.Sprintf("probe has %d members, want 2", n)
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // what a relist's end would tell
	var others []source.Key
	for _, k := range seen.take() {
		if k != probeKey {
			others = append(others, k)
		}
	}
	slices.SortFunc(others, func(a, b source.Key) int { return strings.Compare(a.String(), b.String()) })
	if len(others) > 0 {
		t.Errorf("after the relists of a world that did not change, handlers were told about %v", slices.Compact(others))
	}
	// What was current in the index at the version the relists sent, it did not
	// decode again: per base, the local Service and slice, two headless
	// mirrors and their slices, four endpoint mirrors' slices, and the
	// global Service; read from the streams' frames in place.
	if got, want := fs.count("services", "current")+fs.count("endpointslices", "current")-current, int64(2*11); got < want {
		t.Errorf("the relists left %d objects encoded, want at least %d", got, want)
	}
	// The process's metrics count both: every feed's relist, by the path
	// the API server offers, and, of each resource, what the relists found current.
	for what, want := range map[[2]string]int64{{"services", string(path)}: 1, {"endpointslices", string(path)}: 2,
		{"services", "current"}: 2 * 4, {"endpointslices", "current"}: 2 * 7} {
		if got := fs.count(what[0], what[1]) - before[what]; got < want {
			t.Errorf("counted %d %s, want at least %d", got, what, want)
		}
	}
	if got := fs.paths(); !slices.Equal(got, []kubeclient.Path{path}) {
		t.Errorf("the relists took %v, want %s", got, path)
	}
}
