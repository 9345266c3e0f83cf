// Package global is a CoreDNS plugin that answers for globalmirror's global
// services (`<base>-global.<ns>.svc.<zone>`) straight from the members'
// EndpointSlices: the local headless service and Linkerd's headless mirrors of
// it. Its answers equal what the kubernetes plugin gives for the same names
// once the controller has written the global service's EndpointSlices, but
// they are there at once, and without the controller. From the same index it
// answers, on request, the native names of local services that opted in
// (`<base>.<ns>.svc.<zone>`), reverse names of per-pod names, and KEP-1645's
// `clusterset.local` names.
package global

import (
	"context"
	"strings"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	ot "github.com/opentracing/opentracing-go"
)

// Global is the plugin handler.
type Global struct {
	Next plugin.Handler

	// zones are every zone the plugin answers in, lower case and fully
	// qualified: the cluster zones, then the reverse zones, then the
	// clusterset zone; kinds says which each is.
	zones      []string
	kinds      []zoneKind
	soas       []soaNames
	suffix     string
	namespaces map[string]struct{} // nil: all
	ttl        uint32
	fall       fall.F

	// ctrl is the index it answers from, shared (index.go).
	ctrl *dnsController
	// inst is the CoreDNS instance it is part of (Ready); nil in tests
	// that make a plugin without CoreDNS.
	inst *instance
}

// zoneKind is what the plugin answers in a zone.
type zoneKind uint8

const (
	zoneCluster    zoneKind = iota // the global view: <base>-global.<ns>.svc.<zone>
	zoneReverse                    // PTR for the global view's per-pod names
	zoneClusterset                 // KEP-1645's view: <base>.<ns>.svc.clusterset.local
)

// soaNames are the precomputed names of a zone's SOA record.
type soaNames struct{ ns, mbox string }

func newGlobal(cfg *config, ctrl *dnsController) *Global {
	g := &Global{
		suffix: cfg.suffix,
		ttl:    cfg.ttl,
		fall:   cfg.fall,
		ctrl:   ctrl,
	}
	add := func(kind zoneKind, zones ...string) {
		for _, z := range zones {
			g.zones, g.kinds = append(g.zones, z), append(g.kinds, kind)
		}
	}
	add(zoneCluster, cfg.zones...)
	add(zoneReverse, cfg.reverseZones...)
	if cfg.clustersetZone != "" {
		add(zoneClusterset, cfg.clustersetZone)
	}
	for _, z := range g.zones {
		g.soas = append(g.soas, soaNames{ns: dnsutil.Join("ns.dns", z), mbox: dnsutil.Join("hostmaster", z)})
	}
	if len(cfg.namespaces) > 0 {
		g.namespaces = map[string]struct{}{}
		for _, ns := range cfg.namespaces {
			g.namespaces[ns] = struct{}{}
		}
	}
	return g
}

// Name implements plugin.Handler.
func (g *Global) Name() string { return pluginName }

// ServeDNS implements plugin.Handler.
func (g *Global) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 0 && !g.notMine(r.Question[0].Name) {
		return g.serve(ctx, w, r)
	}
	// As next does, but with no frame of next's between, and on a stack
	// grown at once to what the kubernetes plugin needs (see growStack).
	if g.Next != nil && ot.SpanFromContext(ctx) == nil {
		growStack()
		return g.Next.ServeDNS(ctx, w, r)
	}
	return g.next(ctx, w, r)
}

// growStack grows the calling goroutine's stack to 16 KiB, unless it is
// that large already. CoreDNS's UDP server answers each query on a new
// goroutine, whose stack starts small and is copied, every frame on it
// adjusted, each time it doubles; the kubernetes plugin's path needs about
// 16 KiB and made it double two or three times, deep in that path, a tenth
// of the server's CPU. Grown here, where few frames are on the stack, it is
// copied once and cheaply: names passed on to kubernetes cost less CPU than
// from kubernetes alone (bench section 8). A 12 KiB frame on top of what
// the stack holds here (about 1 KiB) needs a 16 KiB stack; 6 KiB (an 8 KiB
// stack) was too small to gain anything.
//
//go:noinline
func growStack() byte {
	var frame [12 << 10]byte
	return frame[stackIndex] // read, so that the frame stays
}

// stackIndex is always 0; a variable, so that growStack's frame is not
// optimised away.
var stackIndex int

// serve answers a name that may be the plugin's. It is apart from ServeDNS
// for its stack frame (close to a kilobyte): the names passed on by notMine,
// most of a cluster's, then reach the next plugin without it, and grow the
// query goroutine's stack (a copy of it) no more often than without
// `global` in front.
func (g *Global) serve(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	qname := state.QName()
	zi := g.matchZone(qname)
	if zi < 0 || len(qname) < len(g.zones[zi]) || !dns.IsFqdn(qname) {
		return g.next(ctx, w, r)
	}
	// The kubernetes plugin keeps the query's spelling of the zone.
	zone := qname[len(qname)-len(g.zones[zi]):]
	kind := g.kinds[zi]
	if kind == zoneReverse {
		return g.serveReverse(ctx, state, zi, zone)
	}
	// state.Name() would unescape the question a second time.
	name := strings.ToLower(qname)
	clusterset := kind == zoneClusterset
	if clusterset && len(name) == len(dnsVersion)+len(g.zones[zi]) && strings.HasPrefix(name, dnsVersion) {
		return g.serveDNSVersion(ctx, state, zi, zone)
	}
	q, ok := g.parseName(name, g.zones[zi], clusterset)
	if !ok {
		if clusterset && g.Next == nil {
			return g.noService(ctx, state, zi, zone, name)
		}
		return g.next(ctx, w, r)
	}
	var sel selection
	found, complete, pass := g.lookup(q, clusterset, &sel)
	if pass {
		// A clusterset name global does not hold may be the next plugin's
		// (the kubernetes plugin's multicluster mode); in a block where
		// none follows, as the chart's forwarded zone, the zone is
		// global's alone and the name does not exist.
		if clusterset && g.Next == nil {
			return g.nameError(ctx, state, zi, zone, complete)
		}
		return g.next(ctx, w, r)
	}

	// The records of the question's type, NODATA where the name exists
	// without them, a name error where it does not.
	qtype := state.QType()
	switch qtype {
	case dns.TypeAXFR, dns.TypeIXFR:
		requestsTotal.WithLabelValues(metrics.WithServer(ctx), typeLabel(qtype), dns.RcodeToString[dns.RcodeRefused]).Inc()
		return dns.RcodeRefused, nil
	case dns.TypeSOA:
		// The kubernetes plugin answers SOA only at the apex: NODATA below it.
		return g.negative(ctx, state, zi, zone, dns.RcodeSuccess)
	}
	if !found || sel.empty() {
		if found && !sel.one && !sel.filter && sel.s.named() != nil {
			// Every endpoint is drained, and per-pod names below still
			// answer: the name exists, with no records (RFC 8020).
			return g.negative(ctx, state, zi, zone, dns.RcodeSuccess)
		}
		return g.nameError(ctx, state, zi, zone, complete)
	}

	var m *dns.Msg
	switch qtype {
	case dns.TypeA:
		m = addrReply(&sel, r, qname, g.ttl, true, setA)
	case dns.TypeAAAA:
		m = addrReply(&sel, r, qname, g.ttl, false, setAAAA)
	case dns.TypeSRV:
		m = srvReply(&sel, r, qname, zone, g.ttl)
	}
	if m == nil {
		return g.negative(ctx, state, zi, zone, dns.RcodeSuccess)
	}
	w.WriteMsg(m)
	requestsTotal.WithLabelValues(metrics.WithServer(ctx), typeLabel(qtype), dns.RcodeToString[dns.RcodeSuccess]).Inc()
	return dns.RcodeSuccess, nil
}

// lookup finds what a parsed name selects, into sel: its answer set and the
// records of it the name selects; found false where the name does not exist
// (or, before the first build, complete false: it may). pass: the name is the
// next plugin's. sel is the caller's, so that it stays on the query's stack.
func (g *Global) lookup(q query, clusterset bool, sel *selection) (found, complete, pass bool) {
	var set *answerSet
	complete = g.ctrl.ready() // once: the answer must agree with it
	switch {
	case q.native:
		// Any other service's name is the kubernetes plugin's, before the
		// first sync too, unless its local service opted into native names.
		if set = g.ctrl.getNative(q.key); set == nil {
			return false, complete, true
		}
		complete = true
	case complete:
		if clusterset {
			set = g.ctrl.getClusterset(q.key)
		} else {
			set = g.ctrl.get(q.key)
		}
		// A global name with no answer set is the kubernetes plugin's only
		// where a user's Service owns it. Without any Service of that name
		// it does not exist, whatever the kubernetes plugin's caches still
		// have of a global the controller just deleted (they may lag the
		// API by client-go's backoff after API-server restarts).
		if set == nil && (clusterset || g.ctrl.othersOwn(q.key)) {
			return false, complete, true
		}
	}
	if set == nil {
		return false, complete, false
	}
	found = true
	switch {
	case q.extra == 0:
		*sel = selection{s: set}
	case q.extra == 1 && !clusterset:
		hostSelection(sel, set, q.first)
	case clusterset && q.clustersetHostQuery():
		hostSelection(sel, set, q.both)
	case q.extra == 2:
		*sel = selection{s: set}
		if port, proto := stripUnderscore(q.first), stripUnderscore(q.second); port != "" || proto != "" {
			sel.filter, sel.port, sel.proto = true, port, proto
		}
	default:
		// Anything else does not exist: in the clusterset zone, among
		// others, a cluster's own name "<clusterid>.<service>...".
		found = false
	}
	return found, complete, false
}

// nameError answers for a name that does not exist: NXDOMAIN, or the next
// plugin with fallthrough, or SERVFAIL before the first sync.
func (g *Global) nameError(ctx context.Context, state request.Request, zi int, zone string, complete bool) (int, error) {
	if g.fall.Through(state.Name()) {
		return g.next(ctx, state.W, state.Req)
	}
	if !complete {
		return g.negative(ctx, state, zi, zone, dns.RcodeServerFailure)
	}
	return g.negative(ctx, state, zi, zone, dns.RcodeNameError)
}

// noService answers, in a clusterset zone that is global's alone, a name
// no service or pod has: the apex and the names between it and the
// services (svc, <namespace>.svc) exist without records of their own
// (NODATA, so that no resolver takes the names below them for absent; the
// apex's SOA where asked), anything else does not.
func (g *Global) noService(ctx context.Context, state request.Request, zi int, zone, name string) (int, error) {
	rest := strings.TrimSuffix(name[:len(name)-len(g.zones[zi])], ".")
	switch {
	case rest == "" && state.QType() == dns.TypeSOA:
		m := new(dns.Msg)
		m.SetReply(state.Req)
		m.Authoritative = true
		soa := new(dns.SOA)
		g.soa(soa, zi, zone)
		m.Answer = []dns.RR{soa}
		state.W.WriteMsg(m)
		requestsTotal.WithLabelValues(metrics.WithServer(ctx), typeLabel(dns.TypeSOA), dns.RcodeToString[dns.RcodeSuccess]).Inc()
		return dns.RcodeSuccess, nil
	case rest == "", rest == "svc", strings.Count(rest, ".") == 1 && strings.HasSuffix(rest, ".svc"):
		return g.negative(ctx, state, zi, zone, dns.RcodeSuccess)
	}
	return g.nameError(ctx, state, zi, zone, g.ctrl.ready())
}

// negative writes an authoritative answer without records and with the SOA,
// as plugin.BackendError does.
func (g *Global) negative(ctx context.Context, state request.Request, zi int, zone string, rcode int) (int, error) {
	r := new(negReply)
	m := r.msg(state.Req)
	m.Rcode = rcode
	g.soa(&r.soa, zi, zone)
	r.ns[0] = &r.soa
	m.Ns = r.ns[:1:1]
	state.W.WriteMsg(m)
	requestsTotal.WithLabelValues(metrics.WithServer(ctx), typeLabel(state.QType()), dns.RcodeToString[rcode]).Inc()
	return dns.RcodeSuccess, nil
}

// soa sets rr to the kubernetes plugin's SOA record for zone (spelled as queried).
func (g *Global) soa(rr *dns.SOA, zi int, zone string) {
	names := g.soas[zi]
	if zone != g.zones[zi] {
		names = soaNames{ns: dnsutil.Join("ns.dns", zone), mbox: dnsutil.Join("hostmaster", zone)}
	}
	*rr = dns.SOA{
		Hdr:     dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: min(g.ttl, 300)},
		Ns:      names.ns,
		Mbox:    names.mbox,
		Serial:  uint32(g.ctrl.modified.Load()), // #nosec G115 -- Unix time as SOA serial, like the kubernetes plugin
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  g.ttl,
	}
}

// next passes a query on, as plugin.NextOrFailure does but for the writer
// it allocates around w for every query. That writer records which plugin
// wrote the answer only where it wraps the metrics plugin's recorder itself
// (CoreDNS 1.15), and the writer `global` is handed never is: the plugin
// before it wrapped the recorder already, or there is none. Without it
// nothing observable changes and a name that is not global costs no
// allocation. A traced query takes NextOrFailure's path, for its span.
func (g *Global) next(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if g.Next == nil || ot.SpanFromContext(ctx) != nil {
		return plugin.NextOrFailure(g.Name(), g.Next, ctx, w, r)
	}
	return g.Next.ServeDNS(ctx, w, r)
}

// notMine is the cheap answer for most of what a cluster asks: a name the
// plugin would pass on whatever its index holds, decided from the question
// as it came (no copy, no case folding) where it is plainly so. Outside the
// plugin's zones; or in a cluster zone, not <service>.<namespace>.svc.<zone>
// or below, or a service without the suffix while no service opted into
// native names. Anything it is unsure of (escapes, other zones) is left to
// the full parse, which decides the same.
func (g *Global) notMine(name string) bool {
	zi := g.matchZone(name)
	if zi < 0 || len(name) < len(g.zones[zi]) || !dns.IsFqdn(name) {
		return true
	}
	if g.kinds[zi] != zoneCluster || g.ctrl.natives.Load() != 0 || strings.IndexByte(name, '\\') >= 0 {
		return false
	}
	rest := name[:len(name)-len(g.zones[zi])] // "...<service>.<namespace>.svc."
	var labels [3]string
	for i := range labels {
		rest = strings.TrimSuffix(rest, ".")
		dot := strings.LastIndexByte(rest, '.')
		if rest == "" {
			return true // fewer than three labels: not a service's name
		}
		labels[i], rest = rest[dot+1:], rest[:dot+1]
	}
	svc, service := labels[0], labels[2]
	if !equalASCIIFold(svc, "svc") {
		return true
	}
	return len(service) <= len(g.suffix) || !equalASCIIFold(service[len(service)-len(g.suffix):], g.suffix)
}
