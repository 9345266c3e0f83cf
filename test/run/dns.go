package run

import (
	"context"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/miekg/dns"
)

// WaitDNS polls addr until a query over UDP and one over TCP both get a reply
// (any rcode) or ctx ends; p, if given, exiting first ends the wait early.
// CoreDNS's ready plugin listens before the DNS servers do (caddy runs the
// OnStartup callbacks, where ready starts, before it starts the servers), so
// a 200 from /ready does not mean the DNS port is open yet.
func WaitDNS(ctx context.Context, addr string, p *Process) error {
	q := new(dns.Msg).SetQuestion("ready.check.invalid.", dns.TypeA)
	for _, network := range []string{"udp", "tcp"} {
		client := &dns.Client{Net: network, Timeout: 500 * time.Millisecond}
		if err := poll(ctx, p, 20*time.Millisecond, addr+" answered DNS over "+network, func() error {
			_, err := dnsq.Exchange(ctx, client, q, addr)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
