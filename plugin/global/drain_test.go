package global

import (
	"context"
	"github.com/globalmirror/globalmirror/test/fakeapi"
	"strconv"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/test"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/source"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// startLinked starts the plugin of stanza on objs and an API server that
// serves Linkerd's Links, links (whose client it returns, to edit them).
func startLinked(t *testing.T, stanza string, links []runtime.Object, objs ...runtime.Object) (*Global, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	cfg := configFrom(t, stanza)
	client := fake.NewClientset(objs...)
	fixture.ServeLinks(client)
	meta := fixture.LinkClient(links...)
	src, err := source.New(source.Config{Client: client, APIs: fakeapi.For(client), Links: meta, Namespaces: cfg.namespaces,
		Suffix: cfg.suffix, LocalSelector: cfg.localSelector, NoUIDs: true})
	if err != nil {
		t.Fatal(err)
	}
	g := newGlobal(cfg, newDNSController(src, cfg.controllerOptions()))
	g.Next = test.NextHandler(passedOn, nil)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := g.ctrl.start(ctx)
	t.Cleanup(func() { cancel(); <-stopped })
	waitFor(t, 10*time.Second, "index built", g.ctrl.ready)
	return g, meta
}

// TestDrainLevels: east drained at each level, through its Link, in every
// view; the local cluster drained through its service's annotation.
func TestDrainLevels(t *testing.T) {
	const (
		db       = "db-global.ns.svc.cluster.local."
		nohost   = "nohost-global.ns.svc.cluster.local."
		cs       = "db.ns.svc.clusterset.local."
		stanza   = "global {\n clusterset home\n reverse\n}"
		nxdomain = "NXDOMAIN +soa"
		nodata   = "NOERROR +soa"
	)
	// drainLocal is the test world with its local services db and nohost
	// drained at level.
	drainLocal := func(level string) []runtime.Object {
		world := testWorld()
		for _, o := range world {
			if svc, ok := o.(*corev1.Service); ok && (svc.Name == "db" || svc.Name == "nohost") {
				svc.SetAnnotations(map[string]string{aggregate.AnnotationDrain: level})
			}
		}
		return world
	}
	now := time.Now()
	type q struct {
		name  string
		qtype uint16
		want  string
	}
	for _, tc := range []struct {
		name  string
		links []runtime.Object
		world []runtime.Object
		want  []q
	}{
		{"east shared", []runtime.Object{fixture.Link("east", "shared", now), fixture.Link("west", "", now)}, testWorld(), []q{
			// Out of every shared answer...
			{db, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.22"},
			{db, dns.TypeSRV, "NOERROR 7000 db-0.db-global.ns.svc.cluster.local.,7000 db-2-west.db-global.ns.svc.cluster.local.,7946 db-2-west.db-global.ns.svc.cluster.local.,8080 db-0.db-global.ns.svc.cluster.local.,8080 db-2-west.db-global.ns.svc.cluster.local."},
			{"_peer._tcp." + db, dns.TypeSRV, "NOERROR 7000 db-0.db-global.ns.svc.cluster.local.,7000 db-2-west.db-global.ns.svc.cluster.local."},
			{cs, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.22"},
			// ... its pods' own names still answer, the dashed ones too ...
			{"db-0-east." + db, dns.TypeA, "NOERROR 192.0.2.10"},
			{"db-1-east." + db, dns.TypeSRV, "NOERROR 7000 db-1-east.db-global.ns.svc.cluster.local.,8080 db-1-east.db-global.ns.svc.cluster.local."},
			{"db-1-east." + db, dns.TypeAAAA, nodata},
			{"db-0.east." + cs, dns.TypeA, "NOERROR 192.0.2.10"},
			{"10.2.0.192.in-addr.arpa.", dns.TypePTR, "NOERROR db-0-east.db-global.ns.svc.cluster.local."},
		}},
		{"east all", []runtime.Object{fixture.Link("east", "all", now)}, testWorld(), []q{
			{db, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.22"},
			{"db-0-east." + db, dns.TypeA, nxdomain},
			{"db-0.east." + cs, dns.TypeA, nxdomain},
			{"10.2.0.192.in-addr.arpa.", dns.TypePTR, "next:" + strconv.Itoa(passedOn)},
			{"db-2-west." + db, dns.TypeA, "NOERROR 192.0.2.22"},
		}},
		{"local all", nil, drainLocal("all"), []q{
			{nohost, dns.TypeA, nxdomain},
			{"192-0-2-30." + nohost, dns.TypeA, nxdomain},
		}},
		{"local shared", nil, drainLocal("shared"), []q{
			{db, dns.TypeA, "NOERROR 192.0.2.10,192.0.2.11,192.0.2.22"},
			{db, dns.TypeAAAA, nodata},
			{"db-0." + db, dns.TypeA, "NOERROR 192.0.2.1"},
			{"db-0." + db, dns.TypeAAAA, "NOERROR 2001:db8::1"},
			{"db-1." + db, dns.TypeA, nxdomain}, // not ready, drained or not
			{"db-0.home." + cs, dns.TypeA, "NOERROR 192.0.2.1"},
			// The dashed names of the drained cluster answer too...
			{"192-0-2-30." + nohost, dns.TypeA, "NOERROR 192.0.2.30"},
			// ... so a global all of whose endpoints are drained exists
			// (its per-pod names are below it), with no records.
			{nohost, dns.TypeA, nodata},
			{nohost, dns.TypeSRV, nodata},
			{"nope." + nohost, dns.TypeA, nxdomain},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := startLinked(t, stanza, tc.links, tc.world...)
			if len(tc.links) > 0 {
				waitFor(t, 5*time.Second, "drains read", func() bool { return len(g.ctrl.src.Drains().Clusters) > 0 })
			}
			for _, q := range tc.want {
				eventually(t, g, q.name, q.qtype, q.want)
			}
		})
	}
}

// A process that started while Linkerd's gateway was in db-east answers
// east's pods from their endpoint mirrors (source/rewrite.go); a drain of
// east through its Link takes them out of the views and an undrain puts
// them back, as for pods Linkerd wrote.
func TestADrainOfAMirrorRebuiltFromItsEndpointMirrors(t *testing.T) {
	const (
		cs     = "db.ns.svc.clusterset.local."
		east0  = "db-0.east." + cs
		stanza = "global {\n clusterset home\n}"
	)
	var world []runtime.Object
	for _, o := range testWorld() {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok && s.Name == "db-east-1" {
			// Linkerd's gateway alone, without a hostname, where the pods were.
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.254"}}}
		}
		world = append(world, o)
	}
	for i, ip := range []string{"192.0.2.10", "192.0.2.11"} {
		svc, sl := fixture.EndpointMirror("ns", "db-"+strconv.Itoa(i)+"-east", "east", "db-east", true)
		svc.Spec.ClusterIP = ip
		world = append(world, svc, sl)
	}
	g, meta := startLinked(t, stanza, []runtime.Object{fixture.Link("east", "", time.Now())}, world...)
	links := meta.Resource(fixture.LinkGVR).Namespace("linkerd-multicluster")
	rv := 1
	drain := func(level string) {
		t.Helper()
		link := fixture.Link("east", level, time.Now())
		rv++
		link.SetResourceVersion(strconv.Itoa(rv))
		if _, err := links.Update(t.Context(), link, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	held := g.ctrl.src.Held() // db-east's, and the test world's unnamed mirrors'
	undrained := func(when string) {
		t.Helper()
		eventually(t, g, cs, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.10,192.0.2.11,192.0.2.22")
		eventually(t, g, east0, dns.TypeA, "NOERROR 192.0.2.10")
		eventually(t, g, "db-1-east."+dbGlobal, dns.TypeA, "NOERROR 192.0.2.11")
		if now := g.ctrl.src.Held(); now != held {
			t.Errorf("%s: %d headless mirrors held, %d at the start", when, now, held)
		}
	}
	undrained("started during the rewrite")
	for _, level := range []string{"shared", "all"} {
		drain(level)
		eventually(t, g, cs, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.22")
		want := "NOERROR 192.0.2.10" // a pod's own name answers through a shared drain
		if level == "all" {
			want = "NXDOMAIN +soa"
		}
		eventually(t, g, east0, dns.TypeA, want)
		drain("")
		undrained("undrained from " + level)
	}
}

// A set whose every record only its own name answers answers something:
// a change to or from it is a change (the programming metric observes it).
func TestSameAnswersSeesRecordsOnlyTheirNamesAnswer(t *testing.T) {
	ep := func(drained aggregate.Drain) aggregate.View {
		return aggregate.View{Namespace: "ns", Name: "db-global", Endpoints: []aggregate.Endpoint{{Addresses: []string{"192.0.2.1"},
			AddressType: discoveryv1.AddressTypeIPv4, Hostname: "db-0-east", Ready: drained == aggregate.NotDrained,
			NameReady: drained != aggregate.DrainAll, Drained: drained, Cluster: "east"}}}
	}
	shared, all, none := newAnswerSet(ep(aggregate.DrainShared)), newAnswerSet(ep(aggregate.DrainAll)), newAnswerSet(ep(aggregate.NotDrained))
	for _, tc := range []struct {
		name string
		a, b *answerSet
		same bool
	}{
		{"drained (shared) and none", shared, nil, false},
		{"none and drained (shared)", nil, shared, false},
		{"drained (all) and none", all, nil, true},
		{"drained (shared) and (all)", shared, all, false},
		{"drained (shared) and not", shared, none, false},
		{"drained (shared) twice", shared, newAnswerSet(ep(aggregate.DrainShared)), true},
	} {
		if got := sameAnswers(tc.a, tc.b); got != tc.same {
			t.Errorf("%s: same %v, want %v", tc.name, got, tc.same)
		}
	}
}
