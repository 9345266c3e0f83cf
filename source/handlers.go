package source

import (
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

func (s *Source) serviceHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if svc, ok := obj.(*corev1.Service); ok {
				s.reportService(svc)
				s.notifyService(svc)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Service)
			cur, ok2 := newObj.(*corev1.Service)
			if !ok1 || !ok2 {
				return
			}
			if old.ResourceVersion == cur.ResourceVersion {
				return // resync: nothing changed
			}
			s.reportService(cur)
			// Labels or annotations may have moved the service to another base.
			s.notifyService(old)
			s.notifyService(cur)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if svc, ok := obj.(*corev1.Service); ok {
				s.notifyService(svc)
			}
		},
	}
}

// notifyService tells the handler about every base svc can affect.
func (s *Source) notifyService(svc *corev1.Service) {
	if k, ok := s.memberKey(svc); ok {
		s.handler.Changed(k)
	}
	c, _ := aggregate.Classify(svc, s.cfg.LocalSelector)
	if c.Role == aggregate.RoleEndpointMirror {
		if hm := s.Service(svc.Namespace, c.HeadlessMirror); hm != nil {
			if k, ok := s.memberKey(hm); ok {
				s.handler.Changed(k)
			}
		}
	}
	// Any Service named like a global (ours, or a user's that blocks ours).
	if base, ok := strings.CutSuffix(svc.Name, s.cfg.Suffix); ok && base != "" {
		s.handler.Changed(Key{svc.Namespace, base})
	}
}

// reportService reports a Service that claims to be a mirror but cannot be used.
func (s *Source) reportService(svc *corev1.Service) {
	if _, why := aggregate.Classify(svc, s.cfg.LocalSelector); why != "" {
		s.handler.Skipped(svc, "Service", why)
	}
}

func (s *Source) sliceHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if sl, ok := obj.(*discoveryv1.EndpointSlice); ok {
				s.notifySlice(sl)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*discoveryv1.EndpointSlice)
			cur, ok2 := newObj.(*discoveryv1.EndpointSlice)
			if !ok1 || !ok2 || old.ResourceVersion == cur.ResourceVersion {
				return
			}
			s.notifySlice(old)
			s.notifySlice(cur)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if sl, ok := obj.(*discoveryv1.EndpointSlice); ok {
				s.notifySlice(sl)
			}
		},
	}
}

// notifySlice maps a slice to the base of its service, or of the headless mirror
// its endpoint mirror belongs to. A slice whose service is not cached yet maps to
// nothing: the service's own add event will cover it.
func (s *Source) notifySlice(sl *discoveryv1.EndpointSlice) {
	name := sl.Labels[aggregate.LabelHeadlessMirrorName]
	if name == "" {
		name = sl.Labels[discoveryv1.LabelServiceName]
	}
	if name == "" {
		return
	}
	if svc := s.Service(sl.Namespace, name); svc != nil {
		if k, ok := s.memberKey(svc); ok {
			s.handler.Changed(k)
		}
	}
}
