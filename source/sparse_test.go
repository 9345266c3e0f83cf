package source

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An endpoint mirror's slice decoded sparsely holds, of what upsert reads,
// exactly what the slice decoded whole holds: its namespace, name, version,
// the two labels, and each endpoint's ready condition (so its readiness),
// whatever else the slice carries, in strings of its own; any other slice
// is left to the feed.
func TestSparseSliceIsWhatUpsertReadsOfTheWholeOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cond := func() *bool {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return new(true)
		}
		return new(false)
	}
	k := &sliceSink{}
	for i := range 2000 {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%d-east-%x", i, rng.Uint32()), Namespace: "ns", ResourceVersion: fmt.Sprint(rng.Uint32()),
				UID: "0b4a2f1e", CreationTimestamp: metav1.Now(), Annotations: map[string]string{"a": "b"},
				Labels: map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "east", discoveryv1.LabelManagedBy: "x"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: "Update", Time: &metav1.Time{Time: time.Now()}, FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:endpoints":{}}`)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Port: new(int32(4143))}},
		}
		endpointMirror := rng.IntN(4) != 0
		if endpointMirror {
			sl.Labels[aggregate.LabelHeadlessMirrorName] = "db-east"
		}
		if rng.IntN(5) != 0 {
			sl.Labels[discoveryv1.LabelServiceName] = fmt.Sprintf("db-%d-east", i)
		}
		for range rng.IntN(4) {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.1"}, Hostname: new("h"), Zone: new("z"),
				Conditions: discoveryv1.EndpointConditions{Ready: cond(), Serving: cond(), Terminating: cond()}})
		}
		data, err := kubeclient.EncodeProtobuf(sl)
		if err != nil {
			t.Fatal(err)
		}
		p, ok, err := kubeclient.Peek(data, "EndpointSlice")
		if !ok || err != nil {
			t.Fatalf("peek: %v %v", ok, err)
		}
		got := k.Sparse(&p)
		clear(data) // it keeps none of the bytes it read
		if !endpointMirror {
			if got != nil {
				t.Fatalf("slice %d, no endpoint mirror's: decoded sparsely", i)
			}
			continue
		}
		want := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: sl.Namespace, Name: sl.Name, ResourceVersion: sl.ResourceVersion,
			Labels: map[string]string{aggregate.LabelHeadlessMirrorName: "db-east"}}}
		if v, ok := sl.Labels[discoveryv1.LabelServiceName]; ok {
			want.Labels[discoveryv1.LabelServiceName] = v
		}
		for _, e := range sl.Endpoints {
			want.Endpoints = append(want.Endpoints, discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready}})
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("slice %d decoded sparsely:\n%#v\nwant\n%#v", i, got, want)
		}
		if s := got.(*discoveryv1.EndpointSlice); mirrorReady(s) != mirrorReady(sl) {
			t.Fatalf("slice %d: ready %v sparsely, %v whole", i, mirrorReady(s), mirrorReady(sl))
		}
	}
}
