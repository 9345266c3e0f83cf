package node

import (
	"fmt"
	"net"
	"time"

	"github.com/miekg/dns"
)

// upstream is the node's own resolver, the one pods with dnsPolicy Default
// (the cluster DNS) forward to: it stands in for the DNS outside the
// cluster, which holds no name, so that every name the cluster DNS does not
// hold is NXDOMAIN, as in a real cluster, and no query leaves the namespace.
type upstream struct {
	servers []*dns.Server
}

func startUpstream() (*upstream, error) {
	u := &upstream{}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
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
