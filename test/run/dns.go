package run

import (
	"context"
	"errors"
	"fmt"
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
	var last error
	for _, network := range []string{"udp", "tcp"} {
		client := &dns.Client{Net: network, Timeout: 500 * time.Millisecond}
		for {
			if _, err := dnsq.Exchange(ctx, client, q, addr); err == nil {
				break
			} else {
				last = err
			}
			if p != nil {
				if exited, werr := p.Exited(); exited {
					return fmt.Errorf("%s exited (%v) before %s answered DNS:\n%s", p.Name, werr, addr, p.Log(4000))
				}
			}
			select {
			case <-ctx.Done():
				return errors.Join(fmt.Errorf("%s did not answer DNS over %s: %w", addr, network, ctx.Err()), last)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}
