package global

import (
	"context"
	"net"
	"strings"

	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// Replies are built per query, in few allocations of the size they need:
// an A or AAAA answer of up to 4 records is one allocation of the
// message, its question, the records and the slice of them. Nothing is pooled
// or reused: plugins before this one (cache) keep the records they are given.

// reply is a message and its question section.
type reply struct {
	m dns.Msg
	q [1]dns.Question
}

// negReply is a reply without answers and with the zone's SOA.
type negReply struct {
	reply
	ns  [1]dns.RR
	soa dns.SOA
}

// srvReply4 is an SRV reply of up to 4 records and 4 additional IPv4 addresses.
type srvReply4 struct {
	reply
	rr  [8]dns.RR
	srv [4]dns.SRV
	a   [4]dns.A
}

// replyOne is a reply of one record of type T, the answer to a pod's name.
type replyOne[T any] struct {
	reply
	rr   [1]dns.RR
	recs [1]T
}

// writeOne writes a reply of the one record rec, in one allocation, and
// counts it as a success of rec's type.
func writeOne[T any, P interface {
	*T
	dns.RR
}](ctx context.Context, state request.Request, rec T) (int, error) {
	r, rrs, recs := newReply[T](1)
	recs[0] = rec
	rrs[0] = P(&recs[0])
	m := r.msg(state.Req)
	m.Answer = rrs
	state.W.WriteMsg(m)
	requestsTotal.WithLabelValues(metrics.WithServer(ctx), typeLabel(rrs[0].Header().Rrtype), dns.RcodeToString[dns.RcodeSuccess]).Inc()
	return dns.RcodeSuccess, nil
}

// replyUpTo4 is a reply of 2 to 4 records of type T.
type replyUpTo4[T any] struct {
	reply
	rr   [4]dns.RR
	recs [4]T
}

// newReply allocates a reply with room for n records of type T: one
// allocation up to 4 records, three (each of its exact size) beyond. Bytes
// count as much as allocations: every byte allocated brings the next garbage
// collection, which marks the whole index, nearer; so one record, the most
// asked, has a type of its exact size, and 2 or 3 records leave the rest of
// replyUpTo4 unused rather than add a type for each.
func newReply[T any](n int) (*reply, []dns.RR, []T) {
	switch {
	case n == 1:
		r := new(replyOne[T])
		return &r.reply, r.rr[:], r.recs[:]
	case n >= 2 && n <= 4:
		r := new(replyUpTo4[T])
		return &r.reply, r.rr[:n:n], r.recs[:n:n]
	}
	return new(reply), make([]dns.RR, n), make([]T, n)
}

// msg sets up the authoritative, successful reply to req, as dns.Msg.SetReply does.
func (r *reply) msg(req *dns.Msg) *dns.Msg {
	m := &r.m
	m.Id = req.Id
	m.Response = true
	m.Opcode = req.Opcode
	if m.Opcode == dns.OpcodeQuery {
		m.RecursionDesired = req.RecursionDesired
		m.CheckingDisabled = req.CheckingDisabled
	}
	m.Rcode = dns.RcodeSuccess
	if len(req.Question) > 0 {
		r.q[0] = req.Question[0]
		m.Question = r.q[:1:1]
	}
	m.Authoritative = true
	return m
}

func setA(rr *dns.A, hdr dns.RR_Header, ip net.IP) {
	hdr.Rrtype = dns.TypeA
	rr.Hdr, rr.A = hdr, ip
}

func setAAAA(rr *dns.AAAA, hdr dns.RR_Header, ip net.IP) {
	hdr.Rrtype = dns.TypeAAAA
	rr.Hdr, rr.AAAA = hdr, ip
}

// addrReply is the reply with the selection's addresses of one family, owned
// by owner; nil when it has none. The addresses point into the answer set's slab.
func addrReply[T any, PT interface {
	*T
	dns.RR
}](sel *selection, req *dns.Msg, owner string, ttl uint32, v4 bool, set func(PT, dns.RR_Header, net.IP)) *dns.Msg {
	lo, hi := sel.s.family(v4)
	n := int(hi - lo)
	var list []uint32 // nil: all addresses of the family, lo to hi
	if sel.one || sel.filter {
		var buf [16]uint32
		list = sel.addrs(v4, buf[:0])
		n = len(list)
	}
	if n == 0 {
		return nil
	}
	r, rrs, recs := newReply[T](n)
	hdr := dns.RR_Header{Name: owner, Class: dns.ClassINET, Ttl: ttl}
	for i := range n {
		a := lo + uint32(i) // #nosec G115 -- i < n, a uint32 range
		if list != nil {
			a = list[i]
		}
		rr := PT(&recs[i])
		set(rr, hdr, sel.s.ip(a))
		rrs[i] = rr
	}
	m := r.msg(req)
	m.Answer = rrs
	return m
}

// srvReply is the reply with the selection's SRV records, owned by owner,
// targets in zone (as the query spells it), their addresses in the
// additional section; nil when it has none.
func srvReply(sel *selection, req *dns.Msg, owner, zone string, ttl uint32) *dns.Msg {
	var srvBuf, extraBuf [16]srvItem
	p := sel.planSRV(srvBuf[:0], extraBuf[:0])
	if len(p.srv) == 0 {
		return nil
	}
	s := sel.s
	suffix := [...]string{".", s.key, ".svc.", zone}
	suffixLen := 0
	for _, x := range suffix {
		suffixLen += len(x)
	}
	// Every distinct target in one string.
	var b strings.Builder
	b.Grow(p.hostsLen + p.hosts*suffixLen)
	var starts smallSet
	for _, it := range p.srv {
		if starts.add(uint64(it.rec.host), uint32(b.Len())) { // #nosec G115 -- DNS names are short
			b.WriteString(s.host(it.rec))
			for _, x := range suffix {
				b.WriteString(x)
			}
		}
	}
	targets := b.String()
	target := func(r *rec) string {
		o, _ := starts.get(uint64(r.host))
		return targets[o : o+s.hostLen(r)+uint32(suffixLen)] // #nosec G115 -- see above
	}

	weight := srvWeight(sel.entries())
	n6 := len(p.extra) - p.n4
	var (
		r    *reply
		rrs  []dns.RR
		srv  []dns.SRV
		a    []dns.A
		aaaa []dns.AAAA
	)
	if len(p.srv) <= 4 && p.n4 <= 4 && n6 == 0 {
		sr := new(srvReply4)
		r, rrs, srv = &sr.reply, sr.rr[:len(p.srv)+len(p.extra)], sr.srv[:len(p.srv)]
		a = sr.a[:0:p.n4]
	} else {
		r = new(reply)
		rrs = make([]dns.RR, len(p.srv)+len(p.extra))
		srv = make([]dns.SRV, len(p.srv))
		if p.n4 > 0 {
			a = make([]dns.A, 0, p.n4)
		}
		if n6 > 0 {
			aaaa = make([]dns.AAAA, 0, n6)
		}
	}
	for i, it := range p.srv {
		srv[i] = dns.SRV{
			Hdr:      dns.RR_Header{Name: owner, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl},
			Priority: 0, Weight: weight, Port: it.port, Target: target(it.rec),
		}
		rrs[i] = &srv[i]
	}
	extra := rrs[len(p.srv):len(p.srv)]
	for _, it := range p.extra {
		hdr := dns.RR_Header{Name: target(it.rec), Class: dns.ClassINET, Ttl: ttl}
		if s.isV4(it.rec.addr) {
			a = append(a, dns.A{})
			setA(&a[len(a)-1], hdr, s.ip(it.rec.addr))
		}
	}
	for i := range a {
		extra = append(extra, &a[i])
	}
	for _, it := range p.extra {
		hdr := dns.RR_Header{Name: target(it.rec), Class: dns.ClassINET, Ttl: ttl}
		if !s.isV4(it.rec.addr) {
			aaaa = append(aaaa, dns.AAAA{})
			setAAAA(&aaaa[len(aaaa)-1], hdr, s.ip(it.rec.addr))
		}
	}
	for i := range aaaa {
		extra = append(extra, &aaaa[i])
	}
	m := r.msg(req)
	m.Answer = rrs[:len(p.srv):len(p.srv)]
	m.Extra = extra[:len(extra):len(extra)]
	return m
}
