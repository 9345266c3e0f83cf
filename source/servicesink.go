package source

import (
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// serviceSink indexes the Services of one namespace feed.
type serviceSink struct {
	s *Source
}

// Listing clears the list marks of this feed's Services (listMarks).
func (k *serviceSink) Listing() {
	s := k.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries.each(func(namespace, _ string, e *entry) {
		if k.namespaceOf(namespace) {
			e.svc.delivered = false
		}
	})
	for id, sk := range s.skipped {
		if sk.delivered && k.namespaceOf(id.namespace) {
			sk.delivered = false
			s.skipped[id] = sk
		}
	}
}

func (k *serviceSink) Upsert(obj runtime.Object) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	var report *aggregate.Skip // told after the lock, as the handlers are
	k.s.write(func() []Key { return k.upsert(svc, &report) })
	if report != nil {
		k.s.skippedService(svc, *report)
	}
}

// upsert indexes svc, setting report where it is a malformed Service not
// reported at this version; called with the lock held.
func (k *serviceSink) upsert(svc *corev1.Service, report **aggregate.Skip) []Key {
	s := k.s
	id := nsName{svc.Namespace, svc.Name}
	old := s.service(id.namespace, id.name)
	if k.current(old, id, svc.ResourceVersion) {
		return nil
	}
	class, skip := aggregate.Classify(svc, s.cfg.LocalSelector)
	if skip != nil {
		if seen, ok := s.skipped[id]; !ok || !seen.version.Is(svc.ResourceVersion) {
			*report = skip
		}
		s.skipped[id] = skipped{kubeclient.ParseVersion(svc.ResourceVersion), true}
	} else {
		delete(s.skipped, id)
	}
	var changed []Key
	if !s.keeps(svc, class.Member()) {
		if old != nil {
			changed = s.removeService(old, changed)
		}
		return changed
	}
	cur := s.intern.stripService(svc, s.labelKeys, s.cfg.Suffix, !s.cfg.NoUIDs)
	cur.delivered = true
	if class.Member() {
		cur.memberBase = class.Base
	}
	cur.keepDrainSince(old)
	if old != nil && old.sameAs(cur) {
		old.delivered, old.rv = true, cur.rv
		return nil
	}
	if old != nil {
		changed = s.removeService(old, changed)
	}
	return s.serviceKeys(s.addService(cur), changed)
}

// Current implements kubeclient.CurrentSink.
func (k *serviceSink) Current(p *kubeclient.Peeked) bool {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	old := k.s.service(p.Namespace, p.Name)
	if old == nil {
		return false
	}
	// The index's own strings, not p's: a map assignment keeps its key's
	// (current marks the Service's skipped entry, if any).
	return k.current(old, nsName{old.namespace(), old.name}, p.ResourceVersion)
}

// current reports whether old, the Service id present, is at version rv; if
// so, the current list has delivered it. Called with the lock held.
func (k *serviceSink) current(old *indexedService, id nsName, rv string) bool {
	if old == nil || !old.rv.Is(rv) {
		return false
	}
	// A relist delivering it as it was: nothing to read again.
	old.delivered = true
	if sk, ok := k.s.skipped[id]; ok {
		sk.delivered = true
		k.s.skipped[id] = sk
	}
	return true
}

func (k *serviceSink) Delete(obj runtime.Object) { writeAs(k.s, obj, k.delete) }

// delete drops svc; called with the lock held.
func (k *serviceSink) delete(svc *corev1.Service) (changed []Key) {
	s := k.s
	delete(s.skipped, nsName{svc.Namespace, svc.Name})
	if old := s.service(svc.Namespace, svc.Name); old != nil {
		changed = s.removeService(old, changed)
	}
	return changed
}

// Listed drops this feed's Services the list did not deliver (listMarks).
func (k *serviceSink) Listed() {
	s := k.s
	s.write(func() (changed []Key) {
		s.entries.each(func(namespace, _ string, e *entry) {
			if e.svc.present() && !e.svc.delivered && k.namespaceOf(namespace) {
				changed = s.removeService(&e.svc, changed)
			}
		})
		for id, sk := range s.skipped {
			if !sk.delivered && k.namespaceOf(id.namespace) {
				delete(s.skipped, id)
			}
		}
		return changed
	})
}

// namespaceOf reports whether objects of ns come from this sink's feed: one
// feed per watched namespace, or one for all.
func (k *serviceSink) namespaceOf(ns string) bool {
	return k.s.serviceSinkOf(ns) == k
}

// keeps reports whether the index keeps svc, a member or not: a member, a
// global of ours, or any Service named like a global (ours, or a user's that
// blocks ours). Nothing else is read, so nothing else is kept.
func (s *Source) keeps(svc *corev1.Service, member bool) bool {
	if member {
		return true
	}
	if _, ok := aggregate.BaseOf(svc.Name, s.cfg.Suffix); ok {
		return true
	}
	_, ok := s.globalBase(svc)
	return ok
}
