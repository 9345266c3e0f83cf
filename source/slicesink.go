package source

import (
	"slices"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// sliceSink indexes the EndpointSlices of one label-selected feed into the
// entries of their services (Source.entries). Slices may match more than
// one feed's selector; each feed's sink files its own, tagged by its feed.
type sliceSink struct {
	s         *Source
	selector  labels.Selector // the feed's
	namespace string          // the feed's; "" for all
	feed      sliceFeed       // mirrorFeed or localFeed
	// otherNamed are the member slices whose name does not begin with
	// their service's and a dash, as the names generated for a service's
	// slices do: their service's name, by theirs. Every other member slice
	// is found by its name alone (findMember).
	otherNamed nsMap[string]
	// globalNamed are headless mirrors' slices by the name of an endpoint
	// mirror of theirs that is named like a global.
	globalNamed nsMap[[]globalNamedBy]
}

// sliceFeed says which of a namespace's two slice feeds, one per selector,
// delivered a slice.
type sliceFeed uint8

const (
	mirrorFeed sliceFeed = iota // Linkerd's mirrors
	localFeed                   // the local selector
)

// globalNamedBy is a headless mirror's slice carrying the name of an
// endpoint mirror named like a global, and that headless mirror.
type globalNamedBy struct {
	slice    *indexedSlice
	headless string
}

func newSliceSink(s *Source, sel labels.Selector, namespace string, feed sliceFeed) *sliceSink {
	return &sliceSink{s: s, selector: sel, namespace: namespace, feed: feed,
		otherNamed: nsMap[string]{}, globalNamed: nsMap[[]globalNamedBy]{}}
}

// eachEntry calls f with every entry of the feed's namespaces.
func (k *sliceSink) eachEntry(f func(namespace, name string, e *entry)) {
	if k.namespace == "" {
		k.s.entries.each(f)
		return
	}
	for name, e := range k.s.entries[k.namespace] {
		f(k.namespace, name, e)
	}
}

// Listing clears the list marks of this feed's slices, members' and
// endpoint mirrors' (listMarks).
func (k *sliceSink) Listing() {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	k.eachEntry(func(_, _ string, e *entry) {
		for _, m := range e.members {
			if m.feed() == k.feed {
				m.flags &^= delivered
			}
		}
		for i := range e.mirrors {
			if e.mirrors[i].feed() == k.feed {
				e.mirrors[i] = e.mirrors[i].withDelivered(false)
			}
		}
	})
}

func (k *sliceSink) Upsert(obj runtime.Object) { writeAs(k.s, obj, k.upsert) }
func (k *sliceSink) Delete(obj runtime.Object) { writeAs(k.s, obj, k.delete) }

// upsert indexes sl; called with the lock held.
func (k *sliceSink) upsert(sl *discoveryv1.EndpointSlice) []Key {
	s := k.s
	var changed []Key
	if hm := sl.Labels[aggregate.LabelHeadlessMirrorName]; hm != "" {
		return k.upsertMirror(sl.Namespace, sl.Name, hm, s.hash.of(sl.Labels[discoveryv1.LabelServiceName]), mirrorReady(sl), kubeclient.ParseVersion(sl.ResourceVersion))
	}
	service := sliceService(sl)
	e, filed, i := k.findMember(sl.Namespace, sl.Name, service)
	var old *indexedSlice
	if e != nil {
		old = e.members[i]
		if filed == service && k.currentAt(old, sl.ResourceVersion) {
			return nil
		}
	}
	cur := s.intern.stripSlice(sl, service, s.cfg.Suffix)
	cur.flags |= delivered
	cur.setFeed(k.feed)
	if old != nil && filed == service && old.sameAs(cur) {
		old.flags, old.rv = old.flags|delivered, cur.rv
		return nil
	}
	s.holdBefore(sl.Namespace, service, cur)
	if old != nil {
		changed = k.removeMember(sl.Namespace, filed, e, i, changed)
	}
	if service != "" || len(cur.globalNamed()) > 0 {
		changed = k.addMember(sl.Namespace, service, cur, changed)
	}
	s.releaseAfter(sl.Namespace, service)
	if old != nil && filed != service {
		s.releaseAfter(sl.Namespace, filed)
	}
	return changed
}

// upsertMirror indexes endpoint mirror slice namespace/name of headless
// mirror hm, whose endpoint mirror's name hashes to service; called with
// the lock held, with a namespace the index may keep.
func (k *sliceSink) upsertMirror(namespace, name, hm string, service uint64, ready bool, rv kubeclient.Version) []Key {
	s := k.s
	var changed []Key
	if e, filed, i := k.findMember(namespace, name, ""); e != nil { // relabeled: it was a member's
		changed = k.removeMember(namespace, filed, e, i, changed)
	}
	cur := newMirrorSlice(s.hash.of(name), service, k.feed, ready, rv)
	// Filed under the headless mirror it names now: Linkerd never moves
	// one to another, and if something did, the next list would drop
	// the entry left under the old one.
	e := s.entryFor(namespace, hm)
	i, had := findMirror(e.mirrors, cur.key)
	switch {
	case had && e.mirrors[i].sameAs(cur):
		e.mirrors[i] = cur // the same; only its version or its list is new
		return changed
	case had:
		e.mirrors[i] = cur
	default:
		e.mirrors = insertMirror(e.mirrors, i, cur)
		s.endpointMirrorsChanged(namespace, hm)
	}
	return s.memberKeyOf(namespace, hm, changed)
}

// Current implements kubeclient.CurrentSink: whether this feed's slice is
// present at its version, an endpoint mirror's or a member's. The same
// version carries the same labels, so it is filed where they say.
func (k *sliceSink) Current(p *kubeclient.Peeked) bool {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	if hm, _ := p.Label(aggregate.LabelHeadlessMirrorName); hm != "" {
		e := k.s.entries.get(p.Namespace, hm)
		if e == nil {
			return false
		}
		i, had := findMirror(e.mirrors, mirrorKey(k.s.hash.of(p.Name), k.feed))
		if !had || !e.mirrors[i].rv.Is(p.ResourceVersion) {
			return false
		}
		e.mirrors[i] = e.mirrors[i].withDelivered(true) // a relist delivering it as it was
		return true
	}
	e, _, i := k.findMember(p.Namespace, p.Name, "")
	return e != nil && k.currentAt(e.members[i], p.ResourceVersion)
}

// currentAt reports whether member slice m is at version rv; if so, the
// current list has delivered it. Called with the lock held.
func (k *sliceSink) currentAt(m *indexedSlice, rv string) bool {
	if !m.rv.Is(rv) {
		return false
	}
	m.flags |= delivered // a relist delivering it as it was
	return true
}

// insertMirror inserts m into l at i. A short list grows by one, where
// doubling would allocate room a headless mirror of a few pods never
// uses; a long one by doubling, so that a large StatefulSet's list is not
// copied on every insert.
func insertMirror(l []mirrorSlice, i int, m mirrorSlice) []mirrorSlice {
	if len(l) < cap(l) || len(l) >= 16 {
		return slices.Insert(l, i, m)
	}
	out := make([]mirrorSlice, len(l)+1)
	copy(out, l[:i])
	out[i] = m
	copy(out[i+1:], l[i:])
	return out
}

// sliceService is the service whose member slice sl is: its
// kubernetes.io/service-name, sharing the bytes of its name where that is
// generated from it; "" for globalmirror's own slices (native names add
// some to the local service), which are no member's endpoints.
func sliceService(sl *discoveryv1.EndpointSlice) string {
	if sl.Labels[discoveryv1.LabelManagedBy] == aggregate.EndpointSliceManagedBy {
		return ""
	}
	return prefixOf(sl.Name, sl.Labels[discoveryv1.LabelServiceName])
}

// delete drops sl, an endpoint mirror's or a member's; called with the
// lock held.
func (k *sliceSink) delete(sl *discoveryv1.EndpointSlice) []Key {
	s := k.s
	var changed []Key
	if hm := sl.Labels[aggregate.LabelHeadlessMirrorName]; hm != "" {
		if e := s.entries.get(sl.Namespace, hm); e != nil {
			if i, ok := findMirror(e.mirrors, mirrorKey(s.hash.of(sl.Name), k.feed)); ok {
				e.mirrors = slices.Delete(e.mirrors, i, i+1)
				s.endpointMirrorsChanged(sl.Namespace, hm)
				s.dropIfEmpty(sl.Namespace, hm, e)
				changed = s.memberKeyOf(sl.Namespace, hm, changed)
			}
		}
	}
	if e, service, i := k.findMember(sl.Namespace, sl.Name, sliceService(sl)); e != nil {
		changed = k.removeMember(sl.Namespace, service, e, i, changed)
		s.releaseAfter(sl.Namespace, service)
	}
	return changed
}

// Listed drops this feed's slices the list did not deliver (listMarks).
func (k *sliceSink) Listed() {
	k.s.write(k.listed)
}

// listed drops what this feed's list did not deliver; called with the lock
// held.
func (k *sliceSink) listed() []Key {
	s := k.s
	var changed []Key
	k.eachEntry(func(namespace, name string, e *entry) {
		for i := len(e.members) - 1; i >= 0; i-- {
			if m := e.members[i]; m.feed() == k.feed && m.flags&delivered == 0 {
				changed = k.removeMember(namespace, name, e, i, changed)
			}
		}
		s.releaseAfter(namespace, name)
		rest := slices.DeleteFunc(e.mirrors, func(m mirrorSlice) bool { return m.feed() == k.feed && !m.delivered() })
		if len(rest) == len(e.mirrors) {
			return
		}
		s.endpointMirrorsChanged(namespace, name)
		changed = s.memberKeyOf(namespace, name, changed)
		if cap(rest) > len(rest) {
			// The list grew by doubling; clip it to its size.
			rest = slices.Clip(slices.Clone(rest))
		}
		e.mirrors = rest
		if len(rest) == 0 {
			e.mirrors = nil
		}
		s.dropIfEmpty(namespace, name, e)
	})
	return changed
}

// findMember is where this feed's member slice namespace/name is filed: its
// entry, the name of that entry's service and its position there; nil if
// it is not present. service is where it most likely is: the one its labels
// name now.
func (k *sliceSink) findMember(namespace, name, service string) (*entry, string, int) {
	if filed, ok := k.otherNamed[namespace][name]; ok {
		e, i := k.memberOf(namespace, filed, name)
		return e, filed, i
	}
	// Named for its service (stored as its name's tail: namedFor): under
	// the one its labels name, or, relabeled, under its name up to another
	// of its dashes. It is filed nowhere else.
	tried := namedFor(name, service)
	if tried {
		if e, i := k.memberOf(namespace, service, name); e != nil {
			return e, service, i
		}
	}
	for i := 1; i < len(name)-1; i++ {
		if name[i] != '-' || (tried && i == len(service)) {
			continue
		}
		if e, j := k.memberOf(namespace, name[:i], name); e != nil {
			return e, name[:i], j
		}
	}
	return nil, "", -1
}

// memberOf is the entry of service if it has this feed's member slice
// name, and its position there.
func (k *sliceSink) memberOf(namespace, service, name string) (*entry, int) {
	e := k.s.entries.get(namespace, service)
	if e == nil {
		return nil, -1
	}
	i := slices.IndexFunc(e.members, func(m *indexedSlice) bool { return m.feed() == k.feed && m.named(service, name) })
	if i < 0 {
		return nil, -1
	}
	return e, i
}

// addMember files c under its service's entry, and tells its bases.
func (k *sliceSink) addMember(namespace, service string, c *indexedSlice, changed []Key) []Key {
	e := k.s.entryFor(namespace, service)
	e.members = append(e.members, c)
	if c.flags&tailOnly == 0 {
		k.otherNamed.set(k.s.intern.str(namespace), c.nameKept(), service)
	}
	for _, n := range c.globalNamed() {
		appendTo(k.globalNamed, c.namespace(), n, globalNamedBy{c, service})
	}
	return k.memberKeys(service, c, changed)
}

// removeMember removes the i-th member slice of the entry of service, and
// tells its bases.
func (k *sliceSink) removeMember(namespace, service string, e *entry, i int, changed []Key) []Key {
	c := e.members[i]
	e.members = slices.Delete(e.members, i, i+1)
	if len(e.members) == 0 {
		e.members = nil
	}
	if c.flags&tailOnly == 0 {
		k.otherNamed.del(namespace, c.nameKept())
	}
	for _, n := range c.globalNamed() {
		removeFrom(k.globalNamed, namespace, n, globalNamedBy{c, service})
	}
	changed = k.memberKeys(service, c, changed)
	k.s.dropIfEmpty(namespace, service, e)
	return changed
}

// memberKeys appends the bases a member slice of service can affect: its
// service's, and those of the endpoint mirrors of its endpoints named like
// a global (the name is owned: Source.Service). A slice whose service is not
// present yet maps to nothing: the service's own arrival covers it.
func (k *sliceSink) memberKeys(service string, c *indexedSlice, keys []Key) []Key {
	for _, n := range c.globalNamed() {
		if base, ok := aggregate.BaseOf(n, k.s.cfg.Suffix); ok {
			keys = append(keys, Key{c.namespace(), base})
		}
	}
	if service == "" {
		return keys
	}
	return k.s.memberKeyOf(c.namespace(), service, keys)
}
