package global

import (
	"context"
	"net/netip"
	"strings"

	"github.com/coredns/coredns/request"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/miekg/dns"
)

// serveReverse answers a name in a reverse zone (the reverse option): for an
// address a ready endpoint's global per-pod name resolves to, one PTR, that
// name; anything else is the next plugin's. Readiness, collisions and removal
// follow the forward names, since both come from the same answer sets.
func (g *Global) serveReverse(ctx context.Context, state request.Request, zi int, zone string) (int, error) {
	ip, ok := reverseAddr(state.QName())
	if !ok {
		return g.next(ctx, state.W, state.Req)
	}
	target, ok := g.ctrl.reverse(ip)
	if !ok {
		return g.next(ctx, state.W, state.Req)
	}
	if state.QType() != dns.TypePTR {
		return g.negative(ctx, state, zi, zone, dns.RcodeSuccess) // the name exists, without that type
	}
	return writeOne(ctx, state, dns.PTR{Hdr: dns.RR_Header{Name: state.QName(), Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: g.ttl}, Ptr: target})
}

// reverseAddr is the address a reverse name (d.c.b.a.in-addr.arpa., or 32
// nibbles then ip6.arpa.) stands for, in any letter case, and false for any
// other name: as netip.ParseAddr of dnsutil.ExtractAddressFromReverse, but
// without allocating, since every reverse name of the cluster passes here.
func reverseAddr(name string) (netip.Addr, bool) {
	const v4, v6 = ".in-addr.arpa.", "ip6.arpa." // 32 nibbles and their dots before v6
	switch {
	case len(name) > len(v4) && equalASCIIFold(name[len(name)-len(v4):], v4):
		var a [4]byte
		rest := name[:len(name)-len(v4)]
		for i := 3; i >= 0; i-- {
			label := rest
			if i > 0 {
				dot := strings.IndexByte(rest, '.')
				if dot < 0 {
					return netip.Addr{}, false
				}
				label, rest = rest[:dot], rest[dot+1:]
			}
			n, ok := octet(label)
			if !ok {
				return netip.Addr{}, false
			}
			a[i] = n
		}
		return netip.AddrFrom4(a), true
	case len(name) == 64+len(v6) && equalASCIIFold(name[64:], v6):
		var a [16]byte
		for i := range 32 {
			n, ok := nibble(name[2*i])
			if !ok || name[2*i+1] != '.' {
				return netip.Addr{}, false
			}
			// The first label is the last nibble.
			if j := 31 - i; j%2 == 0 {
				a[j/2] |= n << 4
			} else {
				a[j/2] |= n
			}
		}
		return netip.AddrFrom16(a), true
	}
	return netip.Addr{}, false
}

// octet is a decimal label of 0 to 255 without leading zeros.
func octet(s string) (byte, bool) {
	if len(s) == 0 || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return byte(n), n <= 255
}

// nibble is one hex digit, either case.
func nibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ptrEntry is one address and the per-pod name that resolves to it.
type ptrEntry struct {
	addr netip.Addr
	name string
}

// ptrEntries are the addresses of the view's endpoints whose per-pod name
// answers (ready, or drained at the shared level only), each with that
// name in zone. Endpoints without a hostname, or that lost it (collisions,
// invalid names), have none.
func ptrEntries(v aggregate.View, zone string) []ptrEntry {
	var out []ptrEntry
	for _, ep := range v.Endpoints {
		if !ep.NameReady || ep.Hostname == "" {
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
