package global

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	_ "github.com/coredns/coredns/plugin/hosts"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// BenchmarkServeDNSScale is the in-process twin of `make bench`'s dnsperf
// comparison of the plugin with its ceiling, the hosts plugin serving the
// same names and addresses: 9-record A answers, names asked in a shuffled
// order so that every lookup works on the whole index, as dnsperf's does.
// Without the network and the other blocks, it isolates the lookup's cost.
func BenchmarkServeDNSScale(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		g, _, stop := startLarge(b, largeWorld(n, false), nil)
		hosts := largeHosts(b, n)
		queries := largeQueries(n)
		b.Run(fmt.Sprintf("globals=%d/global", n), func(b *testing.B) { serveAll(b, g, queries) })
		b.Run(fmt.Sprintf("globals=%d/hosts", n), func(b *testing.B) { serveAll(b, hosts, queries) })
		stop()
	}
}

// largeHosts is the hosts plugin with n large globals' names and addresses.
func largeHosts(b *testing.B, n int) plugin.Handler {
	var lines strings.Builder
	for i := range n {
		for c := range largeClusters {
			for p := range largePods {
				fmt.Fprintf(&lines, " %s %s-global.bench.svc.cluster.local\n", largeAddr(i, c, p), largeBase(i))
			}
		}
	}
	c := caddy.NewTestController("dns", "hosts {\n no_reverse\n ttl 5\n"+lines.String()+"}")
	c.ServerBlockKeys = []string{"cluster.local."} // the zone, as a server block gives it
	setup, err := caddy.DirectiveAction("dns", "hosts")
	if err != nil {
		b.Fatal(err)
	}
	if err := setup(c); err != nil {
		b.Fatal(err)
	}
	return dnsserver.GetConfig(c).Plugin[0](test.NextHandler(dns.RcodeBadCookie, nil))
}

// largeQueries are A queries of every large global, in a fixed shuffled order.
func largeQueries(n int) []*dns.Msg {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	qs := make([]*dns.Msg, n)
	for j, i := range rng.Perm(n) {
		qs[j] = new(dns.Msg).SetQuestion(largeBase(i)+"-global.bench.svc.cluster.local.", dns.TypeA)
	}
	return qs
}

type nopWriter struct{ test.ResponseWriter }

func (nopWriter) WriteMsg(*dns.Msg) error { return nil }

func serveAll(b *testing.B, h plugin.Handler, queries []*dns.Msg) {
	ctx, w := context.Background(), &nopWriter{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if rc, _ := h.ServeDNS(ctx, w, queries[i]); rc != dns.RcodeSuccess {
			b.Fatalf("%s: rcode %d", queries[i].Question[0].Name, rc)
		}
		if i++; i == len(queries) {
			i = 0
		}
	}
}
