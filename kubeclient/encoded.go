package kubeclient

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// The watch after a list goes through client-go's RetryWatcher, which
// resumes it where it ends. A feed's own client decodes, of each watched
// object of its kind, only its namespace, name and resourceVersion at first
// (Encoded), and the feed asks its sink whether that version is current
// (CurrentSink) before it decodes the rest, as for listed objects.

// Encoded is an object of a watch that is not decoded yet: its namespace,
// name and resourceVersion (all RetryWatcher and a CurrentSink read), and its
// encoding. Feeds decode it unless it is current in their sink.
type Encoded struct {
	metav1.TypeMeta
	metav1.ObjectMeta // Namespace, Name and ResourceVersion only

	raw     []byte
	meta    []byte // raw's ObjectMeta, for Peeked's labels
	message []byte // raw's object, without its envelope
	decoder runtime.Decoder
}

// Peeked is what a CurrentSink reads of it.
func (e *Encoded) Peeked() *Peeked {
	return &Peeked{Namespace: e.Namespace, Name: e.Name, ResourceVersion: e.ResourceVersion, meta: e.meta, message: e.message}
}

// Decode decodes the object in full.
func (e *Encoded) Decode() (runtime.Object, error) {
	obj, _, err := e.decoder.Decode(e.raw, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s: %w", e.Kind, e.Namespace, e.Name, err)
	}
	return obj, nil
}

// DeepCopyObject implements runtime.Object.
func (e *Encoded) DeepCopyObject() runtime.Object {
	c := &Encoded{TypeMeta: e.TypeMeta, raw: e.raw, meta: e.meta, decoder: e.decoder}
	e.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// EncodedClient is a REST client of group version gv (at apiPath: "/api"
// for the core group, else "/apis") on rc's configuration, whose watches
// deliver objects of kind as *Encoded. Everything else it reads (lists,
// gets, statuses, bookmarks) it decodes as client-go's clients do. Wrap it
// in the group's typed client (corev1.New(c)) for a Feed, whose sink should
// be a CurrentSink.
func EncodedClient(rc *rest.Config, gv schema.GroupVersion, apiPath, kind string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(rc)
	c.GroupVersion, c.APIPath = &gv, apiPath
	c.NegotiatedSerializer = encodedCodecs{NegotiatedSerializer: rest.CodecFactoryForGeneratedClient(scheme.Scheme, scheme.Codecs).WithoutConversion(), kind: kind}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// encodedCodecs are client-go's codecs whose decoders leave objects of kind
// Encoded.
type encodedCodecs struct {
	runtime.NegotiatedSerializer
	kind string
}

func (c encodedCodecs) DecoderToVersion(d runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	return encodedDecoder{Decoder: c.NegotiatedSerializer.DecoderToVersion(d, gv), kind: c.kind}
}

type encodedDecoder struct {
	runtime.Decoder
	kind string
}

func (d encodedDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	// A watch's events come with into nil; a list's, a get's, into the
	// typed object asked for.
	if into == nil {
		if p, ok, _ := peekMeta(data, d.kind, false); ok && p.Name != "" && p.ResourceVersion != "" {
			e := &Encoded{raw: data, meta: p.meta, message: p.message, decoder: d.Decoder}
			e.Kind = d.kind
			e.Namespace, e.Name, e.ResourceVersion = p.Namespace, p.Name, p.ResourceVersion
			return e, nil, nil
		}
	}
	return d.Decoder.Decode(data, defaults, into)
}
