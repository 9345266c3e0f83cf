package source

import (
	"fmt"
	"github.com/globalmirror/globalmirror/test/fakeapi"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
)

// An index fed endpoint mirrors' slices sparsely, from their messages, is
// the index fed them decoded whole: the same entries, mirrors, readiness and
// versions, and the same bases told, whatever else the slices carry, over
// adds, updates and a relabel between member and endpoint mirror; it keeps
// none of the bytes it read, and leaves any other slice to the feed.
func TestASliceStoredSparselyIsStoredAsTheWholeOne(t *testing.T) {
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
	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	index := func() (*Source, *recorder) {
		c := fake.NewClientset()
		s, err := New(Config{Client: c, APIs: fakeapi.For(c), LocalSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{changed: map[Key]int{}}
		s.AddHandler(rec)
		return s, rec
	}
	sparse, sparseTold := index()
	whole, wholeTold := index()
	whole.hash = sparse.hash
	headless := fixture.Service("ns", "db-east", map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "east"}, corev1.ClusterIPNone)
	for _, s := range []*Source{sparse, whole} {
		s.serviceSinks[metav1.NamespaceAll].Upsert(headless)
	}
	for i := range 2000 {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%d-east-x", rng.IntN(300)), Namespace: "ns", ResourceVersion: fmt.Sprint(i + 1),
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
			if rng.IntN(5) != 0 {
				sl.Labels[discoveryv1.LabelServiceName] = fmt.Sprintf("db-%d-east", rng.IntN(300))
			}
		} else {
			sl.Labels[discoveryv1.LabelServiceName] = "db-east" // a member of the headless mirror
		}
		for range rng.IntN(4) {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.1"}, Hostname: new("h"), Zone: new("z"),
				Conditions: discoveryv1.EndpointConditions{Ready: cond(), Serving: cond(), Terminating: cond()}})
		}
		data, err := fakeapi.Encode(sl)
		if err != nil {
			t.Fatal(err)
		}
		p, ok, err := kubeclient.Peek(data, "EndpointSlice")
		if !ok || err != nil {
			t.Fatalf("peek: %v %v", ok, err)
		}
		mirrors := sparse.slices[mirrorFeed]
		if stored := mirrors.UpsertSparse(&p); stored != endpointMirror {
			t.Fatalf("slice %d, an endpoint mirror's %v: stored sparsely %v", i, endpointMirror, stored)
		} else if !stored {
			mirrors.Upsert(sl)
		}
		clear(data) // nothing it keeps may be read from these bytes
		whole.slices[mirrorFeed].Upsert(sl)
		if !reflect.DeepEqual(sparse.entries, whole.entries) {
			t.Fatalf("slice %d: the index fed sparsely differs from the one fed whole", i)
		}
	}
	if !reflect.DeepEqual(sparseTold.changed, wholeTold.changed) || len(wholeTold.changed) == 0 {
		t.Errorf("bases told: sparsely %v, whole %v", sparseTold.changed, wholeTold.changed)
	}
}
