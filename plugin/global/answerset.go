package global

import (
	"cmp"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/globalmirror/globalmirror/aggregate"
)

// answerSet is everything one global service answers, immutable once built.
// It is compact: records are built per query from it (see reply.go), with the
// addresses of A and AAAA records sub-slices of its address slab.
//
// Its entries are, as the kubernetes plugin's findServices builds "services"
// for a headless service, one per ready endpoint address and port of the
// endpoint's slice (one without a port when the slice has none); an entry is
// a record here and one of its port set's ports.
type answerSet struct {
	// key is "service.namespace", the service label and namespace of its
	// names, and the key it is stored under (dnsController.swap).
	key string

	// slab has every distinct address once, the n4 IPv4 addresses (4 bytes
	// each) first, then the IPv6 ones (16 bytes), each family in the order
	// the entries first give it. It is never written after it is built:
	// records handed out point into it.
	slab []byte
	// names has the distinct hostnames (or dashed IPs) of the records,
	// each as its length in one byte, then its bytes.
	names string
	// recs are sorted by lower-case host, then in the order the entries
	// give them (record order is no part of the contract; see DESIGN.md).
	recs  []rec
	ports *portTable // distinct port sets of the records, shared (portSets)

	trigger   int64  // the newest last-change-trigger-time, Unix ns; 0 for none
	n4        uint32 // IPv4 addresses in slab
	endpoints uint32 // ready endpoints, for the gauge
	rare      *answerRare
}

// answerRare is what few answer sets have; nil for the rest.
type answerRare struct {
	// keys are the lower-case hosts of the records, only when some host is
	// not lower case; otherwise a record's host is its key.
	keys []string
	// problems maps detail -> reason, to count each problem once.
	problems map[string]string
	// absent: the global does not exist, but globalmirror's Service for it
	// still does; every name under it is NXDOMAIN.
	absent bool
	// named has the records only their own names answer: of endpoints
	// ready but drained at aggregate.DrainShared. No shared name selects
	// them; a host is looked up here where the shared records lack it.
	named *answerSet
}

// rec is one ready endpoint address.
type rec struct {
	addr  uint32 // address index: < n4 IPv4, else IPv6
	host  uint32 // offset of the host's length byte in names
	ports uint32 // index of the port set
}

// maxHost is the longest host a record has: its length is one byte. Hosts
// are DNS labels, or two in the clusterset view, far shorter.
const maxHost = 255

// portSpec is one port of an endpoint's slice, as the kubernetes plugin sees it.
type portSpec struct {
	port  int32 // -1: no port number
	name  string
	proto string
}

// noPort is the one entry of a record whose slice has no ports.
var noPort = []portSpec{{port: -1}}

// hostNaming names a ready endpoint's record for one of its addresses: the
// label(s) left of the service in its per-pod name.
type hostNaming func(ep *aggregate.Endpoint, ip string) string

// globalHost is the global view's per-pod name: the global hostname (h, or
// h-C for a mirror), or the dashed address without one.
func globalHost(ep *aggregate.Endpoint, ip string) string {
	if ep.Hostname != "" {
		return ep.Hostname
	}
	return dashedIP(ip)
}

// clustersetHost names endpoints as KEP-1645's clusterset.local does,
// "<hostname>.<clusterid>": the pod's own hostname (or the dashed address)
// and its cluster, the Linkerd cluster name for mirrors and localID for the
// local cluster. Such names cannot collide across clusters, so the global
// view's collision rule does not apply.
func clustersetHost(localID string) hostNaming {
	return func(ep *aggregate.Endpoint, ip string) string {
		host := dashedIP(ip)
		if ep.Source != nil && ep.Source.Hostname != nil && *ep.Source.Hostname != "" {
			host = *ep.Source.Hostname
		}
		return host + "." + cmp.Or(ep.Cluster, localID)
	}
}

// newAnswerSet turns a view into the answer set of the global view.
func newAnswerSet(v aggregate.View) *answerSet { return newNamedAnswerSet(v, v.Name, globalHost) }

// newNamedAnswerSet turns a view into an answer set for the service label
// service, its records named by hostOf.
func newNamedAnswerSet(v aggregate.View, service string, hostOf hostNaming) *answerSet {
	s := &answerSet{key: service + "." + v.Namespace}
	if drained := drainedNamed(v); len(drained.Endpoints) > 0 {
		named := newNamedAnswerSet(drained, service, hostOf)
		named.endpoints = 0 // no shared answer has them
		s.rare = &answerRare{named: named}
	}
	if !v.TriggerTime.IsZero() {
		s.trigger = v.TriggerTime.UnixNano()
	}
	b := answerBuilder{addrIdx: map[string]int{}, hostIdx: map[string]int{}, portIdx: map[string]uint32{}}
	for i := range v.Endpoints {
		if ep := &v.Endpoints[i]; ep.Ready {
			s.endpoints++
			b.add(s, ep, hostOf)
		}
	}
	b.pack(s)
	if len(v.Problems) > 0 {
		problems := make(map[string]string, len(v.Problems))
		for _, p := range v.Problems {
			problems[p.Detail] = p.Reason
		}
		s.rarely().problems = problems
	}
	return s
}

// rarely is s's rare part, made where s has none yet.
func (s *answerSet) rarely() *answerRare {
	if s.rare == nil {
		s.rare = &answerRare{}
	}
	return s.rare
}

// answerBuilder gathers a view's records as its ready endpoints give them:
// distinct addresses by family, hosts and port sets, in first-seen order,
// and a pending record for each address of each endpoint.
type answerBuilder struct {
	v4, v6    []net.IP
	addrIdx   map[string]int // address as the slice spells it -> index in its family
	hosts     []string
	hostIdx   map[string]int
	portIdx   map[string]uint32
	pend      []pendingRec
	namesLen  int
	lowerKeys bool // some host is not lower case
}

// pendingRec is a record before its set is packed.
type pendingRec struct {
	addr  int // index in v4 or v6
	v4    bool
	host  int // index in hosts
	ports uint32
}

// add gathers ep's records, its port set into s's.
func (b *answerBuilder) add(s *answerSet, ep *aggregate.Endpoint, hostOf hostNaming) {
	pkey := portKey(*ep)
	pi, ok := b.portIdx[pkey]
	if !ok {
		pi = uint32(len(b.portIdx)) // #nosec G115 -- fewer port sets than endpoints
		b.portIdx[pkey] = pi
		if s.ports == nil {
			s.ports = portSets.of(pkey, *ep) // the common case, shared whole
		} else {
			s.ports = &portTable{sets: append(slices.Clip(s.ports.sets), portSets.of(pkey, *ep).sets[0])}
		}
	}
	for _, ip := range ep.Addresses {
		addr := net.ParseIP(ip)
		if addr == nil {
			continue // aggregate only passes canonical addresses
		}
		p := pendingRec{ports: pi}
		a4 := addr.To4()
		p.v4 = a4 != nil
		// The same address spelled two ways (a.b.c.d, ::ffff:a.b.c.d) is
		// two addresses, as in the kubernetes plugin.
		ai, seen := b.addrIdx[ip]
		if !seen {
			if p.v4 {
				ai = len(b.v4)
				b.v4 = append(b.v4, a4)
			} else {
				ai = len(b.v6)
				b.v6 = append(b.v6, addr.To16())
			}
			b.addrIdx[ip] = ai
		}
		p.addr = ai
		host := hostOf(ep, ip)
		host = host[:min(len(host), maxHost)]
		hi, seen := b.hostIdx[host]
		if !seen {
			hi = len(b.hosts)
			b.hostIdx[host] = hi
			b.hosts = append(b.hosts, host)
			b.namesLen += 1 + len(host)
			b.lowerKeys = b.lowerKeys || strings.ToLower(host) != host
		}
		p.host = hi
		b.pend = append(b.pend, p)
	}
}

// pack writes what b gathered into s: the address slab, the names, and the
// records sorted by host.
func (b *answerBuilder) pack(s *answerSet) {
	s.n4 = uint32(len(b.v4)) // #nosec G115 -- addresses are far fewer than 2^32
	s.slab = make([]byte, 0, 4*len(b.v4)+16*len(b.v6))
	for _, a := range b.v4 {
		s.slab = append(s.slab, a...)
	}
	for _, a := range b.v6 {
		s.slab = append(s.slab, a...)
	}
	var names strings.Builder
	names.Grow(b.namesLen)
	offsets := make([]uint32, len(b.hosts))
	for i, h := range b.hosts {
		offsets[i] = uint32(names.Len()) // #nosec G115 -- hostnames are short
		names.WriteByte(byte(len(h)))
		names.WriteString(h)
	}
	s.names = names.String()

	// By host, so that a host's records are found by a binary search over
	// them, with no index beside them: the pending records are sorted by
	// their host's key (its lower case, computed once a host), stably.
	keyOf := b.hosts
	if b.lowerKeys {
		keyOf = make([]string, len(b.hosts))
		for i, h := range b.hosts {
			keyOf[i] = strings.ToLower(h)
		}
	}
	slices.SortStableFunc(b.pend, func(x, y pendingRec) int { return strings.Compare(keyOf[x.host], keyOf[y.host]) })
	s.recs = make([]rec, len(b.pend))
	var keys []string
	if b.lowerKeys {
		keys = make([]string, len(b.pend))
	}
	for i, p := range b.pend {
		r := rec{ports: p.ports, host: offsets[p.host]}
		r.addr = uint32(p.addr) // #nosec G115 -- see n4
		if !p.v4 {
			r.addr += s.n4
		}
		s.recs[i] = r
		if keys != nil {
			keys[i] = keyOf[p.host]
		}
	}
	if keys != nil {
		s.rarely().keys = keys
	}
}

// drainedNamed is v with only the endpoints drained at aggregate.DrainShared
// that their own names answer, as ready, and none of v's problems.
func drainedNamed(v aggregate.View) aggregate.View {
	out := aggregate.View{Namespace: v.Namespace, Base: v.Base, Name: v.Name}
	for _, ep := range v.Endpoints {
		if !ep.Ready && ep.NameReady {
			ep.Ready = true
			out.Endpoints = append(out.Endpoints, ep)
		}
	}
	return out
}

// named is the set of s's records only their own names answer, or nil.
func (s *answerSet) named() *answerSet {
	if s == nil || s.rare == nil {
		return nil
	}
	return s.rare.named
}

// absentSet answers NXDOMAIN for every name under the global name.namespace.
func absentSet(name, namespace string) *answerSet {
	return &answerSet{key: name + "." + namespace, rare: &answerRare{absent: true}}
}

// absent reports whether every name under s is NXDOMAIN (absentSet).
func (s *answerSet) absent() bool { return s.rare != nil && s.rare.absent }

// problems are the problems s was built with, detail -> reason.
func (s *answerSet) problems() map[string]string {
	if s == nil || s.rare == nil {
		return nil
	}
	return s.rare.problems
}

// entries counts the entries of all records, for the SRV weight.
func (s *answerSet) entries() int {
	n := 0
	for i := range s.recs {
		n += len(s.recPorts(&s.recs[i]))
	}
	return n
}

// counts is what s adds to the globals and endpoints gauges.
func (s *answerSet) counts() (globals, endpoints int) {
	if s == nil || s.absent() {
		return 0, 0
	}
	return 1, int(s.endpoints)
}

// sameAnswers reports whether a and b give the same records to every query.
// No set and a set without records both answer nothing.
func sameAnswers(a, b *answerSet) bool {
	if a == nil || b == nil {
		empty := func(s *answerSet) bool { return s == nil || len(s.recs) == 0 && s.named() == nil }
		return empty(a) && empty(b)
	}
	return a.n4 == b.n4 && string(a.slab) == string(b.slab) && a.names == b.names &&
		slices.Equal(a.recs, b.recs) && slices.EqualFunc(a.ports.list(), b.ports.list(), slices.Equal) &&
		sameAnswers(a.named(), b.named())
}

// portKey identifies an endpoint's ports.
func portKey(ep aggregate.Endpoint) string {
	var key strings.Builder
	for _, p := range ep.Ports {
		port, name, proto := int32(-1), "", ""
		if p.Port != nil {
			port = *p.Port
		}
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		// Lengths first: names and protocols may contain any byte.
		for _, f := range []string{name, proto} {
			key.WriteString(strconv.Itoa(len(f)))
			key.WriteByte(':')
			key.WriteString(f)
		}
		key.WriteString(strconv.Itoa(int(port)))
		key.WriteByte(';')
	}
	return key.String()
}

// portSet is an endpoint's ports.
func portSet(ep aggregate.Endpoint) []portSpec {
	if len(ep.Ports) == 0 {
		return nil
	}
	ps := make([]portSpec, len(ep.Ports))
	for i, p := range ep.Ports {
		ps[i].port = -1
		if p.Port != nil {
			ps[i].port = *p.Port
		}
		if p.Name != nil {
			ps[i].name = *p.Name
		}
		if p.Protocol != nil {
			ps[i].proto = string(*p.Protocol)
		}
	}
	return ps
}

// portSets interns each port set for every answer set, of every server
// block: a port set is the same for most globals, and never written once
// built. Bounded, as the index's interner is: past the bound, each answer
// set has its own.
var portSets = portInterner{tables: map[string]*portTable{}}

// portTable is the distinct port sets of an answer set's records; one of
// one port set, the common case, is shared by every answer set with it.
// Never written once built.
type portTable struct{ sets [][]portSpec }

// list is the port sets; none for no table.
func (t *portTable) list() [][]portSpec {
	if t == nil {
		return nil
	}
	return t.sets
}

type portInterner struct {
	mu     sync.Mutex
	tables map[string]*portTable
}

const portSetsBound = 10000

// of is the table of one port set, ep's, whose key is key. Its list has no
// room to append to in place.
func (in *portInterner) of(key string, ep aggregate.Endpoint) *portTable {
	in.mu.Lock()
	defer in.mu.Unlock()
	if t, ok := in.tables[key]; ok {
		return t
	}
	t := &portTable{sets: [][]portSpec{portSet(ep)}}
	if len(in.tables) < portSetsBound {
		in.tables[key] = t
	}
	return t
}

// host is the hostname (or dashed IP) of r.
func (s *answerSet) host(r *rec) string {
	return s.names[r.host+1 : r.host+1+s.hostLen(r)]
}

// hostLen is the length of the host of r.
func (s *answerSet) hostLen(r *rec) uint32 { return uint32(s.names[r.host]) }

// hostKey is the lower-case host of record i.
func (s *answerSet) hostKey(i int) string {
	if s.rare != nil && s.rare.keys != nil {
		return s.rare.keys[i]
	}
	return s.host(&s.recs[i])
}

// hostRecords are the positions of the records of host (lower case), lo to hi.
func (s *answerSet) hostRecords(host string) (lo, hi int) {
	lo = sort.Search(len(s.recs), func(i int) bool { return s.hostKey(i) >= host })
	hi = lo
	for hi < len(s.recs) && s.hostKey(hi) == host {
		hi++
	}
	return lo, hi
}

// recPorts is the entries' ports of r: its port set, or one without a port.
func (s *answerSet) recPorts(r *rec) []portSpec {
	if ps := s.ports.sets[r.ports]; len(ps) > 0 {
		return ps
	}
	return noPort
}

// isV4 reports whether address index a is an IPv4 address.
func (s *answerSet) isV4(a uint32) bool { return a < s.n4 }

// ip is address a, a sub-slice of the slab that cannot grow into it.
func (s *answerSet) ip(a uint32) net.IP {
	if a < s.n4 {
		o := 4 * a
		return net.IP(s.slab[o : o+4 : o+4])
	}
	o := 4*s.n4 + 16*(a-s.n4)
	return net.IP(s.slab[o : o+16 : o+16])
}

// family is the range of address indices of one family: every address of it
// once, in the order the entries give them.
func (s *answerSet) family(v4 bool) (lo, hi uint32) {
	if v4 {
		return 0, s.n4
	}
	return s.n4, uint32(s.naddrs()) // #nosec G115 -- see n4
}

// naddrs is the number of distinct addresses.
func (s *answerSet) naddrs() int { return int(s.n4) + (len(s.slab)-4*int(s.n4))/16 }

// dashedIP is the kubernetes plugin's endpoint name for an address without a hostname.
func dashedIP(ip string) string {
	if strings.Contains(ip, ".") {
		return strings.ReplaceAll(ip, ".", "-")
	}
	if strings.Contains(ip, ":") {
		h := strings.ReplaceAll(ip, ":", "-")
		if strings.HasSuffix(h, "-") {
			return h + "0"
		}
		return h
	}
	return ""
}

// srvWeight is plugin.SRV's weight for n services of priority 0 and weight 0
// (each counts as 100), computed the same way, in floating point.
func srvWeight(n int) uint16 {
	w1 := 100.0 / float64(100*n)
	w1 *= 100
	weight := uint16(math.Floor(w1))
	if weight == 0 {
		weight = 1
	}
	return weight
}
