package controller

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The owned slices' cache keeps what reconciling compares and drops the rest
// (managed fields, other annotations, hints).
func TestStripOwnedSliceKeepsWhatReconcilingCompares(t *testing.T) {
	host, ready := "db-0-east", true
	created := metav1.NewTime(time.Unix(1, 0))
	in := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db-global-1", Namespace: "ns", UID: "u", ResourceVersion: "9", Generation: 3, CreationTimestamp: created,
			Labels:          map[string]string{discoveryv1.LabelServiceName: "db-global"},
			Annotations:     map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:00Z", "other": "x"},
			OwnerReferences: []metav1.OwnerReference{{Name: "db-global"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "globalmirror-controller"}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("pg"), Port: new(int32(5432))}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"192.0.2.1"}, Hostname: &host,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   new("node"), Zone: new("z"),
			Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}},
		}},
	}
	got := stripOwnedSlice(in)
	want := in.DeepCopy()
	want.ManagedFields = nil
	want.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:00Z"}
	want.Endpoints[0].Hints = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stripOwnedSlice =\n%+v\nwant\n%+v", got, want)
	}
}
