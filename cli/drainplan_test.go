package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/source"
	"github.com/globalmirror/globalmirror/test/fakeapi"
	"github.com/globalmirror/globalmirror/test/fixture"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// previewWorld indexes db (two local pods, two of east's, one of west's)
// and kv (one of east's alone), with links' drains.
func previewWorld(t *testing.T, links ...runtime.Object) *source.Source {
	t.Helper()
	ipv4 := discoveryv1.AddressTypeIPv4
	local, east, west := fixture.LocalService("ns", "db"), fixture.HeadlessMirror("ns", "db", "east"), fixture.HeadlessMirror("ns", "db", "west")
	kv := fixture.HeadlessMirror("ns", "kv", "east")
	objs := []runtime.Object{local, east, west, kv,
		fixture.Slice(local, "db-a", ipv4, nil, fixture.Ready("db-0", "10.0.0.1"), fixture.Ready("db-1", "10.0.0.2")),
		fixture.Slice(east, "db-east-a", ipv4, nil, fixture.Ready("db-0", "10.1.0.1"), fixture.Ready("db-1", "10.1.0.2")),
		fixture.Slice(west, "db-west-a", ipv4, nil, fixture.Ready("db-0", "10.2.0.1"), fixture.NotReady("db-1", "10.2.0.2")),
		fixture.Slice(kv, "kv-east-a", ipv4, nil, fixture.Ready("kv-0", "10.1.0.9")),
	}
	client := fake.NewClientset(objs...)
	fixture.ServeLinks(client)
	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	src, err := source.New(source.Config{Client: client, APIs: fakeapi.For(client), Links: fixture.LinkClient(links...), LocalSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	src.Start(ctx)
	if !src.WaitForSync(ctx) {
		t.Fatal("not synced")
	}
	return src
}

// A drain's preview names each global's endpoints leaving its shared names,
// and the globals left with none: the drain the command refuses unforced.
func TestPreviewNamesWhatLeavesAndWhatIsLeftEmpty(t *testing.T) {
	idx := previewWorld(t)
	p := PreviewDrain(idx, DrainChange{Cluster: "east", Level: aggregate.DrainShared})
	if len(p.Globals) != 2 {
		t.Fatalf("changed %+v", p.Globals)
	}
	db, kv := p.Globals[0], p.Globals[1]
	if db.Global != "ns/db-global" || !slices.Equal(db.Endpoints, []string{"db-0-east 10.1.0.1", "db-1-east 10.1.0.2"}) || db.ReadyBefore != 5 || db.ReadyAfter != 3 || db.Emptied() {
		t.Errorf("db: %+v", db)
	}
	if kv.Global != "ns/kv-global" || kv.ReadyBefore != 1 || kv.ReadyAfter != 0 || !slices.Equal(p.Left, []string{"ns/kv-global"}) {
		t.Errorf("kv: %+v, left %v", kv, p.Left)
	}

	// The local service's own drain (from this cluster: --service or
	// --exported) takes its pods out; kv has none.
	p = PreviewDrain(idx, DrainChange{Services: []string{"ns/db"}, Level: aggregate.DrainAll})
	if len(p.Globals) != 1 || !slices.Equal(p.Globals[0].Endpoints, []string{"db-0 10.0.0.1", "db-1 10.0.0.2"}) || len(p.Left) != 0 {
		t.Errorf("local drain: %+v", p)
	}
}

// An undrain's preview names what returns; a drain of a cluster already
// drained changes nothing.
func TestPreviewOfAnUndrainNamesWhatReturns(t *testing.T) {
	idx := previewWorld(t, fixture.LinkTo("prod-east", "east", "shared", time.Now()))
	waitUntil(t, func() bool { return len(idx.Drains().Clusters) == 1 })
	if p := PreviewDrain(idx, DrainChange{Cluster: "east", Level: aggregate.DrainShared}); len(p.Globals) != 0 {
		t.Errorf("drained again: %+v", p.Globals)
	}
	p := PreviewDrain(idx, DrainChange{Cluster: "east", Level: aggregate.NotDrained})
	if len(p.Globals) != 2 || p.Globals[1].ReadyBefore != 0 || p.Globals[1].ReadyAfter != 1 || len(p.Left) != 0 {
		t.Errorf("undrain: %+v", p.Globals)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// The drains check names every drain in force, says where a Link drain
// reaches no mirror and where a Link holds an unknown value, and is a
// warning, never an error; unreadable Links are "could not read".
func TestDrainsCheckSaysWhatItSawAndWhatItCouldNot(t *testing.T) {
	c := check{category: CategoryLinkerd, name: "drained clusters"}
	since := time.Now().Add(-time.Hour)
	g := globals{clusters: map[string]bool{"east": true}, annotated: map[string]string{"ns/db": "shared", "ns/kv": "yes"}, drains: source.Drains{
		LinksReadable: true,
		Clusters:      []source.ClusterDrain{{Cluster: "east", Level: aggregate.DrainAll, Since: since, Link: "linkerd-multicluster/prod-east"}, {Cluster: "south", Level: aggregate.DrainShared, Since: since, Link: "linkerd-multicluster/south"}},
		Services:      []source.ServiceDrain{{Service: "ns/db", Level: aggregate.DrainShared, Since: since}, {Service: "ns/db-west", Cluster: "west", Level: aggregate.DrainAll, Since: since}},
		InvalidLinks:  []string{`linkerd-multicluster/west: "true"`},
	}}
	r := checkDrains(context.Background(), c, nil, g)
	for _, want := range []string{
		"cluster east: all since", "Link linkerd-multicluster/prod-east",
		"Link linkerd-multicluster/south drains cluster south, of which there is no headless mirror here",
		"the local pods of ns/db: shared since", "west's pods of mirror ns/db-west: all since",
		`ns/kv: "yes", an unknown level that drains nothing`,
		`Link linkerd-multicluster/west: "true", an unknown level: each half keeps the drain the Link had`,
	} {
		if !strings.Contains(r.Detail, want) {
			t.Errorf("detail lacks %q:\n%s", want, r.Detail)
		}
	}
	if r.Result != Warning {
		t.Errorf("result %v, want a warning", r.Result)
	}
	g.drains.LinksReadable, g.drains.LinksUnreadable = false, "links.multicluster.linkerd.io is forbidden"
	if r := checkDrains(context.Background(), c, nil, g); r.Result != Warning || !strings.HasPrefix(r.Detail, "could not read Linkerd's Links (links.multicluster.linkerd.io is forbidden)") {
		t.Errorf("unreadable: %+v", r)
	}
	if r := checkDrains(context.Background(), c, nil, globals{drains: source.Drains{LinksNotServed: true}}); r.Result != OK || !strings.Contains(r.Detail, "serves no Linkerd Link") {
		t.Errorf("not served: %+v", r)
	}
}
