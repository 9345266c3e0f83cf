package global

import (
	"context"
	"net/netip"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/request"
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
	r, rrs, recs := newReply[dns.PTR](1)
	recs[0] = dns.PTR{Hdr: dns.RR_Header{Name: state.QName(), Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: g.ttl}, Ptr: target}
	rrs[0] = &recs[0]
	m := r.msg(state.Req)
	m.Answer = rrs
	state.W.WriteMsg(m)
	requestsTotal.WithLabelValues(metrics.WithServer(ctx), typeLabel(dns.TypePTR), dns.RcodeToString[dns.RcodeSuccess]).Inc()
	return dns.RcodeSuccess, nil
}
