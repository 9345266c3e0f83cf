package source

import (
	"slices"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// The index is written by the feeds' sinks below, one goroutine per feed,
// under Source.mu; each sink keeps its own generation, which a full list
// raises and each object it delivers carries, so that the end of a list can
// drop what the list no longer holds. Handlers are told after the lock is
// released.

// serviceSink indexes the Services of one namespace feed.
type serviceSink struct {
	s   *Source
	gen uint32
}

func (k *serviceSink) Listing() {
	k.s.mu.Lock()
	k.gen++
	k.s.mu.Unlock()
}

func (k *serviceSink) Upsert(obj runtime.Object) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	s := k.s
	var changed []Key
	s.mu.Lock()
	id := nsName{svc.Namespace, svc.Name}
	old := s.services.get(id.namespace, id.name)
	if old != nil && unchanged(old.rv, svc.ResourceVersion) {
		// A relist delivering it as it was: nothing to read again.
		old.gen = k.gen
		if sk, ok := s.skipped[id]; ok {
			sk.gen = k.gen
			s.skipped[id] = sk
		}
		s.mu.Unlock()
		return
	}
	if _, skip := aggregate.Classify(svc, s.cfg.LocalSelector); skip != nil {
		if seen, ok := s.skipped[id]; !ok || seen.version != svc.ResourceVersion {
			defer s.skippedService(svc, *skip)
		}
		s.skipped[id] = skipped{svc.ResourceVersion, k.gen}
	} else {
		delete(s.skipped, id)
	}
	if !s.holds(svc) {
		if old != nil {
			s.removeService(old)
			changed = s.serviceKeys(old, changed)
		}
		s.mu.Unlock()
		s.notify(changed)
		return
	}
	cur := s.intern.stripService(svc, s.labelKeys)
	cur.gen = k.gen
	if old != nil && old.sameAs(cur) {
		old.gen, old.rv = k.gen, cur.rv
		s.mu.Unlock()
		return
	}
	if old != nil {
		s.removeService(old)
		changed = s.serviceKeys(old, changed)
	}
	s.addService(cur)
	changed = s.serviceKeys(cur, changed)
	s.mu.Unlock()
	s.notify(changed)
}

func (k *serviceSink) Delete(obj runtime.Object) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	s := k.s
	var changed []Key
	s.mu.Lock()
	id := nsName{svc.Namespace, svc.Name}
	delete(s.skipped, id)
	if old := s.services.get(id.namespace, id.name); old != nil {
		s.removeService(old)
		changed = s.serviceKeys(old, changed)
	}
	s.mu.Unlock()
	s.notify(changed)
}

func (k *serviceSink) Listed() {
	s := k.s
	var changed []Key
	s.mu.Lock()
	s.services.each(func(namespace, _ string, svc *cachedService) {
		if svc.gen != k.gen && k.namespaceOf(namespace) {
			s.removeService(svc)
			changed = s.serviceKeys(svc, changed)
		}
	})
	for id, sk := range s.skipped {
		if sk.gen != k.gen && k.namespaceOf(id.namespace) {
			delete(s.skipped, id)
		}
	}
	s.mu.Unlock()
	s.notify(changed)
}

// namespaceOf reports whether objects of ns come from this sink's feed: one
// feed per watched namespace, or one for all.
func (k *serviceSink) namespaceOf(ns string) bool {
	return k.s.serviceSinkOf(ns) == k
}

// holds reports whether the index keeps svc: a member, a global of ours, or
// any Service named like a global (ours, or a user's that blocks ours).
// Nothing else is read, so nothing else is kept.
func (s *Source) holds(svc *corev1.Service) bool {
	if _, ok := aggregate.BaseOf(svc.Name, s.cfg.Suffix); ok {
		return true
	}
	if _, ok := s.memberKey(svc); ok {
		return true
	}
	_, ok := s.globalBase(svc)
	return ok
}

func (s *Source) addService(c *cachedService) {
	s.services.set(c.namespace(), c.name, c)
	if k, ok := s.baseKey(c); ok {
		appendTo(s.bases, k.Namespace, k.Base, c)
	}
}

func (s *Source) removeService(c *cachedService) {
	s.services.del(c.namespace(), c.name)
	if k, ok := s.baseKey(c); ok {
		removeFrom(s.bases, k.Namespace, k.Base, c)
	}
}

// baseKey is the base a held Service is filed under: members under their
// base, globals of ours under theirs.
func (s *Source) baseKey(c *cachedService) (Key, bool) {
	svc := c.service()
	if k, ok := s.memberKey(svc); ok {
		return k, true
	}
	if base, ok := s.globalBase(svc); ok {
		return Key{svc.Namespace, base}, true
	}
	return Key{}, false
}

// serviceKeys appends every base c can affect.
func (s *Source) serviceKeys(c *cachedService, keys []Key) []Key {
	svc := c.service()
	if k, ok := s.memberKey(svc); ok {
		keys = append(keys, k)
	}
	if base, ok := aggregate.BaseOf(c.name, s.cfg.Suffix); ok {
		keys = append(keys, Key{c.namespace(), base})
	}
	return keys
}

// sliceSink indexes the EndpointSlices of one label-selected feed. Slices
// may match more than one feed's selector; each feed's sink holds its own.
type sliceSink struct {
	s        *Source
	selector labels.Selector // the feed's
	gen      uint32
	// members are the slices of member Services, by name and by service.
	members   nsMap[*cachedSlice]
	byService nsMap[[]*cachedSlice]
	// mirrors are endpoint mirrors' slices by headless mirror, sorted by name.
	mirrors nsMap[[]mirrorSlice]
	// globalNamed are headless mirrors' slices by the name of an endpoint
	// mirror of theirs that is named like a global.
	globalNamed nsMap[[]*cachedSlice]
}

func newSliceSink(s *Source, sel labels.Selector) *sliceSink {
	return &sliceSink{s: s, selector: sel, members: nsMap[*cachedSlice]{}, byService: nsMap[[]*cachedSlice]{},
		mirrors: nsMap[[]mirrorSlice]{}, globalNamed: nsMap[[]*cachedSlice]{}}
}

func (k *sliceSink) Listing() {
	k.s.mu.Lock()
	k.gen++
	k.s.mu.Unlock()
}

func (k *sliceSink) Upsert(obj runtime.Object) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	s := k.s
	var changed []Key
	s.mu.Lock()
	id := nsName{sl.Namespace, sl.Name}
	if hm := sl.Labels[aggregate.LabelHeadlessMirrorName]; hm != "" {
		if old := k.members.get(id.namespace, id.name); old != nil { // relabeled: it was a member's
			k.removeMember(old)
			changed = k.memberKeys(old, changed)
		}
		cur := mirrorSlice{name: s.hash.of(sl.Name), service: s.hash.of(sl.Labels[discoveryv1.LabelServiceName]), gen: k.gen}
		for i := range sl.Endpoints {
			cur.ready = cur.ready || aggregate.EndpointReady(&sl.Endpoints[i])
		}
		// Filed under the headless mirror it names now: Linkerd never moves
		// one to another, and if something did, the next list would drop
		// the entry left under the old one.
		of := nsName{s.intern.str(sl.Namespace), hm}
		list := k.mirrors.get(of.namespace, of.name)
		i, had := find(list, cur.name)
		if had && list[i].service == cur.service && list[i].ready == cur.ready {
			list[i].gen = k.gen // the same; only its list is new
			s.mu.Unlock()
			return
		}
		if had {
			list[i] = cur
		} else {
			k.mirrors.set(of.namespace, of.name, slices.Insert(list, i, cur))
		}
		changed = s.memberKeyOf(of.namespace, hm, changed)
		s.mu.Unlock()
		s.notify(changed)
		return
	}
	old := k.members.get(id.namespace, id.name)
	if old != nil && unchanged(old.rv, sl.ResourceVersion) {
		old.gen = k.gen // a relist delivering it as it was
		s.mu.Unlock()
		return
	}
	cur := s.intern.stripSlice(sl, s.cfg.Suffix)
	cur.gen = k.gen
	if old != nil && old.sameAs(cur) {
		old.gen, old.rv = k.gen, cur.rv
		s.mu.Unlock()
		return
	}
	if old != nil {
		k.removeMember(old)
		changed = k.memberKeys(old, changed)
	}
	k.addMember(cur)
	changed = k.memberKeys(cur, changed)
	s.mu.Unlock()
	s.notify(changed)
}

func (k *sliceSink) Delete(obj runtime.Object) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	s := k.s
	var changed []Key
	s.mu.Lock()
	if hm := sl.Labels[aggregate.LabelHeadlessMirrorName]; hm != "" {
		of := nsName{sl.Namespace, hm}
		if name := s.hash.of(sl.Name); contains(k.mirrors.get(of.namespace, of.name), name) {
			k.removeMirror(of, name)
			changed = s.memberKeyOf(of.namespace, hm, changed)
		}
	}
	if old := k.members.get(sl.Namespace, sl.Name); old != nil {
		k.removeMember(old)
		changed = k.memberKeys(old, changed)
	}
	s.mu.Unlock()
	s.notify(changed)
}

func (k *sliceSink) Listed() {
	s := k.s
	var changed []Key
	s.mu.Lock()
	k.members.each(func(_, _ string, old *cachedSlice) {
		if old.gen != k.gen {
			k.removeMember(old)
			changed = k.memberKeys(old, changed)
		}
	})
	k.mirrors.each(func(namespace, name string, list []mirrorSlice) {
		rest := slices.DeleteFunc(list, func(m mirrorSlice) bool { return m.gen != k.gen })
		if len(rest) != len(list) {
			changed = s.memberKeyOf(namespace, name, changed)
		}
		switch {
		case len(rest) == 0:
			k.mirrors.del(namespace, name)
		case cap(rest) > len(rest):
			// The list grew by doubling; hold it at its size.
			k.mirrors.set(namespace, name, slices.Clone(rest))
		default:
			k.mirrors.set(namespace, name, rest)
		}
	})
	s.mu.Unlock()
	s.notify(changed)
}

func contains(l []mirrorSlice, name uint64) bool {
	_, ok := find(l, name)
	return ok
}

func (k *sliceSink) removeMirror(of nsName, name uint64) {
	list := k.mirrors.get(of.namespace, of.name)
	if i, ok := find(list, name); ok {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		k.mirrors.del(of.namespace, of.name)
	} else {
		k.mirrors.set(of.namespace, of.name, list)
	}
}

func (k *sliceSink) addMember(c *cachedSlice) {
	k.members.set(c.namespace(), c.name, c)
	if c.serviceName != "" {
		appendTo(k.byService, c.namespace(), c.serviceName, c)
	}
	for _, n := range c.globalNamed() {
		appendTo(k.globalNamed, c.namespace(), n, c)
	}
}

func (k *sliceSink) removeMember(c *cachedSlice) {
	k.members.del(c.namespace(), c.name)
	if c.serviceName != "" {
		removeFrom(k.byService, c.namespace(), c.serviceName, c)
	}
	for _, n := range c.globalNamed() {
		removeFrom(k.globalNamed, c.namespace(), n, c)
	}
}

// memberKeys appends the bases a member slice can affect: its service's, and
// those of the endpoint mirrors of its endpoints named like a global (the
// name is held: Source.Service). A slice whose service is not held yet maps
// to nothing: the service's own arrival covers it.
func (k *sliceSink) memberKeys(c *cachedSlice, keys []Key) []Key {
	for _, n := range c.globalNamed() {
		if base, ok := aggregate.BaseOf(n, k.s.cfg.Suffix); ok {
			keys = append(keys, Key{c.namespace(), base})
		}
	}
	if c.serviceName == "" {
		return keys
	}
	return k.s.memberKeyOf(c.namespace(), c.serviceName, keys)
}

// memberKeyOf appends the base of the held Service namespace/name, if a member.
func (s *Source) memberKeyOf(namespace, name string, keys []Key) []Key {
	if c := s.services.get(namespace, name); c != nil {
		if k, ok := s.memberKey(c.service()); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// notify tells the handlers about changed bases, once each; called without the lock.
func (s *Source) notify(keys []Key) {
	if len(keys) == 0 {
		return
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if a.Namespace != b.Namespace {
			return compare(a.Namespace, b.Namespace)
		}
		return compare(a.Base, b.Base)
	})
	keys = slices.Compact(keys)
	for _, h := range s.handlers {
		for _, k := range keys {
			h.Changed(k)
		}
	}
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// skipped remembers a malformed Service reported, so that each version is
// reported once (a relist delivers it again).
type skipped struct {
	version string
	gen     uint32
}

// skippedService reports svc to the handlers; called without the lock.
func (s *Source) skippedService(svc *corev1.Service, skip aggregate.Skip) {
	for _, h := range s.handlers {
		h.Skipped(svc, "Service", skip)
	}
}
