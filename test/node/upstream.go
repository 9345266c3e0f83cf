package node

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// upstream is the node's own resolver, the one pods with dnsPolicy Default
// (the cluster DNS) forward to: it stands in for the DNS outside the
// cluster. It holds a few external names (External), so that the cluster
// DNS's forward path is asked too; every other name the cluster DNS does
// not hold is NXDOMAIN, as in a real cluster, and no query leaves the
// namespace.
type upstream struct {
	servers []*dns.Server
}

// External are the names outside the cluster the upstream holds, with
// their one IPv4 address each (data only: nothing is sent to them).
var External = map[string]string{"example.org.": "203.0.113.80", "www.example.com.": "203.0.113.81"}

func startUpstream() (*upstream, error) {
	u := &upstream{}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeA {
			if addr, ok := External[strings.ToLower(r.Question[0].Name)]; ok {
				m.SetReply(r)
				m.Authoritative = true
				m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A: net.ParseIP(addr)}}
				_ = w.WriteMsg(m)
				return
			}
		}
		m.SetRcode(r, dns.RcodeNameError)
		m.Ns = []dns.RR{&dns.SOA{
			Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
			Ns:  "a.root-servers.invalid.", Mbox: "nstld.invalid.",
			Serial: 1, Refresh: 1800, Retry: 900, Expire: 604800, Minttl: 60,
		}}
		_ = w.WriteMsg(m)
	})
	addr := net.JoinHostPort(NodeIP, "53")
	for _, network := range []string{"udp", "tcp"} {
		started := make(chan error, 1)
		s := &dns.Server{Addr: addr, Net: network, Handler: handler, NotifyStartedFunc: func() { started <- nil }}
		go func() { started <- s.ListenAndServe() }()
		select {
		case err := <-started:
			if err != nil {
				u.stop()
				return nil, fmt.Errorf("upstream DNS on %s/%s: %w", addr, network, err)
			}
		case <-time.After(10 * time.Second):
			u.stop()
			return nil, fmt.Errorf("upstream DNS on %s/%s did not start", addr, network)
		}
		u.servers = append(u.servers, s)
	}
	return u, nil
}

func (u *upstream) stop() {
	for _, s := range u.servers {
		_ = s.Shutdown()
	}
}
