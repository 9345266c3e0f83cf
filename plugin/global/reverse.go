package global

import (
	"context"
	"net/netip"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/request"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/miekg/dns"
)

// serveReverse answers a name in a reverse zone (the reverse option): for an
// address a ready endpoint's global per-pod name resolves to, one PTR, that
// name; anything else is the next plugin's. Readiness, collisions and removal
// follow the forward names, since both come from the same answer sets.
func (g *Global) serveReverse(ctx context.Context, state request.Request, zi int, zone string) (int, error) {
	ip, err := netip.ParseAddr(dnsutil.ExtractAddressFromReverse(state.Name()))
	if err != nil {
		return plugin.NextOrFailure(g.Name(), g.Next, ctx, state.W, state.Req)
	}
	target, ok := g.ctrl.reverse(ip)
	if !ok {
		return plugin.NextOrFailure(g.Name(), g.Next, ctx, state.W, state.Req)
	}
	if state.QType() != dns.TypePTR {
		return g.negative(ctx, state, zi, zone, dns.RcodeSuccess) // the name exists, without that type
	}
	return writeOne(ctx, state, dns.PTR{Hdr: dns.RR_Header{Name: state.QName(), Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: g.ttl}, Ptr: target})
}

// ptrEntry is one address and the per-pod name that resolves to it.
type ptrEntry struct {
	addr netip.Addr
	name string
}

// ptrEntries are the addresses of the view's ready endpoints that have a
// per-pod name, each with that name in zone. Endpoints without a hostname,
// or that lost it (collisions, invalid names), have none.
func ptrEntries(v aggregate.View, zone string) []ptrEntry {
	var out []ptrEntry
	for _, ep := range v.Endpoints {
		if !ep.Ready || ep.Hostname == "" {
			continue
		}
		name := ep.Hostname + "." + v.Name + "." + v.Namespace + ".svc." + zone
		for _, a := range ep.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, ptrEntry{ip, name})
			}
		}
	}
	return out
}

// reverse returns the per-pod name an address answers PTR with: the least
// of the names that resolve to it, so that there is exactly one.
func (dc *dnsController) reverse(ip netip.Addr) (string, bool) {
	dc.mu.RLock()
	defer dc.mu.RUnlock()
	if names := dc.ptr[ip]; len(names) > 0 {
		return names[0], true
	}
	return "", false
}
