package kubeclient

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// encodedServices is the decoder a feed's EncodedClient of Services uses.
func encodedServices(t *testing.T) runtime.Decoder {
	t.Helper()
	codecs := encodedCodecs{NegotiatedSerializer: rest.CodecFactoryForGeneratedClient(scheme.Scheme, scheme.Codecs).WithoutConversion(), kind: "Service"}
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	return codecs.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
}

func fullService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db-east", Namespace: "prod", ResourceVersion: "4711", UID: "u-1",
			Labels:        map[string]string{"mirror.linkerd.io/cluster-name": "east"},
			Annotations:   map[string]string{"mirror.linkerd.io/remote-svc-fq-name": "db.prod.svc.cluster.local"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "linkerd", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "peer", Port: 7000}}},
	}
}

func TestAWatchedObjectOfTheKindStaysEncodedUntilDecoded(t *testing.T) {
	svc := fullService()
	data := protobufOf(t, svc)
	obj, err := runtime.Decode(encodedServices(t), data)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := obj.(*Encoded)
	if !ok {
		t.Fatalf("decoded to %T, want *Encoded", obj)
	}
	if e.Namespace != "prod" || e.Name != "db-east" || e.ResourceVersion != "4711" || e.Kind != "Service" {
		t.Errorf("encoded %s %s/%s@%s, want Service prod/db-east@4711", e.Kind, e.Namespace, e.Name, e.ResourceVersion)
	}
	if len(e.Labels) > 0 || len(e.ManagedFields) > 0 {
		t.Errorf("read more than namespace, name and version: %+v", e.ObjectMeta)
	}
	// What a SparseSink decodes: the object's own message.
	var sparse corev1.Service
	if err := sparse.Unmarshal(e.Peeked().Message()); err != nil || !reflect.DeepEqual(&sparse, svc) {
		t.Errorf("the peeked message is %+v (%v), want the Service", &sparse, err)
	}
	full, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	got := full.(*corev1.Service)
	got.TypeMeta = metav1.TypeMeta{}
	if !reflect.DeepEqual(got, svc) {
		t.Errorf("decoded in full\n  %+v\nwant\n  %+v", got, svc)
	}
}

func TestWhatIsNotAWatchedObjectOfTheKindIsDecodedAsUsual(t *testing.T) {
	dec := encodedServices(t)
	svc := fullService()
	bookmark := &corev1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	status := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired}
	list := &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: []corev1.Service{*svc}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "prod", ResourceVersion: "5"}}
	for name, obj := range map[string]runtime.Object{"a bookmark": bookmark, "a status": status, "a list": list, "another kind": pod} {
		got, err := runtime.Decode(dec, protobufOf(t, obj))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, encoded := got.(*Encoded); encoded || reflect.TypeOf(got) != reflect.TypeOf(obj) {
			t.Errorf("%s decoded to %T, want %T", name, got, obj)
		}
	}
	// Decoded into an object (a list's or a get's): in full.
	into := &corev1.Service{}
	if got, _, err := dec.Decode(protobufOf(t, svc), nil, into); err != nil || got != into || into.Name != "db-east" || len(into.Labels) != 1 {
		t.Errorf("decoded into %+v (%v), want the Service in full", into, err)
	}
	// Not protobuf, or broken: decoded as usual, which fails where it should.
	if _, ok, err := peekMeta([]byte(`{"kind":"Service"}`), "Service", false); ok || err == nil {
		t.Error("JSON peeked as protobuf")
	}
	data := protobufOf(t, svc)
	if _, ok, err := peekMeta(data[:len(data)/2], "Service", false); ok || err == nil {
		t.Error("a truncated object peeked without an error")
	}
	if _, err := runtime.Decode(dec, data[:len(data)/2]); err == nil {
		t.Error("a truncated object decoded")
	}
}

// The watch after a list leaves objects encoded (EncodedClient): the feed
// decodes an update only where it is not current in its sink, and a deletion
// always.
func TestAWatchDecodesOnlyWhatItsSinkFindsNotCurrent(t *testing.T) {
	encoded := func(p *corev1.Pod) *Encoded {
		// Pods stand in for any kind here: the feed only reads the meta
		// and calls Decode.
		info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
		dec := scheme.Codecs.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
		e := &Encoded{raw: protobufOf(t, p), decoder: dec}
		e.Namespace, e.Name, e.ResourceVersion = p.Namespace, p.Name, p.ResourceVersion
		return e
	}
	api := &scriptedAPI{
		pages: []func() (runtime.Object, error){page("", "5")},
		watches: []func() (watch.Interface, error){events(
			watch.Event{Type: watch.Modified, Object: encoded(pod("a", "3"))}, // current: not decoded
			watch.Event{Type: watch.Modified, Object: encoded(pod("b", "4"))}, // present at another version
			watch.Event{Type: watch.Deleted, Object: encoded(pod("a", "3"))},  // a delete is always decoded
		)},
	}
	sink := &currentSink{current: map[string]bool{"a@3": true, "b@2": true}}
	runFeed(t, api.api(false), sink)
	sinkSees(t, &sink.recordingSink, "listing", "listed", "current a@3", "upsert b@4", "delete a@3")
}
