package global

import (
	"context"
	"fmt"
	"github.com/globalmirror/globalmirror/test/fixture"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	_ "github.com/coredns/coredns/plugin/hosts"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// world is n globals "svcN-global" in "ns", each a mirror from east with three endpoints.
func world(n int) []runtime.Object {
	var objs []runtime.Object
	for i := range n {
		m := fixture.HeadlessMirror("ns", fmt.Sprintf("svc%d", i), "east", peer)
		a, b := i/250, i%250
		objs = append(objs, m, fixture.Slice(m, m.Name+"-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
			fixture.Ready("p-0", fmt.Sprintf("10.%d.%d.1", a, b)),
			fixture.Ready("p-1", fmt.Sprintf("10.%d.%d.2", a, b)),
			fixture.Ready("p-2", fmt.Sprintf("10.%d.%d.3", a, b))))
	}
	return objs
}

// hostsPlugin is CoreDNS's hosts plugin serving the same names and addresses,
// the performance ceiling for an in-memory answerer.
func hostsPlugin(b *testing.B, n int) plugin.Handler {
	var lines []string
	for i := range n {
		a, c := i/250, i%250
		for j := 1; j <= 3; j++ {
			lines = append(lines, fmt.Sprintf("10.%d.%d.%d svc%d-global.ns.svc.cluster.local", a, c, j, i))
		}
	}
	c := caddy.NewTestController("dns", "hosts {\n no_reverse\n ttl 5\n "+strings.Join(lines, "\n ")+"\n}")
	c.ServerBlockKeys = []string{"cluster.local."}
	setup, err := caddy.DirectiveAction("dns", "hosts")
	if err != nil {
		b.Fatal(err)
	}
	if err := setup(c); err != nil {
		b.Fatal(err)
	}
	return dnsserver.GetConfig(c).Plugin[0](test.NextHandler(passedOn, nil))
}

type discard struct{ test.ResponseWriter }

func (discard) WriteMsg(*dns.Msg) error { return nil }

func benchServe(b *testing.B, h plugin.Handler, qname string, qtype uint16) {
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	w := &discard{}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if rc, _ := h.ServeDNS(ctx, w, m); rc != dns.RcodeSuccess {
			b.Fatalf("rcode %d", rc)
		}
	}
}

// BenchmarkServeDNS compares the plugin with hosts (same names, same answer
// size) and with the kubernetes plugin on the converged objects, in process.
func BenchmarkServeDNS(b *testing.B) {
	const n = 1000
	h := startHarness(b, defaultConfig(), world(n)...)
	ref := reference(b, h.g.ctrl.src, []string{"cluster.local."})
	hosts := hostsPlugin(b, n)
	name := "svc500-global.ns.svc.cluster.local."
	b.Run("global/A", func(b *testing.B) { benchServe(b, h.g, name, dns.TypeA) })
	b.Run("hosts/A", func(b *testing.B) { benchServe(b, hosts, name, dns.TypeA) })
	b.Run("kubernetes/A", func(b *testing.B) { benchServe(b, ref, name, dns.TypeA) })
	b.Run("global/pod-A", func(b *testing.B) { benchServe(b, h.g, "p-1-east."+name, dns.TypeA) })
	b.Run("global/SRV", func(b *testing.B) { benchServe(b, h.g, name, dns.TypeSRV) })
	b.Run("kubernetes/SRV", func(b *testing.B) { benchServe(b, ref, name, dns.TypeSRV) })
	b.Run("global/port-SRV", func(b *testing.B) { benchServe(b, h.g, "_peer._tcp."+name, dns.TypeSRV) })
	b.Run("global/NXDOMAIN", func(b *testing.B) { benchServe(b, h.g, "nope."+name, dns.TypeA) })
	b.Run("global/next", func(b *testing.B) {
		m := new(dns.Msg)
		m.SetQuestion("kube-dns.kube-system.svc.cluster.local.", dns.TypeA)
		b.ReportAllocs()
		for b.Loop() {
			h.g.ServeDNS(context.Background(), &discard{}, m)
		}
	})
}

// TestAllocations keeps the query path lean: an A answer of up to 4 records
// is one allocation (the message, its question, the records and their slice
// together; three beyond), a negative answer one (with the SOA), a small SRV answer two
// (the records, and every target in one string), and nothing per lookup
// beyond that.
func TestAllocations(t *testing.T) {
	h := startHarness(t, defaultConfig(), world(10)...)
	for _, q := range []struct {
		name  string
		qtype uint16
		max   float64
	}{
		{"svc5-global.ns.svc.cluster.local.", dns.TypeA, 1},
		{"p-1-east.svc5-global.ns.svc.cluster.local.", dns.TypeA, 1},
		{"svc5-global.ns.svc.cluster.local.", dns.TypeSRV, 2},
		{"_peer._tcp.svc5-global.ns.svc.cluster.local.", dns.TypeSRV, 2},
		{"svc5-global.ns.svc.cluster.local.", dns.TypeAAAA, 1}, // NODATA
		{"nope.svc5-global.ns.svc.cluster.local.", dns.TypeA, 1},
		{"kube-dns.kube-system.svc.cluster.local.", dns.TypeA, 0},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		w := &discard{}
		got := testing.AllocsPerRun(200, func() { h.g.ServeDNS(context.Background(), w, m) })
		if got > q.max {
			t.Errorf("%s %s: %v allocations per query, want <= %v", q.name, dns.TypeToString[q.qtype], got, q.max)
		}
		t.Logf("%s %s: %v allocations", q.name, dns.TypeToString[q.qtype], got)
	}
}

// notGlobal are the names a cluster asks that `global` passes on: an
// existing Service, search-path misses of an external name, a pod name, a
// reverse name outside the mirrored ranges, a name outside its zones.
var notGlobal = []struct {
	name  string
	qtype uint16
}{
	{"kube-dns.kube-system.svc.cluster.local.", dns.TypeA},
	{"db.ns.svc.cluster.local.", dns.TypeAAAA},
	{"www.example.com.ns.svc.cluster.local.", dns.TypeA},
	{"www.example.com.svc.cluster.local.", dns.TypeA},
	{"www.example.com.cluster.local.", dns.TypeAAAA},
	{"10-0-0-1.ns.pod.cluster.local.", dns.TypeA},
	{"1.0.0.127.in-addr.arpa.", dns.TypePTR},
	{"www.example.com.", dns.TypeA},
}

// TestNamesNotGlobalCostNoAllocation: what `global` passes on, it passes
// without allocating (the chart puts it in front of every name of the
// cluster), and untouched: the next plugin gets the query and the writer
// `global` was handed.
func TestNamesNotGlobalCostNoAllocation(t *testing.T) {
	cfg := defaultConfig()
	cfg.reverseZones = []string{"in-addr.arpa.", "ip6.arpa."}
	h := startHarness(t, cfg, world(10)...)
	for _, q := range notGlobal {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		w := &discard{}
		var gotW dns.ResponseWriter
		var gotR *dns.Msg
		h.g.Next = plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
			gotW, gotR = w, r
			return dns.RcodeNameError, nil
		})
		if rc, _ := h.g.ServeDNS(context.Background(), w, m); rc != dns.RcodeNameError || gotW != w || gotR != m {
			t.Errorf("%s %s: rcode %d, passed on the writer %v and the query %v", q.name, dns.TypeToString[q.qtype], rc, gotW == w, gotR == m)
		}
		if got := testing.AllocsPerRun(200, func() { h.g.ServeDNS(context.Background(), w, m) }); got != 0 {
			t.Errorf("%s %s: %v allocations to pass it on, want 0", q.name, dns.TypeToString[q.qtype], got)
		}
	}
}

// BenchmarkNotGlobal: the names `global` passes on, through `global` in
// front of `kubernetes` as the chart configures it, and through
// `kubernetes` alone; the difference is what `global` costs every other
// name, which "global" alone (a next plugin that does nothing) shows.
func BenchmarkNotGlobal(b *testing.B) {
	cfg := defaultConfig()
	cfg.reverseZones = []string{"in-addr.arpa.", "ip6.arpa."}
	h := startHarness(b, cfg, world(1000)...)
	ref := reference(b, h.g.ctrl.src, []string{"cluster.local."})
	alone := *h.g
	alone.Next = plugin.HandlerFunc(func(context.Context, dns.ResponseWriter, *dns.Msg) (int, error) { return dns.RcodeNameError, nil })
	h.g.Next = ref
	for _, q := range notGlobal {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		for _, chain := range []struct {
			name string
			h    plugin.Handler
		}{{"global+kubernetes", h.g}, {"kubernetes", ref}, {"global", &alone}} {
			b.Run(chain.name+"/"+strings.TrimSuffix(q.name, ".")+"/"+dns.TypeToString[q.qtype], func(b *testing.B) {
				w := &discard{}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					chain.h.ServeDNS(ctx, w, m)
				}
			})
		}
	}
}

// TestInZone checks the allocation-free zone match against dns.IsSubDomain.
func TestInZone(t *testing.T) {
	names := []string{".", "local.", "cluster.local.", "Cluster.LOCAL.", "a.cluster.local.", "acluster.local.",
		`a\.cluster.local.`, `a\\.cluster.local.`, `a\\\.cluster.local.`, `cluster\.local.`, `x.cluster\.local.`,
		`\099luster.local.`, "a.b.c.cluster.local.", "cluster.local.org.", "local.cluster.", `a\..local.`}
	zones := []string{".", "local.", "cluster.local.", "c.cluster.local."}
	for _, n := range names {
		for _, z := range zones {
			if got, want := inZone(n, z), dns.IsSubDomain(z, n); got != want {
				t.Errorf("inZone(%q, %q) = %v, dns.IsSubDomain says %v", n, z, got, want)
			}
		}
	}
}
