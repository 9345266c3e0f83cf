package global

import (
	"slices"
	"strings"
)

// selection is the entries a name selects: every record's (all), one host's,
// or those with a named port and protocol.
type selection struct {
	s *answerSet
	// one: the selection is one host's records, lo to hi; else all of them.
	one    bool
	lo, hi int
	// filter: only entries whose port matches port and proto ("" matches any).
	filter      bool
	port, proto string
}

// len is the number of records the selection looks at.
func (sel *selection) len() int {
	if sel.one {
		return sel.hi - sel.lo
	}
	return len(sel.s.recs)
}

// rec is the k-th record the selection looks at.
func (sel *selection) rec(k int) *rec {
	if sel.one {
		return &sel.s.recs[sel.lo+k]
	}
	return &sel.s.recs[k]
}

// hostSelection sets sel to the records of host (lower case): the shared
// records', else those only its own name answers (a drained endpoint's).
// It fills the caller's selection, which then stays off the heap.
func hostSelection(sel *selection, s *answerSet, host string) {
	lo, hi := s.hostRecords(host)
	if named := s.named(); lo == hi && named != nil {
		if nlo, nhi := named.hostRecords(host); nlo < nhi {
			s, lo, hi = named, nlo, nhi
		}
	}
	*sel = selection{s: s, one: true, lo: lo, hi: hi}
}

// selects reports whether the selection has entry p (of one of its records).
func (sel *selection) selects(p *portSpec) bool {
	return !sel.filter || (sel.port == "" || match(sel.port, p.name)) && (sel.proto == "" || match(sel.proto, p.proto))
}

// empty reports whether the selection has no entry: the name does not exist.
func (sel *selection) empty() bool {
	if !sel.one && !sel.filter {
		return len(sel.s.recs) == 0 // every record has an entry
	}
	return sel.entries() == 0
}

// entries counts the selected entries: 0 means the name does not exist.
func (sel *selection) entries() int {
	if !sel.one && !sel.filter {
		return sel.s.entries()
	}
	n := 0
	for k := range sel.len() {
		ps := sel.s.recPorts(sel.rec(k))
		if !sel.filter {
			n += len(ps)
			continue
		}
		for i := range ps {
			if sel.selects(&ps[i]) {
				n++
			}
		}
	}
	return n
}

// selectsAny reports whether the selection has an entry of r.
func (sel *selection) selectsAny(r *rec) bool {
	if !sel.filter {
		return true
	}
	ps := sel.s.recPorts(r)
	for i := range ps {
		if sel.selects(&ps[i]) {
			return true
		}
	}
	return false
}

// addrs appends the distinct addresses of one family the selection has to
// buf, in the order of its entries. For all records, family is quicker.
func (sel *selection) addrs(v4 bool, buf []uint32) []uint32 {
	s := sel.s
	var bits []uint64
	if sel.len() > 16 {
		bits = make([]uint64, (s.naddrs()+63)/64)
	}
	for k := range sel.len() {
		r := sel.rec(k)
		if s.isV4(r.addr) != v4 || !sel.selectsAny(r) {
			continue
		}
		if bits != nil {
			w, m := r.addr/64, uint64(1)<<(r.addr%64)
			if bits[w]&m != 0 {
				continue
			}
			bits[w] |= m
		} else if slices.Contains(buf, r.addr) {
			continue
		}
		buf = append(buf, r.addr)
	}
	return buf
}

func match(a, b string) bool { return a == b || strings.EqualFold(a, b) }

// smallSet is a set of uint64 keys with a value each, on the stack while it
// is small.
type smallSet struct {
	n    int
	keys [16]uint64
	vals [16]uint32
	m    map[uint64]uint32
}

func (s *smallSet) get(k uint64) (uint32, bool) {
	if s.m != nil {
		v, ok := s.m[k]
		return v, ok
	}
	for i := range s.n {
		if s.keys[i] == k {
			return s.vals[i], true
		}
	}
	return 0, false
}

// add adds k with value v unless k is there; it reports whether it added it.
func (s *smallSet) add(k uint64, v uint32) bool {
	if _, ok := s.get(k); ok {
		return false
	}
	if s.m == nil && s.n < len(s.keys) {
		s.keys[s.n], s.vals[s.n] = k, v
		s.n++
		return true
	}
	if s.m == nil {
		s.m = make(map[uint64]uint32, 2*len(s.keys))
		for i := range s.n {
			s.m[s.keys[i]] = s.vals[i]
		}
	}
	s.m[k] = v
	return true
}

// srvItem is one SRV record or additional address to write: a record of
// the answer set and, for SRV, a port.
type srvItem struct {
	rec  *rec
	port uint16
}

// srvPlan is what plugin.SRV answers for a selection, as record references:
// SRV deduplicated by (target, port), additional addresses by (target,
// address), targets being host + suffix.
type srvPlan struct {
	srv, extra []srvItem
	n4         int // IPv4 additional addresses
	hostsLen   int // bytes of the distinct hosts of srv
	hosts      int // distinct hosts of srv
}

func (sel *selection) planSRV(srvBuf, extraBuf []srvItem) srvPlan {
	p := srvPlan{srv: srvBuf, extra: extraBuf}
	var srvSeen, extraSeen, hostSeen smallSet
	for k := range sel.len() {
		r := sel.rec(k)
		ps := sel.s.recPorts(r)
		for i := range ps {
			e := &ps[i]
			if e.port == -1 || !sel.selects(e) {
				continue
			}
			port := uint16(e.port) // #nosec G115 -- the kubernetes plugin converts the same way
			h := uint64(r.host) << 32
			if srvSeen.add(h|uint64(port), 0) {
				p.srv = append(p.srv, srvItem{rec: r, port: port})
				if hostSeen.add(h, 0) {
					p.hosts++
					p.hostsLen += int(sel.s.hostLen(r))
				}
			}
			if extraSeen.add(h|uint64(r.addr), 0) {
				p.extra = append(p.extra, srvItem{rec: r})
				if sel.s.isV4(r.addr) {
					p.n4++
				}
			}
		}
	}
	return p
}
