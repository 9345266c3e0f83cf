package source

import (
	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The informer transforms keep, of every object, only what the aggregation,
// the indexes and the controller's ownership checks read, the way the
// kubernetes plugin's object package does: the Service cache holds every
// Service of the watched namespaces, and both caches live in every CoreDNS.

// serviceStripper strips Services down to what classifies them.
type serviceStripper struct {
	labels []string // the label keys Classify, IsManaged and the local selector read
}

func newServiceStripper(local labels.Selector) serviceStripper {
	keep := []string{
		aggregate.LabelMirroredService, aggregate.LabelClusterName, aggregate.LabelHeadlessMirrorName,
		aggregate.LabelManagedBy, aggregate.LabelBase,
	}
	if local != nil {
		reqs, _ := local.Requirements()
		for _, r := range reqs {
			keep = append(keep, r.Key())
		}
	}
	return serviceStripper{labels: keep}
}

// strip is an informer transform. Ports and selector are kept for headless
// Services only: members and global services are headless, and nothing reads
// them of any other.
func (st serviceStripper) strip(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil // DeletedFinalStateUnknown and friends pass through
	}
	out := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:              svc.Name,
			Namespace:         svc.Namespace,
			UID:               svc.UID,
			ResourceVersion:   svc.ResourceVersion,
			DeletionTimestamp: svc.DeletionTimestamp,
			Labels:            ifAnyKey(svc.Labels, st.labels...),
			Annotations:       keepKeys(svc.Annotations, aggregate.AnnotationRemoteFQName),
		},
		Spec: corev1.ServiceSpec{ClusterIP: svc.Spec.ClusterIP},
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		out.Spec.Ports = svc.Spec.Ports
		out.Spec.Selector = svc.Spec.Selector
	}
	return out, nil
}

// StripMemberSlice is an informer transform for the members' EndpointSlices:
// addresses, hostnames, readiness and ports, and the labels that map a slice
// to its Service.
func StripMemberSlice(obj any) (any, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            sl.Name,
			Namespace:       sl.Namespace,
			UID:             sl.UID,
			ResourceVersion: sl.ResourceVersion,
			Labels:          sl.Labels,
			Annotations:     keepKeys(sl.Annotations, corev1.EndpointsLastChangeTriggerTime),
		},
		AddressType: sl.AddressType,
		Ports:       sl.Ports,
		Endpoints:   make([]discoveryv1.Endpoint, len(sl.Endpoints)),
	}
	for i, e := range sl.Endpoints {
		out.Endpoints[i] = discoveryv1.Endpoint{
			Addresses:  e.Addresses,
			Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready},
			Hostname:   e.Hostname,
		}
	}
	return out, nil
}

// StripEndpointSlice is an informer transform for the slices globalmirror
// writes: everything its minimal-churn reconciling compares.
func StripEndpointSlice(obj any) (any, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:              sl.Name,
			Namespace:         sl.Namespace,
			UID:               sl.UID,
			ResourceVersion:   sl.ResourceVersion,
			Generation:        sl.Generation,
			CreationTimestamp: sl.CreationTimestamp,
			DeletionTimestamp: sl.DeletionTimestamp,
			Labels:            sl.Labels,
			OwnerReferences:   sl.OwnerReferences,
			Annotations:       keepKeys(sl.Annotations, corev1.EndpointsLastChangeTriggerTime),
		},
		AddressType: sl.AddressType,
		Ports:       sl.Ports,
		Endpoints:   make([]discoveryv1.Endpoint, len(sl.Endpoints)),
	}
	for i, e := range sl.Endpoints {
		out.Endpoints[i] = discoveryv1.Endpoint{
			Addresses:  e.Addresses,
			Conditions: e.Conditions,
			Hostname:   e.Hostname,
			TargetRef:  e.TargetRef,
			NodeName:   e.NodeName,
			Zone:       e.Zone,
		}
	}
	return out, nil
}

// ifAnyKey is m if it holds any of keys, else nil. A map is kept whole, not
// filtered: a new small map costs as much as the decoded one it replaces;
// only dropping it saves.
func ifAnyKey(m map[string]string, keys ...string) map[string]string {
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return m
		}
	}
	return nil
}

// keepKeys is the part of m under keys, nil when that is empty.
func keepKeys(m map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
