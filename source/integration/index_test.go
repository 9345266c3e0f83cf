// Package integration runs source's feeds and index against a real API
// server: lists that stream (sendInitialEvents) and lists that do not must build
// the same index, and the watch that follows either must keep it.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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
	"k8s.io/client-go/kubernetes"
)

var env *localkube.Env

func TestMain(m *testing.M) { os.Exit(localkube.Main(m, &env, "source")) }

const ns = "index"

// create creates fixture objects (Services, EndpointSlices) in their
// namespaces.
func create(t *testing.T, c kubernetes.Interface, objs ...any) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Service:
			o.UID, o.ResourceVersion = "", ""
			_, err = c.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *discoveryv1.EndpointSlice:
			o.UID, o.ResourceVersion = "", ""
			_, err = c.DiscoveryV1().EndpointSlices(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// startSource starts a Source on the shared cluster, its feeds counted into
// fs; paged: through an API server that does not stream lists.
func startSource(t *testing.T, c kubernetes.Interface, fs *feeds, paged bool) *source.Source {
	t.Helper()
	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	// API: the feeds' own clients, which leave watched objects encoded
	// until the index says it does not hold them.
	cfg := env.Cluster("source").Config
	if paged {
		cfg = refusingStreamedLists(cfg)
	}
	src, err := source.New(source.Config{Client: c, API: cfg, Namespaces: []string{ns}, LocalSelector: sel, Counters: fs.counters})
	if err != nil {
		t.Fatal(err)
	}
	startSynced(t, t.Context(), src)
	return src
}

// startSynced starts src's feeds and waits up to 30 s for their first lists.
func startSynced(t *testing.T, ctx context.Context, src *source.Source) {
	t.Helper()
	src.Start(ctx)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !src.WaitForSync(wctx) {
		t.Fatal("did not sync")
	}
}

func TestListsThatStreamAndListsInPagesBuildTheSameIndex(t *testing.T) {
	if env == nil {
		t.Skip("needs a control plane (not -short)")
	}
	c := env.Cluster("source").Client
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	peer := fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}
	local := fixture.LocalService(ns, "db", peer)
	mirror := fixture.HeadlessMirror(ns, "db", "east", peer)
	create(t, c, local, mirror,
		fixture.Slice(local, "db-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("db-0", "10.0.0.1")),
		fixture.Slice(mirror, "db-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
			fixture.Ready("db-0", "10.1.0.1"), fixture.Ready("db-1", "10.1.0.2"), fixture.NotReady("db-2", "10.1.0.3")))
	_, up := fixture.EndpointMirror(ns, "db-0-east", "east", mirror.Name, true)
	_, down := fixture.EndpointMirror(ns, "db-1-east", "east", mirror.Name, false)
	create(t, c, up, down)
	// Services nothing reads, which the index must not keep.
	for i := range 3 {
		create(t, c, fixture.Service(ns, fmt.Sprintf("other-%d", i), map[string]string{"app": "other"}, corev1.ClusterIPNone))
	}

	streamedFeeds, pagedFeeds := &feeds{}, &feeds{}
	streamed, paged := startSource(t, c, streamedFeeds, false), startSource(t, c, pagedFeeds, true)
	// Lists stream where the API server offers it: a watch of its own that
	// asks for a streamed list says whether it does.
	path := []kubeclient.Path{kubeclient.Paged}
	if streams, err := localkube.StreamsListsAsReleased(t.Context(), c); err != nil {
		t.Fatal(err)
	} else if streams {
		path = []kubeclient.Path{kubeclient.Streamed}
	}
	if got := streamedFeeds.paths(); !slices.Equal(got, path) {
		t.Errorf("the feeds' lists took %v, want %v", got, path)
	}
	if got := pagedFeeds.paths(); !slices.Equal(got, []kubeclient.Path{kubeclient.Paged}) {
		t.Errorf("lists from an API server that does not stream them took %v", got)
	}
	ready := func(src *source.Source) map[string]bool {
		out := map[string]bool{}
		for _, e := range aggregate.Aggregate(src.Input(source.Key{Namespace: ns, Base: "db"})).Endpoints {
			out[e.Hostname] = e.Ready
		}
		return out
	}
	// db-1-east's gateway is down: its endpoint mirror says not ready.
	want := map[string]bool{"db-0": true, "db-0-east": true, "db-1-east": false, "db-2-east": false}
	for name, src := range map[string]*source.Source{"streamed": streamed, "paged": paged} {
		if got := ready(src); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: endpoints %v, want %v", name, got, want)
		}
		if svc := src.Service(ns, "other-0"); svc != nil {
			t.Errorf("%s: holds a Service nothing reads", name)
		}
	}

	// The watch after either list keeps the index: the gateway comes back.
	down.Endpoints[0].Conditions.Ready = new(true)
	cur, err := c.DiscoveryV1().EndpointSlices(ns).Get(t.Context(), down.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Endpoints = down.Endpoints
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Update(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want["db-1-east"] = true
	for name, src := range map[string]*source.Source{"streamed": streamed, "paged": paged} {
		if err := await.Poll(t.Context(), 10*time.Second, 20*time.Millisecond, func(context.Context) string {
			if got := ready(src); !reflect.DeepEqual(got, want) {
				return fmt.Sprintf("%s: endpoints %v, want %v", name, got, want)
			}
			return ""
		}); err != nil {
			t.Error(err)
		}
	}
}

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
	startSynced(t, ctx, src)
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

// A feed that lists without streaming because its API server does not (1.33)
// asks again at its next list: after the control plane is upgraded in place
// (the API server restarted on 1.37, etcd compacted so that every watch
// lists again), its lists stream, without a restart of the feed's process.
func TestAControlPlaneUpgradedInPlaceIsStreamedFromAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	from, err := localkube.Release("1.33")
	if err != nil {
		t.Fatal(err)
	}
	to, err := localkube.Release("1.37")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	env, err := localkube.Start(ctx, localkube.Options{Clusters: []string{"upgrade"}, Dir: filepath.Join(t.TempDir(), "clusters"),
		APIServer: from, StopOnSignal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	cluster := env.Cluster("upgrade")
	c := cluster.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	peer := fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}
	mirror := fixture.HeadlessMirror(ns, "db", "east", peer)
	create(t, c, mirror, fixture.Slice(mirror, "db-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("db-0", "10.1.0.1")))

	// Every feed's counters, a resource's feeds each apart (two read
	// EndpointSlices).
	fs := &feeds{}
	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	src, err := source.New(source.Config{Client: c, API: cluster.Config, Namespaces: []string{ns}, LocalSelector: sel, Counters: fs.counters})
	if err != nil {
		t.Fatal(err)
	}
	startSynced(t, ctx, src)
	if got := fs.paths(); !slices.Equal(got, []kubeclient.Path{kubeclient.Paged}) {
		t.Fatalf("on 1.33 the lists took %v, want paged", got)
	}

	lists := fs.lists()
	if _, err := cluster.CompactEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartAPIServerFrom(ctx, to); err != nil {
		t.Fatal(err)
	}
	v, err := c.Discovery().ServerVersion()
	if err != nil || v.Minor != "37" {
		t.Fatalf("upgraded to %v (%v), want 1.37", v, err)
	}
	// A change after the upgrade reaches the index through the new lists.
	create(t, c, fixture.Slice(mirror, "db-east-2", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("db-1", "10.1.0.2")))
	if err := await.Poll(ctx, 60*time.Second, 20*time.Millisecond, func(context.Context) string {
		if n := fs.lists(); n <= lists {
			return fmt.Sprintf("a feed has not listed again (%d lists each)", n)
		}
		if got := fs.paths(); !slices.Equal(got, []kubeclient.Path{kubeclient.Streamed}) {
			return fmt.Sprintf("after the upgrade the lists took %v, want streamed", got)
		}
		if n := len(aggregate.Aggregate(src.Input(source.Key{Namespace: ns, Base: "db"})).Endpoints); n != 2 {
			return fmt.Sprintf("db has %d endpoints, want 2", n)
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	fs.each(func(f *feed) {
		per[f.resource]++
		if f.paged.Load() == 0 || f.streamed.Load() == 0 {
			t.Errorf("a feed of %s: %d lists paged, %d streamed; want both", f.resource, f.paged.Load(), f.streamed.Load())
		}
	})
	if per["services"] < 1 || per["endpointslices"] < 2 {
		t.Errorf("feeds counted by resource: %v; want every one (services, and two of endpointslices)", per)
	}
}
