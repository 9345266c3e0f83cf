package source

import (
	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StripService is an informer transform that keeps only what globalmirror
// reads, so a cache of every Service in a cluster stays small.
func StripService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil // DeletedFinalStateUnknown and friends pass through
	}
	out := &corev1.Service{
		ObjectMeta: stripMeta(svc.ObjectMeta, aggregate.AnnotationRemoteFQName),
		Spec: corev1.ServiceSpec{
			Type:                     svc.Spec.Type,
			ClusterIP:                svc.Spec.ClusterIP,
			Ports:                    svc.Spec.Ports,
			Selector:                 svc.Spec.Selector,
			PublishNotReadyAddresses: svc.Spec.PublishNotReadyAddresses,
			IPFamilyPolicy:           svc.Spec.IPFamilyPolicy,
			IPFamilies:               svc.Spec.IPFamilies,
		},
	}
	return out, nil
}

// StripEndpointSlice is an informer transform that keeps only the fields the
// aggregation and the controller's reconciling read.
func StripEndpointSlice(obj any) (any, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  stripMeta(sl.ObjectMeta, corev1.EndpointsLastChangeTriggerTime),
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

func stripMeta(m metav1.ObjectMeta, keepAnnotations ...string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
		Labels:            m.Labels,
		OwnerReferences:   m.OwnerReferences,
	}
	for _, k := range keepAnnotations {
		if v, ok := m.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out
}
