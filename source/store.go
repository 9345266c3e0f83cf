package source

import (
	"slices"
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The index is written by the feeds' sinks (servicesink.go,
// slicesink.go), one goroutine per feed, under Source.mu. Handlers are told
// after the lock is released.
//
// listMarks: every object the index keeps carries one bit, its list mark,
// the one way each sink (and the controller's own-slices sink) tells what a
// full list delivered. Listing clears the marks of the sink's objects,
// delivering an object (upserted, or found current) sets its mark, and
// Listed drops the sink's objects left unmarked. A list that failed part
// way and starts anew clears them again, so only the last list counts. A
// bit, not a generation, because an endpoint mirror's slice has room for
// no more (mirror.go).
//
// The index stores minimal types (service.go, slice.go, mirror.go,
// intern.go), not API objects, the way the kubernetes
// plugin's object package does, and goes further: it is built from the watch
// events themselves (kubeclient.Feed), so it has no client-go informer's
// copy, key, index entry or queue slot per object; Services nothing reads
// are not kept at all; an endpoint mirror's slice (one per mirrored pod, the bulk of a
// large world) is two name hashes and one readiness bit; a member slice is
// one string; what many objects share (namespaces, clusters, label pairs,
// port lists) is interned. The entries are turned back into (sparse,
// read-only) API objects only to aggregate one base, or when asked for one.

// nsName names an object in the index.
type nsName struct{ namespace, name string }

// write runs f under the lock, then tells the handlers about the bases f
// returns (none where f changed nothing), with the lock released.
func (s *Source) write(f func() []Key) {
	s.mu.Lock()
	changed := f()
	drains := s.drainsChanged
	s.drainsChanged = false
	s.mu.Unlock()
	s.notify(changed)
	if drains {
		s.tellDrains()
	}
}

// writeAs writes f's change of obj, where obj is a T (the sink's kind;
// anything else is ignored).
func writeAs[T runtime.Object](s *Source, obj runtime.Object, f func(T) []Key) {
	if o, ok := obj.(T); ok {
		s.write(func() []Key { return f(o) })
	}
}

// entry is what the index has under one name in a namespace: the Service
// of that name, if present; the member slices of the service of that name, of
// every slice feed, each tagged with its feed; and, where it is a
// headless mirror, its endpoint mirrors' slices: one map slot and one small
// struct per Service, not a map per kind. Its Service's name is the map's
// key, the one string of it stored.
type entry struct {
	svc     indexedService // named always; present where it has a shape
	members []*indexedSlice
	mirrors []mirrorSlice // sorted by key
}

// service is the Service namespace/name if present, else nil.
func (s *Source) service(namespace, name string) *indexedService {
	if e := s.entries.get(namespace, name); e != nil && e.svc.present() {
		return &e.svc
	}
	return nil
}

// entryFor is the entry of namespace/name, made if there is none. Its name
// is a copy: name may be part of a larger string (a slice's name, which
// data has already), which the map would otherwise keep whole.
func (s *Source) entryFor(namespace, name string) *entry {
	if e := s.entries.get(namespace, name); e != nil {
		return e
	}
	name = strings.Clone(name)
	e := &entry{svc: indexedService{name: name}}
	s.entries.set(namespace, name, e)
	return e
}

// dropIfEmpty removes the entry e of namespace/name if it has nothing.
func (s *Source) dropIfEmpty(namespace, name string, e *entry) {
	if !e.svc.present() && len(e.members) == 0 && len(e.mirrors) == 0 {
		s.entries.del(namespace, name)
	}
}

// addService stores c in its entry, and returns it as stored there.
func (s *Source) addService(c *indexedService) *indexedService {
	e := s.entryFor(c.namespace(), c.name)
	name := e.svc.name
	e.svc = *c
	e.svc.name = name
	if base := c.memberBase; strings.HasPrefix(name, base) {
		e.svc.memberBase = name[:len(base)] // the stored name's bytes, not the object's
	}
	if k, ok := s.baseKey(&e.svc); ok {
		appendTo(s.bases, k.Namespace, k.Base, &e.svc)
	}
	if d, ok := e.svc.serviceDrain(); ok {
		if s.serviceDrains == nil {
			s.serviceDrains = map[nsName]ServiceDrain{}
		}
		s.serviceDrains[nsName{d.namespace, name}] = d.ServiceDrain
		s.drainsChanged = true
	}
	return &e.svc
}

// removeService drops the present Service c, and appends every base it could
// affect to keys.
func (s *Source) removeService(c *indexedService, keys []Key) []Key {
	keys = s.serviceKeys(c, keys)
	namespace := c.namespace()
	if k, ok := s.baseKey(c); ok {
		removeFrom(s.bases, k.Namespace, k.Base, c)
	}
	if _, ok := c.serviceDrain(); ok {
		delete(s.serviceDrains, nsName{namespace, c.name})
		s.drainsChanged = true
	}
	*c = indexedService{name: c.name}
	if e := s.entries.get(namespace, c.name); e != nil {
		s.dropIfEmpty(namespace, c.name, e)
	}
	return keys
}

// baseKey is the base a present Service is filed under: members under their
// base, globals of ours under theirs.
func (s *Source) baseKey(c *indexedService) (Key, bool) {
	if c.memberBase != "" {
		return Key{c.namespace(), c.memberBase}, true
	}
	svc := c.service()
	if base, ok := s.globalBase(svc); ok {
		return Key{svc.Namespace, base}, true
	}
	return Key{}, false
}

// serviceKeys appends every base c can affect.
func (s *Source) serviceKeys(c *indexedService, keys []Key) []Key {
	if c.memberBase != "" {
		keys = append(keys, Key{c.namespace(), c.memberBase})
	}
	if base, ok := aggregate.BaseOf(c.name, s.cfg.Suffix); ok {
		keys = append(keys, Key{c.namespace(), base})
	}
	return keys
}

// memberKeyOf appends the base of the present Service namespace/name, if a member.
func (s *Source) memberKeyOf(namespace, name string, keys []Key) []Key {
	if c := s.service(namespace, name); c != nil && c.memberBase != "" {
		keys = append(keys, Key{c.namespace(), c.memberBase})
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
	version   kubeclient.Version
	delivered bool // its list mark (listMarks)
}

// skippedService reports svc to the handlers; called without the lock.
func (s *Source) skippedService(svc *corev1.Service, skip aggregate.Skip) {
	for _, h := range s.handlers {
		h.Skipped(svc, "Service", skip)
	}
}
