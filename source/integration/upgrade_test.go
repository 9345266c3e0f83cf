package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
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

// A feed that lists in pages because its API server does not stream (1.33)
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
	src.Start(ctx)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !src.WaitForSync(wctx) {
		t.Fatal("did not sync")
	}
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
