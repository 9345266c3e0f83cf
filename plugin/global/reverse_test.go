package global

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/plugin/test"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ptr is the PTR answer for addr: the target, or "next" when passed on, or
// the summary of any other answer.
func ptr(t *testing.T, g *Global, addr string, qtype uint16) string {
	t.Helper()
	name, err := dns.ReverseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	resp, rcode, err := serve(g, name, qtype, false)
	switch {
	case err != nil:
		return "error " + err.Error()
	case resp == nil && rcode == passedOn:
		return "next"
	case len(resp.Answer) == 1 && resp.Rcode == dns.RcodeSuccess:
		if p, ok := resp.Answer[0].(*dns.PTR); ok && resp.Authoritative {
			return p.Ptr
		}
	}
	return summary(t, g, name, qtype)
}

// TestReverse: with the reverse option, an address a ready endpoint's global
// per-pod name resolves to answers exactly one PTR, that name; every other
// address is the next plugin's.
func TestReverse(t *testing.T) {
	h := startHarness(t, configFrom(t, "global {\n reverse\n}"), testWorld()...)
	for addr, want := range map[string]string{
		"192.0.2.1":    "db-0.db-global.ns.svc.cluster.local.",
		"2001:db8::1":  "db-0.db-global.ns.svc.cluster.local.",
		"192.0.2.10":   "db-0-east.db-global.ns.svc.cluster.local.",
		"192.0.2.22":   "db-2-west.db-global.ns.svc.cluster.local.",
		"192.0.2.70":   "m-0-east.managed-global.ns.svc.cluster.local.",
		"2001:db8::90": "v-0-east.v6only-global.ns.svc.cluster.local.",
		"192.0.2.2":    "next", // not ready
		"192.0.2.20":   "next", // behind a dead gateway
		"192.0.2.30":   "next", // no hostname, no per-pod name
		"192.0.2.60":   "next", // a user owns taken-global
		"192.0.2.80":   "next", // a local service alone makes no global
		"192.0.2.99":   "next", // unknown
	} {
		if got := ptr(t, h.g, addr, dns.TypePTR); got != want {
			t.Errorf("PTR %s: %q, want %q", addr, got, want)
		}
	}
	// The name exists: other types are NODATA, with the reverse zone's SOA.
	resp, _, _ := serve(h.g, "10.2.0.192.in-addr.arpa.", dns.TypeA, false)
	if err := test.SortAndCheck(resp, test.Case{Qname: "10.2.0.192.in-addr.arpa.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess,
		Authoritative: true, Ns: []dns.RR{test.SOA("in-addr.arpa.	5	IN	SOA	ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 0 7200 1800 86400 5")}}); err != nil {
		t.Errorf("A of a known reverse name: %v", err)
	}
	// Names that are no address are passed on.
	for _, name := range []string{"2.0.192.in-addr.arpa.", "in-addr.arpa.", "x.10.2.0.192.in-addr.arpa."} {
		if got := summary(t, h.g, name, dns.TypePTR); got != "next:"+strconv.Itoa(passedOn) {
			t.Errorf("%s: %q, want the next plugin", name, got)
		}
	}

	// Removal and readiness follow the forward names at once.
	ctx := context.Background()
	if err := h.client.CoreV1().Services("ns").Delete(ctx, "db-east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, h.g, "db-0-east.db-global.ns.svc.cluster.local.", dns.TypeA, "NXDOMAIN +soa")
	if got := ptr(t, h.g, "192.0.2.10", dns.TypePTR); got != "next" {
		t.Errorf("PTR of a removed endpoint: %q", got)
	}
}

// TestReverseOneNamePerAddress: an address under two per-pod names answers
// the least of them; the one that lost its name in a collision has none.
func TestReverseOneNamePerAddress(t *testing.T) {
	local := fixture.LocalService("ns", "db", peer)
	east := fixture.HeadlessMirror("ns", "db", "east", peer)
	web := fixture.HeadlessMirror("ns", "web", "east", peer)
	webSlice := fixture.Slice(web, "web-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("x", "192.0.2.1"))
	h := startHarness(t, configFrom(t, "global {\n reverse in-addr.arpa\n}"), local, east, web, webSlice,
		fixture.Slice(local, "db-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("db-0-east", "192.0.2.1")),
		fixture.Slice(east, "db-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("db-0", "192.0.2.10")))
	for addr, want := range map[string]string{
		"192.0.2.1":  "db-0-east.db-global.ns.svc.cluster.local.", // also x-east.web-global...
		"192.0.2.10": "next",                                      // lost db-0-east to the local pod
	} {
		if got := ptr(t, h.g, addr, dns.TypePTR); got != want {
			t.Errorf("PTR %s: %q, want %q", addr, got, want)
		}
	}
	if err := h.client.DiscoveryV1().EndpointSlices("ns").Delete(context.Background(), "db-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, h.g, "db-0-east.db-global.ns.svc.cluster.local.", dns.TypeA, "NOERROR 192.0.2.10")
	for addr, want := range map[string]string{
		"192.0.2.1":  "x-east.web-global.ns.svc.cluster.local.",
		"192.0.2.10": "db-0-east.db-global.ns.svc.cluster.local.", // its name back
	} {
		if got := ptr(t, h.g, addr, dns.TypePTR); got != want {
			t.Errorf("after the local pod left, PTR %s: %q, want %q", addr, got, want)
		}
	}
	// Only the configured reverse zone: ip6.arpa is not this plugin's.
	if got := ptr(t, h.g, "2001:db8::1", dns.TypePTR); got != "next" {
		t.Errorf("ip6.arpa without it configured: %q", got)
	}
}

// TestReverseOff: without the option, reverse names are never the plugin's.
func TestReverseOff(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	if got := ptr(t, h.g, "192.0.2.10", dns.TypePTR); got != "next" {
		t.Errorf("PTR without the reverse option: %q", got)
	}
}

// TestReverseAddrIsExtractAddressFromReverse: the allocation-free parse
// agrees with CoreDNS's own on reverse names and on anything else.
func TestReverseAddrIsExtractAddressFromReverse(t *testing.T) {
	names := []string{
		"1.0.0.127.in-addr.arpa.", "1.0.0.127.IN-ADDR.ARPA.", "255.255.255.255.in-addr.arpa.", "0.0.0.0.in-addr.arpa.",
		"256.0.0.1.in-addr.arpa.", "01.0.0.1.in-addr.arpa.", "1.0.0.in-addr.arpa.", "1.1.0.0.127.in-addr.arpa.",
		"a.0.0.1.in-addr.arpa.", ".0.0.1.in-addr.arpa.", "1..0.1.in-addr.arpa.", "in-addr.arpa.", "1.0.0.127.in-addr.arpa",
		"1.0.0.127.xin-addr.arpa.", `1\.0.0.127.in-addr.arpa.`, "1000.0.0.1.in-addr.arpa.",
		"b.a.9.8.7.6.5.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0.0.0.0.0.1.2.3.4.ip6.arpa.",
		"B.A.9.8.7.6.5.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0.0.0.0.0.1.2.3.4.IP6.ARPA.",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.",
		"g.a.9.8.7.6.5.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0.0.0.0.0.1.2.3.4.ip6.arpa.",
		"a.9.8.7.6.5.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0.0.0.0.0.1.2.3.4.ip6.arpa.",
		"ba.9.8.7.6.5.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0.0.0.0.0.1.2.3.4.ip6.arpa.",
		"0.8.e.f.ip6.arpa.", "ip6.arpa.", "www.example.com.", ".", "",
	}
	for _, n := range names {
		want, wantErr := netip.ParseAddr(dnsutil.ExtractAddressFromReverse(strings.ToLower(n)))
		got, ok := reverseAddr(n)
		if ok != (wantErr == nil) || (ok && got != want) {
			t.Errorf("reverseAddr(%q) = %v, %v; CoreDNS: %v, %v", n, got, ok, want, wantErr)
		}
	}
}
