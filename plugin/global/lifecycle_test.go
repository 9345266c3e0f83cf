package global

import (
	"context"
	"errors"
	"fmt"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/fixture"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/test"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// summary is a short form of an answer (see dnsq.Summary), or "next:<rcode>"
// when the plugin passed the query on.
func summary(t testing.TB, g *Global, qname string, qtype uint16) string {
	t.Helper()
	resp, rcode, err := serve(g, qname, qtype, false)
	if err == nil && resp == nil {
		return "next:" + strconv.Itoa(rcode)
	}
	return dnsq.Summary(resp, err)
}

func eventually(t *testing.T, g *Global, qname string, qtype uint16, want string) {
	t.Helper()
	if err := await.Poll(t.Context(), 10*time.Second, 5*time.Millisecond, func(context.Context) string {
		if got := summary(t, g, qname, qtype); got != want {
			return fmt.Sprintf("got %q", got)
		}
		return ""
	}); err != nil {
		t.Fatalf("%s %s, want %q: %v", qname, dns.TypeToString[qtype], want, err)
	}
}

func bump(m *metav1.ObjectMeta) {
	n, _ := strconv.Atoi(m.ResourceVersion)
	m.ResourceVersion = strconv.Itoa(n + 1)
}

const dbGlobal = "db-global.ns.svc.cluster.local."

func TestNotSyncedServfail(t *testing.T) {
	// An API server that never answers the list: the feeds never sync.
	client := fake.NewClientset(testWorld()...)
	var lists atomic.Int32
	client.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		return true, nil, errors.New("API server unavailable")
	})
	g, err := newFromFake(defaultConfig(), client)
	if err != nil {
		t.Fatal(err)
	}
	g.Next = test.NextHandler(passedOn, nil)
	listeningInstance(g) // as CoreDNS's servers would: only the sync is missing
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.ctrl.start(ctx)
	// Every feed has tried to list and failed at least once.
	waitFor(t, 10*time.Second, "failed lists", func() bool { return lists.Load() >= 3 })
	if g.Ready() {
		t.Fatal("Ready() before the feeds synced")
	}
	for _, tc := range []test.Case{
		{Qname: dbGlobal, Qtype: dns.TypeA, Rcode: dns.RcodeServerFailure, Authoritative: true, Ns: soa()},
		{Qname: "db-0.db-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeServerFailure, Authoritative: true, Ns: soa()},
		{Qname: "_peer._tcp.unknown-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeServerFailure, Authoritative: true, Ns: soa()},
		{Qname: "a.b.c.db-global.ns.svc.cluster.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeServerFailure, Authoritative: true, Ns: soa()},
		// Like the kubernetes plugin: SOA below the apex needs no data.
		{Qname: dbGlobal, Qtype: dns.TypeSOA, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	} {
		resp, _, _ := serve(g, tc.Qname, tc.Qtype, false)
		if resp == nil {
			t.Errorf("%s: passed on before sync", tc.Qname)
			continue
		}
		if err := test.SortAndCheck(resp, tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
	}
	// Names that cannot be globals are not delayed.
	for _, name := range []string{"db.ns.svc.cluster.local.", "example.org.", "db-global.ns.pod.cluster.local.", "-global.ns.svc.cluster.local.", "db-global.svc.cluster.local."} {
		if got := summary(t, g, name, dns.TypeA); got != "next:"+strconv.Itoa(passedOn) {
			t.Errorf("%s before sync: %s, want next plugin", name, got)
		}
	}
}

func TestSyncThenAnswer(t *testing.T) {
	// Not started: SERVFAIL; started: answers, Ready.
	client := fake.NewClientset(testWorld()...)
	g, err := newFromFake(defaultConfig(), client)
	if err != nil {
		t.Fatal(err)
	}
	g.Next = test.NextHandler(passedOn, nil)
	listeningInstance(g) // as CoreDNS's servers would: Ready waits for the sync alone
	if got := summary(t, g, dbGlobal, dns.TypeA); got != "SERVFAIL +soa" {
		t.Fatalf("before start: %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.ctrl.start(ctx)
	waitFor(t, 10*time.Second, "ready", g.Ready)
	if got := summary(t, g, dbGlobal, dns.TypeA); got != "NOERROR 192.0.2.1,192.0.2.10,192.0.2.11,192.0.2.22" {
		t.Fatalf("after sync: %q", got)
	}
}

// TestUpdates follows the life of a global through the feeds: link,
// scale, readiness, gateway, conflict, unlink.
func TestUpdates(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	g, ctx := h.g, context.Background()
	slices_ := h.client.DiscoveryV1().EndpointSlices("ns")
	services := h.client.CoreV1().Services("ns")

	// A new cluster is linked: its pods answer.
	north := fixture.HeadlessMirror("ns", "db", "north", peer)
	if _, err := services.Create(ctx, north, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	northSlice := fixture.Slice(north, "db-north-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
		fixture.Ready("db-0", "192.0.2.100"), fixture.Ready("db-1", "192.0.2.101"))
	if _, err := slices_.Create(ctx, northSlice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, g, "db-1-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.101")
	eventually(t, g, dbGlobal, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.10,192.0.2.100,192.0.2.101,192.0.2.11,192.0.2.22")

	// Scaled down: db-1 leaves the slice.
	northSlice.Endpoints = northSlice.Endpoints[:1]
	bump(&northSlice.ObjectMeta)
	if _, err := slices_.Update(ctx, northSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, g, "db-1-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NXDOMAIN +soa")
	eventually(t, g, dbGlobal, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.10,192.0.2.100,192.0.2.11,192.0.2.22")

	// Not ready.
	northSlice.Endpoints[0].Conditions.Ready = new(false)
	bump(&northSlice.ObjectMeta)
	if _, err := slices_.Update(ctx, northSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, g, "db-0-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NXDOMAIN +soa")
	northSlice.Endpoints[0].Conditions.Ready = nil
	bump(&northSlice.ObjectMeta)
	if _, err := slices_.Update(ctx, northSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, g, "db-0-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.100")

	// Gateway down: the endpoint mirror's endpoints turn not ready.
	emSvc, emSlice := fixture.EndpointMirror("ns", "db-0-north", "north", "db-north", true)
	if _, err := services.Create(ctx, emSvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r0 := testutil.ToFloat64(rebuildsTotal)
	if _, err := slices_.Create(ctx, emSlice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRebuilt(t, r0)
	eventually(t, g, "db-0-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.100")
	emSlice.Endpoints[0].Conditions.Ready = new(false)
	bump(&emSlice.ObjectMeta)
	if _, err := slices_.Update(ctx, emSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, g, "db-0-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NXDOMAIN +soa")
	// ... and back.
	emSlice.Endpoints[0].Conditions.Ready = nil
	bump(&emSlice.ObjectMeta)
	if _, err := slices_.Update(ctx, emSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, g, "db-0-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.100")

	// A user creates a Service named like the global: the name is theirs.
	user := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db-global", Namespace: "ns", UID: uid(), ResourceVersion: "1"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.99"},
	}
	if _, err := services.Create(ctx, user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, g, dbGlobal, dns.TypeA, "next:"+strconv.Itoa(passedOn))
	eventually(t, g, "db-0.db-global.ns.svc.cluster.local.", dns.TypeA, "next:"+strconv.Itoa(passedOn))
	if err := services.Delete(ctx, "db-global", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, g, dbGlobal, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.10,192.0.2.100,192.0.2.11,192.0.2.22")

	// Unlinked: every mirror of db goes; the local service alone makes no
	// global, and no Service owns the name: it does not exist.
	for _, name := range []string{"db-east", "db-west", "db-north", "db-0-west", "db-2-west", "db-0-north"} {
		if err := services.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, g, dbGlobal, dns.TypeA, "NXDOMAIN +soa")
	eventually(t, g, "db-0.db-global.ns.svc.cluster.local.", dns.TypeA, "NXDOMAIN +soa")

	// A global whose last ready endpoint leaves: NXDOMAIN while the mirror exists.
	eventually(t, g, "nohost-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.30,192.0.2.31")
	for _, name := range []string{"nohost-1", "nohost-2"} {
		if err := slices_.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, g, "nohost-global.ns.svc.cluster.local.", dns.TypeA, "NXDOMAIN +soa")
}

func configFrom(t testing.TB, stanza string) *config {
	t.Helper()
	cfg, err := parse(caddy.NewTestController("dns", stanza))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestFallthrough(t *testing.T) {
	h := startHarness(t, configFrom(t, "global {\n fallthrough\n}"), testWorld()...)
	next := "next:" + strconv.Itoa(passedOn)
	for _, q := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"db-9.db-global.ns.svc.cluster.local.", dns.TypeA, next},                   // NXDOMAIN -> next
		{"empty-global.ns.svc.cluster.local.", dns.TypeA, next},                     // NXDOMAIN -> next
		{"a.b.c.db-global.ns.svc.cluster.local.", dns.TypeA, next},                  // NXDOMAIN -> next
		{"db-1-east.db-global.ns.svc.cluster.local.", dns.TypeAAAA, "NOERROR +soa"}, // NODATA stays
		{"db-1-east.db-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.11"},
	} {
		if got := summary(t, h.g, q.name, q.qtype); got != q.want {
			t.Errorf("%s %s: %q, want %q", q.name, dns.TypeToString[q.qtype], got, q.want)
		}
	}

	// Fallthrough for other zones only: our NXDOMAIN stays.
	h = startHarness(t, configFrom(t, "global {\n fallthrough example.org\n}"), testWorld()...)
	if got := summary(t, h.g, "db-9.db-global.ns.svc.cluster.local.", dns.TypeA); got != "NXDOMAIN +soa" {
		t.Errorf("fallthrough example.org: %q", got)
	}
}

func TestTTL(t *testing.T) {
	for _, ttl := range []uint32{0, 30, 3600} {
		h := startHarness(t, configFrom(t, fmt.Sprintf("global {\n ttl %d\n}", ttl)), testWorld()...)
		resp, _, _ := serve(h.g, dbGlobal, dns.TypeSRV, false)
		for _, rr := range append(resp.Answer, resp.Extra...) {
			if rr.Header().Ttl != ttl {
				t.Errorf("ttl %d: %s", ttl, rr)
			}
		}
		resp, _, _ = serve(h.g, "db-9.db-global.ns.svc.cluster.local.", dns.TypeA, false)
		soa := resp.Ns[0].(*dns.SOA)
		if soa.Hdr.Ttl != min(ttl, 300) || soa.Minttl != ttl {
			t.Errorf("ttl %d: SOA %s", ttl, soa)
		}
		resp, _, _ = serve(h.g, "_peer._tcp.db-global.ns.svc.cluster.local.", dns.TypeA, false)
		for _, rr := range resp.Answer {
			if rr.Header().Ttl != ttl {
				t.Errorf("ttl %d: %s", ttl, rr)
			}
		}
	}
}

func TestZones(t *testing.T) {
	h := startHarness(t, configFrom(t, "global local example.org cluster.local"), testWorld()...)
	for _, q := range []struct{ name, want string }{
		{"db-0-east.db-global.ns.svc.example.org.", "NOERROR 7000 db-0-east.db-global.ns.svc.example.org.,8080 db-0-east.db-global.ns.svc.example.org."},
		// The longest zone wins: cluster.local, not local.
		{"db-0-east.db-global.ns.svc.cluster.local.", "NOERROR 7000 db-0-east.db-global.ns.svc.cluster.local.,8080 db-0-east.db-global.ns.svc.cluster.local."},
		{"db-0-east.db-global.ns.svc.local.", "NOERROR 7000 db-0-east.db-global.ns.svc.local.,8080 db-0-east.db-global.ns.svc.local."},
		{"db-0-east.db-global.ns.svc.cluster.example.", "next:" + strconv.Itoa(passedOn)},
	} {
		if got := summary(t, h.g, q.name, dns.TypeSRV); got != q.want {
			t.Errorf("%s: %q, want %q", q.name, got, q.want)
		}
	}
	resp, _, _ := serve(h.g, "nope.db-global.ns.svc.example.org.", dns.TypeA, false)
	if soa := resp.Ns[0].(*dns.SOA); soa.Hdr.Name != "example.org." || soa.Ns != "ns.dns.example.org." || soa.Mbox != "hostmaster.example.org." {
		t.Errorf("SOA for example.org: %s", soa)
	}
}

func TestNamespacesSuffixSelector(t *testing.T) {
	objs := testWorld()
	// The same world in a second namespace.
	other := fixture.HeadlessMirror("other", "db", "east", peer)
	objs = append(objs, other, fixture.Slice(other, "db-east-o", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("db-0", "192.0.2.200")))

	h := startHarness(t, configFrom(t, "global {\n namespaces other\n}"), objs...)
	if got := summary(t, h.g, dbGlobal, dns.TypeA); got != "next:"+strconv.Itoa(passedOn) {
		t.Errorf("unwatched namespace: %q", got)
	}
	if got := summary(t, h.g, "db-global.other.svc.cluster.local.", dns.TypeA); got != "NOERROR 192.0.2.200" {
		t.Errorf("watched namespace: %q", got)
	}

	h = startHarness(t, configFrom(t, "global {\n suffix -all\n local_selector none\n}"), objs...)
	if got := summary(t, h.g, dbGlobal, dns.TypeA); got != "next:"+strconv.Itoa(passedOn) {
		t.Errorf("old suffix: %q", got)
	}
	// No local member: db-0 (local) is gone, the mirrors stay.
	if got := summary(t, h.g, "db-all.ns.svc.cluster.local.", dns.TypeA); got != "NOERROR 192.0.2.10,192.0.2.11,192.0.2.22" {
		t.Errorf("suffix -all, no local: %q", got)
	}

	h = startHarness(t, configFrom(t, "global {\n local_selector app=db\n}"), objs...)
	if got := summary(t, h.g, dbGlobal, dns.TypeA); got != "NOERROR 192.0.2.10,192.0.2.11,192.0.2.22" {
		t.Errorf("selector app=db (no local service has it): %q", got)
	}
}

func TestMetrics(t *testing.T) {
	before := testutil.ToFloat64(requestsTotal.WithLabelValues("", "A", "NOERROR"))
	beforeNX := testutil.ToFloat64(requestsTotal.WithLabelValues("", "other", "NXDOMAIN"))
	globals0, endpoints0 := testutil.ToFloat64(globalsGauge), testutil.ToFloat64(endpointsGauge)
	lists0 := map[string]float64{}
	for _, r := range []string{"services", "endpointslices"} {
		lists0[r] = testutil.ToFloat64(feedMetrics.Lists.WithLabelValues(r, "paged"))
	}

	h := startHarness(t, defaultConfig(), testWorld()...)
	// One list per feed: Services; mirror slices and local slices; in
	// pages, as a fake client cannot stream.
	for r, want := range map[string]float64{"services": 1, "endpointslices": 2} {
		if d := testutil.ToFloat64(feedMetrics.Lists.WithLabelValues(r, "paged")) - lists0[r]; d != want {
			t.Errorf("lists_total{%s,paged} +%v, want +%v", r, d, want)
		}
	}
	serve(h.g, dbGlobal, dns.TypeA, false)
	serve(h.g, "nope.db-global.ns.svc.cluster.local.", dns.TypeTXT, false)
	serve(h.g, "example.org.", dns.TypeA, false) // passed on: not counted
	if d := testutil.ToFloat64(requestsTotal.WithLabelValues("", "A", "NOERROR")) - before; d != 1 {
		t.Errorf("requests_total{A,NOERROR} +%v, want +1", d)
	}
	if d := testutil.ToFloat64(requestsTotal.WithLabelValues("", "other", "NXDOMAIN")) - beforeNX; d != 1 {
		t.Errorf("requests_total{other,NXDOMAIN} +%v, want +1", d)
	}
	// db (4 v4 endpoints + 1 v6), nohost 3, portless 1, empty 0, managed 1,
	// v6only 1, dup 3.
	if d := testutil.ToFloat64(globalsGauge) - globals0; d != 7 {
		t.Errorf("globals +%v, want +7", d)
	}
	if d := testutil.ToFloat64(endpointsGauge) - endpoints0; d != 14 {
		t.Errorf("endpoints +%v, want +14", d)
	}
	h.cancel()
	if g, e := testutil.ToFloat64(globalsGauge), testutil.ToFloat64(endpointsGauge); g != globals0 || e != endpoints0 {
		t.Errorf("after shutdown: globals %v endpoints %v, want %v %v", g, e, globals0, endpoints0)
	}

	// Every metric is registered with the default registry under coredns_global_.
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "coredns_global_") {
			names = append(names, mf.GetName())
		}
	}
	for _, want := range []string{"coredns_global_requests_total", "coredns_global_globals", "coredns_global_endpoints", "coredns_global_build_info"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s not registered (have %v)", want, names)
		}
	}
}

func TestProblemsAndSkipped(t *testing.T) {
	objs := testWorld()
	// A mirror without a cluster name (skipped) and a hostname collision
	// between two clusters (a problem).
	bad := fixture.HeadlessMirror("ns", "bad", "east", peer)
	delete(bad.Labels, aggregate.LabelClusterName)
	c1 := fixture.HeadlessMirror("ns", "col", "a", peer)
	c2 := fixture.HeadlessMirror("ns", "col", "b", peer)
	c1.Annotations[aggregate.AnnotationRemoteFQName] = "col.ns.svc.cluster.local"
	objs = append(objs, bad, c1, c2,
		fixture.Slice(c1, "col-a", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("x", "192.0.2.150")),
		// "x-b" from b and a local-looking "x-b" can't collide; make the
		// names collide through a hostname that already carries the suffix.
		fixture.Slice(c2, "col-b", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready(strings.Repeat("h", 62), "192.0.2.151")))
	skipped0 := testutil.ToFloat64(skippedTotal.WithLabelValues("Service", string(aggregate.SkipMissingClusterName)))
	problems0 := testutil.ToFloat64(problemsTotal.WithLabelValues(aggregate.ReasonInvalidHostname))
	h := startHarness(t, defaultConfig(), objs...)
	if d := testutil.ToFloat64(skippedTotal.WithLabelValues("Service", string(aggregate.SkipMissingClusterName))) - skipped0; d < 1 {
		t.Errorf("skipped_objects_total{Service,MissingClusterName} +%v, want >= 1", d)
	}
	if d := testutil.ToFloat64(problemsTotal.WithLabelValues(aggregate.ReasonInvalidHostname)) - problems0; d != 1 {
		t.Errorf("problems_total{InvalidHostname} +%v, want 1", d)
	}
	// The endpoint that lost its (too long) name keeps its address, under the dashed IP.
	if got := summary(t, h.g, "192-0-2-151.col-global.ns.svc.cluster.local.", dns.TypeA); got != "NOERROR 192.0.2.151" {
		t.Errorf("dashed name of an endpoint whose hostname is invalid: %q", got)
	}
}

// TestManagedGlobalWithoutMembers: once the last headless mirror of a base is
// gone, a Service globalmirror wrote for it (left behind by a controller that
// is down or behind) does not send its names to the next plugin, which would
// answer from those stale objects: the plugin answers NXDOMAIN itself. A
// user's Service of that name still goes to the next plugin.
func TestManagedGlobalWithoutMembers(t *testing.T) {
	objs := testWorld()
	// A controller's leftover with no member at all from the start.
	objs = append(objs, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ghost-global", Namespace: "ns", UID: uid(), ResourceVersion: "1",
			Labels: map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: "ghost"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: fixture.ServicePorts(peer)},
	})
	globals0 := testutil.ToFloat64(globalsGauge)
	h := startHarness(t, defaultConfig(), objs...)
	ctx := context.Background()
	nx := func(name string) {
		t.Helper()
		for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV} {
			for _, tcp := range []bool{false, true} {
				resp, _, err := serve(h.g, name, qtype, tcp)
				if err != nil || resp == nil {
					t.Fatalf("%s %s: passed on or failed (%v); want NXDOMAIN from the plugin", name, dns.TypeToString[qtype], err)
				}
				tc := test.Case{Qname: name, Qtype: qtype, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()}
				if err := test.SortAndCheck(resp, tc); err != nil {
					t.Errorf("%s %s: %v", name, dns.TypeToString[qtype], err)
				}
			}
		}
	}
	nx("ghost-global.ns.svc.cluster.local.")
	nx("g-0.ghost-global.ns.svc.cluster.local.")
	nx("_peer._tcp.ghost-global.ns.svc.cluster.local.")
	if d := testutil.ToFloat64(globalsGauge) - globals0; d != 7 {
		t.Errorf("globals +%v, want +7: a global without members is not counted", d)
	}

	// managed-global answers while its mirror exists ...
	eventually(t, h.g, "managed-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.70")
	// ... and is NXDOMAIN the moment the mirror goes, whatever its Service says.
	if err := h.client.CoreV1().Services("ns").Delete(ctx, "managed-east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, h.g, "managed-global.ns.svc.cluster.local.", dns.TypeA, "NXDOMAIN +soa")
	nx("managed-global.ns.svc.cluster.local.")
	nx("m-0-east.managed-global.ns.svc.cluster.local.")
	nx("_peer._tcp.managed-global.ns.svc.cluster.local.")
	if d := testutil.ToFloat64(globalsGauge) - globals0; d != 6 {
		t.Errorf("globals +%v, want +6", d)
	}
	// A local service alone makes no global: NXDOMAIN too while our Service is there.
	local := fixture.LocalService("ns", "managed", peer)
	if _, err := h.client.CoreV1().Services("ns").Create(ctx, local, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r0 := testutil.ToFloat64(rebuildsTotal)
	if _, err := h.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, fixture.Slice(local, "managed-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("m-0", "192.0.2.71")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRebuilt(t, r0)
	nx("managed-global.ns.svc.cluster.local.")
	nx("m-0.managed-global.ns.svc.cluster.local.")

	// Once the controller deleted its Service, the name is nobody's: still
	// NXDOMAIN, whatever the kubernetes plugin's lagging caches have of it.
	r0 = testutil.ToFloat64(rebuildsTotal)
	if err := h.client.CoreV1().Services("ns").Delete(ctx, "managed-global", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRebuilt(t, r0)
	nx("managed-global.ns.svc.cluster.local.")
	nx("m-0.managed-global.ns.svc.cluster.local.")

	// A user's Service of a global's name is still theirs, members or not.
	if got := summary(t, h.g, "taken-global.ns.svc.cluster.local.", dns.TypeA); got != "next:"+strconv.Itoa(passedOn) {
		t.Errorf("user-owned taken-global: %s, want next plugin", got)
	}
	r0 = testutil.ToFloat64(rebuildsTotal)
	if err := h.client.CoreV1().Services("ns").Delete(ctx, "taken-east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRebuilt(t, r0)
	if got := summary(t, h.g, "taken-global.ns.svc.cluster.local.", dns.TypeA); got != "next:"+strconv.Itoa(passedOn) {
		t.Errorf("user-owned taken-global without members: %s, want next plugin", got)
	}
}

// TestProgrammingDuration: the histogram observes changes after the initial
// sync only: from the feeds' delivery where the slice carries no
// last-change-trigger-time (Linkerd's never do), from the trigger time where
// a change brings a newer one; a change that leaves the answers as they were
// is no programming.
func TestProgrammingDuration(t *testing.T) {
	sample := func() (uint64, float64) {
		var m dto.Metric
		if err := programmingDuration.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	objs := testWorld()
	// Old trigger times in the initial list must not be observed.
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Add(-time.Hour).Format(time.RFC3339Nano)}
		}
	}
	n0, _ := sample()
	h := startHarness(t, defaultConfig(), objs...)
	if n, _ := sample(); n != n0 {
		t.Fatalf("the initial sync observed %d programming durations, want none", n-n0)
	}
	ctx := context.Background()
	slices_ := h.client.DiscoveryV1().EndpointSlices("ns")

	// A Linkerd-like slice (no trigger time) of a new mirror: timed from delivery.
	north := fixture.HeadlessMirror("ns", "db", "north", peer)
	if _, err := h.client.CoreV1().Services("ns").Create(ctx, north, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	northSlice := fixture.Slice(north, "db-north-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("db-0", "192.0.2.100"))
	if _, err := slices_.Create(ctx, northSlice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, h.g, "db-0-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.100")
	waitFor(t, 5*time.Second, "an observation", func() bool { n, _ := sample(); return n > n0 })
	n1, sum1 := sample()
	if sum1 > 5 {
		t.Errorf("delivery-timed observation took %vs in total, want well under a second", sum1)
	}

	// A change stamped 30 s ago (a newer trigger than any member's): timed from it.
	northSlice.Endpoints = append(northSlice.Endpoints, fixture.Slice(north, "", discoveryv1.AddressTypeIPv4, nil, fixture.Ready("db-1", "192.0.2.101")).Endpoints...)
	northSlice.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Add(-30 * time.Second).Format(time.RFC3339Nano)}
	bump(&northSlice.ObjectMeta)
	if _, err := slices_.Update(ctx, northSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, h.g, "db-1-north.db-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.101")
	waitFor(t, 5*time.Second, "a second observation", func() bool { n, _ := sample(); return n > n1 })
	n2, sum2 := sample()
	if n2 != n1+1 || sum2-sum1 < 30 {
		t.Errorf("trigger-timed change: %d observations adding %vs, want 1 of at least 30s", n2-n1, sum2-sum1)
	}

	// A change to nothing the index keeps (a label; source's tests show it
	// tells nothing), then one that answers nothing new (a newer trigger
	// time alone): neither observes anything.
	r0 := testutil.ToFloat64(rebuildsTotal)
	northSlice.Labels["unrelated"] = "x"
	bump(&northSlice.ObjectMeta)
	if _, err := slices_.Update(ctx, northSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	northSlice.Annotations[corev1.EndpointsLastChangeTriggerTime] = time.Now().Add(-20 * time.Second).Format(time.RFC3339Nano)
	bump(&northSlice.ObjectMeta)
	if _, err := slices_.Update(ctx, northSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRebuilt(t, r0)
	if n, _ := sample(); n != n2 {
		t.Errorf("an update that changed no answer observed %d programming durations", n-n2)
	}
}

// waitRebuilt waits until an answer set was rebuilt since the rebuilds
// counter read r0: the change made after that read has been processed.
func waitRebuilt(t *testing.T, r0 float64) {
	t.Helper()
	waitFor(t, 5*time.Second, "a rebuild", func() bool { return testutil.ToFloat64(rebuildsTotal) > r0 })
}

// nativeFixture is the test world with the local db opted into native names.
func nativeFixture() []runtime.Object {
	objs := testWorld()
	for _, o := range objs {
		if svc, ok := o.(*corev1.Service); ok && svc.Name == "db" {
			svc.Annotations = map[string]string{aggregate.AnnotationIncludeMirrors: "true"}
		}
	}
	return objs
}

// TestNativeNames: a local service that opted in answers under its own name
// what its global answers, per-pod names included, and nothing else changes;
// opting out gives the name back to the next plugin at once.
func TestNativeNames(t *testing.T) {
	h := startHarness(t, defaultConfig(), nativeFixture()...)
	next := "next:" + strconv.Itoa(passedOn)
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"db.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.1,192.0.2.10,192.0.2.11,192.0.2.22"},
		{"db.ns.svc.cluster.local.", dns.TypeAAAA, "NOERROR 2001:db8::1"},
		{"db-0.db.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.1"},
		{"db-0-east.db.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.10"},
		{"db-0-west.db.ns.svc.cluster.local.", dns.TypeA, "NXDOMAIN +soa"}, // dead gateway
		{"_gossip._udp.db.ns.svc.cluster.local.", dns.TypeSRV, "NOERROR 7946 db-2-west.db.ns.svc.cluster.local."},
		{dbGlobal, dns.TypeA, "NOERROR 192.0.2.1,192.0.2.10,192.0.2.11,192.0.2.22"},
		{"lonely.ns.svc.cluster.local.", dns.TypeA, next}, // not opted in
		{"db-east.ns.svc.cluster.local.", dns.TypeA, next},
	} {
		if got := summary(t, h.g, tc.name, tc.qtype); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.name, dns.TypeToString[tc.qtype], got, tc.want)
		}
	}
	svc, err := h.client.CoreV1().Services("ns").Get(context.Background(), "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = nil
	bump(&svc.ObjectMeta)
	if _, err := h.client.CoreV1().Services("ns").Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, h.g, "db.ns.svc.cluster.local.", dns.TypeA, next)
	eventually(t, h.g, "db-0-east.db.ns.svc.cluster.local.", dns.TypeA, next)
	if got := summary(t, h.g, dbGlobal, dns.TypeA); got != "NOERROR 192.0.2.1,192.0.2.10,192.0.2.11,192.0.2.22" {
		t.Errorf("db-global after opting out: %q", got)
	}
}

// TestNativeDifferential: native names answer what the kubernetes plugin
// answers from the local service's slices plus the controller's.
func TestNativeDifferential(t *testing.T) {
	h := startHarness(t, defaultConfig(), nativeFixture()...)
	ref := reference(t, h.g.ctrl.src, []string{"cluster.local."}, userService())
	next := &countingHandler{next: ref}
	h.g.Next = next
	n := 0
	for _, name := range diffNames(h) {
		for _, qt := range diffQtypes {
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			compare(t, h.g, ref, m)
			n++
		}
	}
	if resp, _, _ := serve(h.g, "db-0-east.db.ns.svc.cluster.local.", dns.TypeA, false); resp == nil {
		t.Error("the plugin did not answer a native per-pod name itself")
	}
	t.Logf("compared %d queries, %d passed on", n, next.n)
}
