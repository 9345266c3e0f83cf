package dnsq

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestSummary(t *testing.T) {
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	soa := rr("cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5")
	for _, tc := range []struct {
		msg  *dns.Msg
		want string
	}{
		{&dns.Msg{Answer: []dns.RR{rr("a. 5 IN A 198.51.100.3"), rr("a. 5 IN A 192.0.2.1")}}, "NOERROR 192.0.2.1,198.51.100.3"},
		{&dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError, Authoritative: true}, Ns: []dns.RR{soa}}, "NXDOMAIN +soa"},
		{&dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa}}, "NXDOMAIN"},
		{&dns.Msg{MsgHdr: dns.MsgHdr{Truncated: true}, Answer: []dns.RR{rr("_p._tcp.a. 5 IN SRV 0 50 5432 DB-0.a.")}}, "NOERROR TC 5432 db-0.a."},
		{&dns.Msg{Answer: []dns.RR{rr("a. 5 IN TXT \"x\""), rr("a. 5 IN AAAA 2001:db8::1")}}, "NOERROR 2001:db8::1,TXT"},
		{&dns.Msg{Answer: []dns.RR{rr("1.2.0.192.in-addr.arpa. 5 IN PTR DB-0.a.")}}, "NOERROR db-0.a."},
	} {
		if got := Summary(tc.msg, nil); got != tc.want {
			t.Errorf("Summary = %q, want %q", got, tc.want)
		}
	}
	if got := Summary(nil, errors.New("timeout")); got != "error: timeout" {
		t.Errorf("Summary of an error = %q", got)
	}
	// NoError is the Summary of the first answer above, its records in any order.
	if got, want := NoError("198.51.100.3", "192.0.2.1"), "NOERROR 192.0.2.1,198.51.100.3"; got != want {
		t.Errorf("NoError = %q, want %q", got, want)
	}
}

// TestExchangeRefusesItsOwnQuery connects a client's socket to itself, as the
// kernel may when it picks, for a client's ephemeral port, the very port of a
// DNS server that is restarting: the query comes back, and miekg/dns takes
// it for a NOERROR reply without answers. Exchange must not.
func TestExchangeRefusesItsOwnQuery(t *testing.T) {
	q := new(dns.Msg).SetQuestion("db-0.db-global.ns.svc.cluster.local.", dns.TypeA)
	for _, network := range []string{"udp", "tcp"} {
		c, addr := selfConnected(t, network)
		r, _, err := c.Exchange(q, addr)
		if err != nil {
			t.Fatalf("%s: the self-connected socket did not get its query back: %v", network, err)
		}
		if r.Response || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Fatalf("%s: read back %v, want the query itself", network, r)
		}
		c, addr = selfConnected(t, network) // a TCP port stays in TIME_WAIT
		if r, err := Exchange(t.Context(), c, q, addr); !errors.Is(err, ErrNotAResponse) {
			t.Errorf("%s: Exchange = %v, %v; want ErrNotAResponse", network, r, err)
		}
	}
}

// selfConnected is a client whose socket's own port is the server port it
// asks, which nothing listens on.
func selfConnected(t *testing.T, network string) (*dns.Client, string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var local net.Addr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	if network == "tcp" {
		local = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	}
	c := &dns.Client{Net: network, Timeout: time.Second, Dialer: &net.Dialer{LocalAddr: local}}
	return c, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
