package source

import (
	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

func (s *Source) serviceHandler(h Handler) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if svc, ok := asService(obj); ok {
				s.reportService(h, svc)
				s.notifyService(h, svc)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := asService(oldObj)
			cur, ok2 := asService(newObj)
			if !ok1 || !ok2 {
				return
			}
			if old.ResourceVersion == cur.ResourceVersion {
				return // resync: nothing changed
			}
			s.reportService(h, cur)
			// Labels or annotations may have moved the service to another base.
			s.notifyService(h, old)
			s.notifyService(h, cur)
		},
		DeleteFunc: func(obj any) {
			if svc, ok := asService(obj); ok {
				s.notifyService(h, svc)
			}
		},
	}
}

// notifyService tells the handler about every base svc can affect.
func (s *Source) notifyService(h Handler, svc *corev1.Service) {
	if k, ok := s.memberKey(svc); ok {
		h.Changed(k)
	}
	// Any Service named like a global (ours, or a user's that blocks ours).
	if base, ok := aggregate.BaseOf(svc.Name, s.cfg.Suffix); ok {
		h.Changed(Key{svc.Namespace, base})
	}
}

// reportService reports a Service that claims to be a mirror but cannot be used.
func (s *Source) reportService(h Handler, svc *corev1.Service) {
	if _, skip := aggregate.Classify(svc, s.cfg.LocalSelector); skip != nil {
		h.Skipped(svc, "Service", *skip)
	}
}

func (s *Source) sliceHandler(h Handler) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if sl, ok := asSlice(obj); ok {
				s.notifySlice(h, sl)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := asSlice(oldObj)
			cur, ok2 := asSlice(newObj)
			if !ok1 || !ok2 || old.resourceVersion == cur.resourceVersion {
				return
			}
			s.notifySlice(h, old)
			s.notifySlice(h, cur)
		},
		DeleteFunc: func(obj any) {
			if sl, ok := asSlice(obj); ok {
				s.notifySlice(h, sl)
			}
		},
	}
}

// notifySlice maps a slice to the base of its service, or of the headless mirror
// its endpoint mirror belongs to. A slice whose service is not cached yet maps to
// nothing: the service's own add event will cover it.
func (s *Source) notifySlice(h Handler, sl *cachedSlice) {
	// An endpoint mirror named like a global holds that name (Service).
	for _, n := range sl.globalNamed {
		if base, ok := aggregate.BaseOf(n, s.cfg.Suffix); ok {
			h.Changed(Key{sl.namespace, base})
		}
	}
	name := sl.headlessMirror
	if name == "" {
		name = sl.serviceName
	}
	if name == "" {
		return
	}
	if svc := s.Service(sl.namespace, name); svc != nil {
		if k, ok := s.memberKey(svc); ok {
			h.Changed(k)
		}
	}
}
