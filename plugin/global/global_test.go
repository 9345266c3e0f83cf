package global

import (
	"context"
	"github.com/coredns/caddy"
	"sort"
	"strconv"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

const soaCL = "cluster.local.	5	IN	SOA	ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"

func soa() []dns.RR { return []dns.RR{test.SOA(soaCL)} }

// Every answer shape, from the fixture world (see testWorld()).
var cases = []test.Case{
	// The global service: every ready address of the family.
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{
			test.A("db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.1"),
			test.A("db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.10"),
			test.A("db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.11"),
			test.A("db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.22"),
		}},
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeAAAA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.AAAA("db-global.ns.svc.cluster.local.	5	IN	AAAA	2001:db8::1")}},
	// SRV: 11 entries (endpoint x port) -> weight 9; targets deduplicated by port.
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 7000 db-0.db-global.ns.svc.cluster.local."),
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 8080 db-0.db-global.ns.svc.cluster.local."),
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 7000 db-0-east.db-global.ns.svc.cluster.local."),
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 8080 db-0-east.db-global.ns.svc.cluster.local."),
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 7000 db-1-east.db-global.ns.svc.cluster.local."),
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 8080 db-1-east.db-global.ns.svc.cluster.local."),
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 7000 db-2-west.db-global.ns.svc.cluster.local."),
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 8080 db-2-west.db-global.ns.svc.cluster.local."),
			test.SRV("db-global.ns.svc.cluster.local.	5	IN	SRV	0 9 7946 db-2-west.db-global.ns.svc.cluster.local."),
		},
		Extra: []dns.RR{
			test.A("db-0.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.1"),
			test.AAAA("db-0.db-global.ns.svc.cluster.local.	5	IN	AAAA	2001:db8::1"),
			test.A("db-0-east.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.10"),
			test.A("db-1-east.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.11"),
			test.A("db-2-west.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.22"),
		}},
	// _port._proto: named port, underscores optional, wildcard "_".
	{Qname: "_gossip._udp.db-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.SRV("_gossip._udp.db-global.ns.svc.cluster.local.	5	IN	SRV	0 100 7946 db-2-west.db-global.ns.svc.cluster.local.")},
		Extra:  []dns.RR{test.A("db-2-west.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.22")}},
	{Qname: "gossip.udp.db-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.SRV("gossip.udp.db-global.ns.svc.cluster.local.	5	IN	SRV	0 100 7946 db-2-west.db-global.ns.svc.cluster.local.")},
		Extra:  []dns.RR{test.A("db-2-west.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.22")}},
	{Qname: "_gossip._udp.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.A("_gossip._udp.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.22")}},
	{Qname: "_peer._tcp.db-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{
			test.SRV("_peer._tcp.db-global.ns.svc.cluster.local.	5	IN	SRV	0 20 7000 db-0.db-global.ns.svc.cluster.local."),
			test.SRV("_peer._tcp.db-global.ns.svc.cluster.local.	5	IN	SRV	0 20 7000 db-0-east.db-global.ns.svc.cluster.local."),
			test.SRV("_peer._tcp.db-global.ns.svc.cluster.local.	5	IN	SRV	0 20 7000 db-1-east.db-global.ns.svc.cluster.local."),
			test.SRV("_peer._tcp.db-global.ns.svc.cluster.local.	5	IN	SRV	0 20 7000 db-2-west.db-global.ns.svc.cluster.local."),
		},
		Extra: []dns.RR{
			test.A("db-0.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.1"),
			test.AAAA("db-0.db-global.ns.svc.cluster.local.	5	IN	AAAA	2001:db8::1"),
			test.A("db-0-east.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.10"),
			test.A("db-1-east.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.11"),
			test.A("db-2-west.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.22"),
		}},
	{Qname: "_._udp.db-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.SRV("_._udp.db-global.ns.svc.cluster.local.	5	IN	SRV	0 100 7946 db-2-west.db-global.ns.svc.cluster.local.")},
		Extra:  []dns.RR{test.A("db-2-west.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.22")}},
	{Qname: "_nope._tcp.db-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	{Qname: "_peer._udp.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	{Qname: "_peer._tcp.db-global.ns.svc.cluster.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},

	// Per-pod names.
	{Qname: "db-0.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.A("db-0.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.1")}},
	{Qname: "db-0.db-global.ns.svc.cluster.local.", Qtype: dns.TypeAAAA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.AAAA("db-0.db-global.ns.svc.cluster.local.	5	IN	AAAA	2001:db8::1")}},
	{Qname: "db-0.db-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{
			test.SRV("db-0.db-global.ns.svc.cluster.local.	5	IN	SRV	0 25 7000 db-0.db-global.ns.svc.cluster.local."),
			test.SRV("db-0.db-global.ns.svc.cluster.local.	5	IN	SRV	0 25 8080 db-0.db-global.ns.svc.cluster.local."),
		},
		Extra: []dns.RR{
			test.A("db-0.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.1"),
			test.AAAA("db-0.db-global.ns.svc.cluster.local.	5	IN	AAAA	2001:db8::1"),
		}},
	{Qname: "db-1-east.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.A("db-1-east.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.11")}},
	{Qname: "db-1-east.db-global.ns.svc.cluster.local.", Qtype: dns.TypeAAAA, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "db-2-west.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.A("db-2-west.db-global.ns.svc.cluster.local.	5	IN	A	192.0.2.22")}},
	// Not ready (local), behind a dead gateway (west), unknown: NXDOMAIN.
	{Qname: "db-1.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	{Qname: "db-0-west.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	{Qname: "db-9.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	{Qname: "db-9.db-global.ns.svc.cluster.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	// SOA below the apex is NODATA, even for names that do not exist.
	{Qname: "db-9.db-global.ns.svc.cluster.local.", Qtype: dns.TypeSOA, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeSOA, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	// Too many labels: NXDOMAIN.
	{Qname: "a.b.c.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	{Qname: "x.db-0.db-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},

	// Other types of an existing name: NODATA.
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeMX, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeCNAME, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeNS, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypePTR, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "db-global.ns.svc.cluster.local.", Qtype: dns.TypeHTTPS, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},

	// Dashed-IP names for endpoints without hostnames.
	{Qname: "nohost-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{
			test.SRV("nohost-global.ns.svc.cluster.local.	5	IN	SRV	0 33 7000 192-0-2-30.nohost-global.ns.svc.cluster.local."),
			test.SRV("nohost-global.ns.svc.cluster.local.	5	IN	SRV	0 33 7000 192-0-2-31.nohost-global.ns.svc.cluster.local."),
			test.SRV("nohost-global.ns.svc.cluster.local.	5	IN	SRV	0 33 7000 2001-db8--30.nohost-global.ns.svc.cluster.local."),
		},
		Extra: []dns.RR{
			test.A("192-0-2-30.nohost-global.ns.svc.cluster.local.	5	IN	A	192.0.2.30"),
			test.A("192-0-2-31.nohost-global.ns.svc.cluster.local.	5	IN	A	192.0.2.31"),
			test.AAAA("2001-db8--30.nohost-global.ns.svc.cluster.local.	5	IN	AAAA	2001:db8::30"),
		}},
	{Qname: "192-0-2-31.nohost-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.A("192-0-2-31.nohost-global.ns.svc.cluster.local.	5	IN	A	192.0.2.31")}},
	{Qname: "2001-db8--30.nohost-global.ns.svc.cluster.local.", Qtype: dns.TypeAAAA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.AAAA("2001-db8--30.nohost-global.ns.svc.cluster.local.	5	IN	AAAA	2001:db8::30")}},

	// No ports: addresses, but SRV has nothing (NODATA).
	{Qname: "portless-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.A("portless-global.ns.svc.cluster.local.	5	IN	A	192.0.2.40")}},
	{Qname: "portless-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "pl-0-east.portless-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},

	// No ready endpoint: NXDOMAIN.
	{Qname: "empty-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	{Qname: "empty-global.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},
	{Qname: "empty-global.ns.svc.cluster.local.", Qtype: dns.TypeTXT, Rcode: dns.RcodeNameError, Authoritative: true, Ns: soa()},

	// IPv6 only.
	{Qname: "v6only-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true, Ns: soa()},
	{Qname: "v6only-global.ns.svc.cluster.local.", Qtype: dns.TypeAAAA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.AAAA("v6only-global.ns.svc.cluster.local.	5	IN	AAAA	2001:db8::90")}},

	// The controller's own Service does not block the plugin.
	{Qname: "managed-global.ns.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.A("managed-global.ns.svc.cluster.local.	5	IN	A	192.0.2.70")}},

	// Case-insensitive; owner names as queried, SRV targets keep the query's zone spelling.
	{Qname: "DB-0-East.DB-Global.NS.svc.cluster.local.", Qtype: dns.TypeA, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.A("DB-0-East.DB-Global.NS.svc.cluster.local.	5	IN	A	192.0.2.10")}},
	{Qname: "_GOSSIP._UDP.db-global.ns.SVC.Cluster.LOCAL.", Qtype: dns.TypeSRV, Rcode: dns.RcodeSuccess, Authoritative: true,
		Answer: []dns.RR{test.SRV("_GOSSIP._UDP.db-global.ns.SVC.Cluster.LOCAL.	5	IN	SRV	0 100 7946 db-2-west.db-global.ns.svc.Cluster.LOCAL.")},
		Extra:  []dns.RR{test.A("db-2-west.db-global.ns.svc.Cluster.LOCAL.	5	IN	A	192.0.2.22")}},
	{Qname: "DB-9.db-global.ns.svc.Cluster.Local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Authoritative: true,
		Ns: []dns.RR{test.SOA("Cluster.Local.	5	IN	SOA	ns.dns.Cluster.Local. hostmaster.Cluster.Local. 1 7200 1800 86400 5")}},
}

// notOurs are names the plugin passes on to the next plugin.
var notOurs = []struct {
	qname string
	qtype uint16
}{
	{"taken-global.ns.svc.cluster.local.", dns.TypeA},          // the user's Service
	{"db-0.taken-global.ns.svc.cluster.local.", dns.TypeA},     // ... and below it
	{"db.ns.svc.cluster.local.", dns.TypeA},                    // the member itself
	{"db-east.ns.svc.cluster.local.", dns.TypeSRV},             // a mirror
	{"db-global.ns.pod.cluster.local.", dns.TypeA},             // pod names
	{"db-global.ns.cluster.local.", dns.TypeA},                 // not svc
	{"ns.svc.cluster.local.", dns.TypeA},                       // namespace
	{"svc.cluster.local.", dns.TypeA},                          // svc
	{"cluster.local.", dns.TypeSOA},                            // apex
	{"-global.ns.svc.cluster.local.", dns.TypeA},               // the bare suffix
	{"db-global.ns.svc.example.org.", dns.TypeA},               // other zone
	{"db-global.ns.svc.cluster.local.example.org.", dns.TypeA}, // other zone
	{"example.org.", dns.TypeA},
	{".", dns.TypeNS},
	{"cluster.local.", dns.TypeAXFR},
}

func sortCase(tc test.Case) test.Case {
	for _, s := range [][]dns.RR{tc.Answer, tc.Ns, tc.Extra} {
		sort.Sort(test.RRSet(s))
	}
	return tc
}

func TestServeDNS(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	for _, tcp := range []bool{false, true} {
		for _, tc := range cases {
			tc := sortCase(tc)
			resp, _, err := serve(h.g, tc.Qname, tc.Qtype, tcp)
			if err != nil {
				t.Errorf("%s %s: error %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
				continue
			}
			if resp == nil {
				t.Errorf("%s %s: passed on to the next plugin, want an answer", tc.Qname, dns.TypeToString[tc.Qtype])
				continue
			}
			if err := test.SortAndCheck(resp, tc); err != nil {
				t.Errorf("%s %s: %v\n%s", tc.Qname, dns.TypeToString[tc.Qtype], err, resp)
			}
		}
	}
}

func TestNotOursPassesOn(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	for _, q := range notOurs {
		resp, rcode, _ := serve(h.g, q.qname, q.qtype, false)
		if resp != nil || rcode != passedOn {
			t.Errorf("%s %s: answered (rcode %d) %v; want the next plugin", q.qname, dns.TypeToString[q.qtype], rcode, resp)
		}
	}
}

// A global name that no Service owns does not exist: NXDOMAIN from the
// plugin itself, not the kubernetes plugin's answer, which lags the API after
// restarts and answered a global the controller had just deleted for 22 s
// (make faults). Only in namespaces it does not watch is the name another's.
func TestGlobalNameOfNoServiceIsNXDOMAIN(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	for _, qname := range []string{
		"lonely-global.ns.svc.cluster.local.",       // a local service alone makes no global
		"unknown-global.ns.svc.cluster.local.",      // no such base
		"db-0.unknown-global.ns.svc.cluster.local.", // ... and below it
		"db-global.other.svc.cluster.local.",        // another namespace, watched too
	} {
		if got := summary(t, h.g, qname, dns.TypeA); got != "NXDOMAIN +soa" {
			t.Errorf("%s: %s, want NXDOMAIN +soa", qname, got)
		}
	}
	c := caddy.NewTestController("dns", "global {\n namespaces ns\n}")
	cfg, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	h = startHarness(t, cfg, testWorld()...)
	if got := summary(t, h.g, "db-global.other.svc.cluster.local.", dns.TypeA); got != "next:"+strconv.Itoa(passedOn) {
		t.Errorf("db-global in a namespace not watched: %s, want the next plugin", got)
	}
}

func TestAXFRRefused(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	resp, rcode, err := serve(h.g, "db-global.ns.svc.cluster.local.", dns.TypeAXFR, true)
	if resp != nil || rcode != dns.RcodeRefused || err != nil {
		t.Fatalf("AXFR: got %v %d %v, want REFUSED without a written answer (as the kubernetes plugin)", resp, rcode, err)
	}
}

func TestNoQuestionPassesOn(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	rcode, _ := h.g.ServeDNS(context.Background(), rec, new(dns.Msg))
	if rcode != passedOn {
		t.Fatalf("empty question: rcode %d, want next plugin", rcode)
	}
}

// TestRootZoneAndOddNames: zone "." works, and names no wire message carries
// (empty, not fully qualified) are passed on without a panic.
func TestRootZoneAndOddNames(t *testing.T) {
	h := startHarness(t, configFrom(t, "global ."), testWorld()...)
	if got := summary(t, h.g, "db-0-east.db-global.ns.svc.", dns.TypeA); got != "NOERROR 192.0.2.10" {
		t.Errorf("zone .: %q", got)
	}
	for _, name := range []string{"", "db-global.ns.svc", "x"} {
		m := new(dns.Msg)
		m.Question = []dns.Question{{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}}
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if rcode, _ := h.g.ServeDNS(context.Background(), rec, m); rcode != passedOn {
			t.Errorf("%q: rcode %d, want the next plugin", name, rcode)
		}
	}
}
