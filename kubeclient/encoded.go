package kubeclient

import (
	"bytes"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// A relist after an API server restart or a 410 sends every object again,
// almost all of them at the version a feed's sink already holds. Decoding
// each again (its metadata, labels, managedFields; its bytes copied twice on
// the way) cost a relist about 3 KB of garbage and its CPU per object, on
// every CoreDNS replica at once. A feed's own client therefore decodes, of
// each watched object of its kind, only its namespace, name and
// resourceVersion at first (Encoded), and the feed asks the sink whether it
// holds that version (HeldSink) before it decodes the rest.

// Encoded is an object of a watch that is not decoded yet: its namespace,
// name and resourceVersion (all RetryWatcher and a HeldSink read), and its
// encoding. Feeds decode it unless their sink holds it at that version.
type Encoded struct {
	metav1.TypeMeta
	metav1.ObjectMeta // Namespace, Name and ResourceVersion only

	raw     []byte
	decoder runtime.Decoder
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
	c := &Encoded{TypeMeta: e.TypeMeta, raw: e.raw, decoder: e.decoder}
	e.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// HeldSink is a Sink that can tell, from an object's name and version
// alone, that it holds the object as it is.
type HeldSink interface {
	Sink
	// Held reports whether the sink holds namespace/name at
	// resourceVersion; if so it counts the object as delivered again (as
	// Upsert would an object it holds as it is), and the feed decodes
	// nothing more of it.
	Held(namespace, name, resourceVersion string) bool
}

// EncodedClient is a REST client of group version gv (at apiPath: "/api"
// for the core group, else "/apis") on rc's configuration, whose watches
// deliver objects of kind as *Encoded. Everything else it reads (lists,
// gets, statuses, bookmarks) it decodes as client-go's clients do. Wrap it
// in the group's typed client (corev1.New(c)) for a Feed, whose sink should
// be a HeldSink.
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
		if m, ok, _ := peekMeta(data, d.kind); ok && m.name != "" && m.resourceVersion != "" {
			e := &Encoded{raw: data, decoder: d.Decoder}
			e.Kind = d.kind
			e.Namespace, e.Name, e.ResourceVersion = m.namespace, m.name, m.resourceVersion
			return e, nil, nil
		}
	}
	return d.Decoder.Decode(data, defaults, into)
}

// protobufMagic starts every object Kubernetes encodes in protobuf, before
// the runtime.Unknown that carries its type and bytes.
var protobufMagic = []byte{0x6b, 0x38, 0x73, 0x00}

// Field numbers, from k8s.io/apimachinery's generated.proto files.
const (
	unknownTypeMeta        = 1 // runtime.Unknown
	unknownRaw             = 2
	unknownContentEncoding = 3
	typeMetaKind           = 2 // runtime.TypeMeta
	objectMetadata         = 1 // every object's metadata is its field 1
	metaName               = 1 // metav1.ObjectMeta
	metaNamespace          = 3
	metaResourceVersion    = 6
)

type peeked struct{ namespace, name, resourceVersion string }

var errNotProtobuf = errors.New("not a Kubernetes protobuf object")

// peekMeta reads the namespace, name and resourceVersion of an encoded
// object of kind, and nothing else; ok is false for any other kind.
func peekMeta(data []byte, kind string) (m peeked, ok bool, err error) {
	rest, found := bytes.CutPrefix(data, protobufMagic)
	if !found {
		return m, false, errNotProtobuf
	}
	var raw []byte
	err = eachField(rest, func(num protowire.Number, v []byte) error {
		switch num {
		case unknownTypeMeta:
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == typeMetaKind {
					ok = string(v) == kind
				}
				return nil
			})
		case unknownRaw:
			raw = v
		case unknownContentEncoding:
			if len(v) > 0 {
				return errNotProtobuf
			}
		}
		return nil
	})
	if err != nil || !ok {
		return m, false, err
	}
	err = eachField(raw, func(num protowire.Number, v []byte) error {
		if num != objectMetadata {
			return nil
		}
		return eachField(v, func(num protowire.Number, v []byte) error {
			switch num {
			case metaName:
				m.name = string(v)
			case metaNamespace:
				m.namespace = string(v)
			case metaResourceVersion:
				m.resourceVersion = string(v)
			}
			return nil
		})
	})
	return m, err == nil, err
}

// eachField calls f with each length-delimited field of the message b
// (strings, bytes, messages); it skips the others.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}
