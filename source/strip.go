package source

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
