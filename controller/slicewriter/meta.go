package slicewriter

import (
	"maps"
	"slices"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sliceMeta is what every slice of one global Service carries besides its
// endpoints and ports.
type sliceMeta struct {
	namespace string
	service   string
	labels    map[string]string
	owner     metav1.OwnerReference
	// trigger is the view's trigger time, written on slices that are written
	// anyway; a new trigger time alone never causes a write.
	trigger time.Time
}

func newSliceMeta(svc *corev1.Service, base string, trigger time.Time) sliceMeta {
	return sliceMeta{
		namespace: svc.Namespace,
		service:   svc.Name,
		labels:    Labels(svc.Name, base),
		owner: metav1.OwnerReference{
			APIVersion: "v1",
			Kind:       "Service",
			Name:       svc.Name,
			UID:        svc.UID,
			Controller: new(true),
		},
		trigger: trigger,
	}
}

// Labels are the labels of every slice of the global service named service.
func Labels(service, base string) map[string]string {
	return map[string]string{
		discoveryv1.LabelServiceName: service,
		discoveryv1.LabelManagedBy:   aggregate.EndpointSliceManagedBy,
		aggregate.LabelManagedBy:     aggregate.ManagedBy,
		aggregate.LabelBase:          base,
	}
}

// matches reports whether s carries exactly the desired labels and owner.
// Anything else on them (a user's edit) is repaired.
func (m sliceMeta) matches(s *discoveryv1.EndpointSlice) bool {
	if !maps.Equal(s.Labels, m.labels) || len(s.OwnerReferences) != 1 {
		return false
	}
	o := s.OwnerReferences[0]
	return o.APIVersion == m.owner.APIVersion && o.Kind == m.owner.Kind && o.Name == m.owner.Name &&
		o.UID == m.owner.UID && o.Controller != nil && *o.Controller && o.BlockOwnerDeletion == nil
}

// build makes the slice to write: a rewrite of existing (same name and
// resourceVersion, so a concurrent change makes the write fail instead of being
// lost), or a new slice named by the API server when existing is nil.
func (m sliceMeta) build(existing *discoveryv1.EndpointSlice, addressType discoveryv1.AddressType,
	ports []discoveryv1.EndpointPort, endpoints []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       m.namespace,
			Labels:          maps.Clone(m.labels),
			OwnerReferences: []metav1.OwnerReference{m.owner},
		},
		AddressType: addressType,
		Ports:       slices.Clone(ports),
		Endpoints:   endpoints,
	}
	if existing != nil {
		// The UID makes an update of a slice re-created since fail, not land.
		s.Name, s.UID, s.ResourceVersion = existing.Name, existing.UID, existing.ResourceVersion
		if t, ok := existing.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
			s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: t}
		}
	} else {
		s.GenerateName = m.service + "-"
	}
	if !m.trigger.IsZero() {
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: m.trigger.UTC().Format(time.RFC3339Nano)}
	}
	return s
}
