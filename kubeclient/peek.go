package kubeclient

import (
	"bytes"
	"errors"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// Peeked is what a feed reads of an encoded object before it decides to
// decode it: its namespace, name and resourceVersion, and its labels on
// request (Label). Where the feed reads a watch's frames itself
// (Frames), its strings are the frame's own bytes: valid only during
// the call it is passed to, never to be kept (a map assignment keeps its
// key's strings: assign only with keys of strings the sink owns).
type Peeked struct {
	Namespace, Name, ResourceVersion string
	meta                             []byte // the object's encoded ObjectMeta
	borrowed                         bool
}

// Label is the value of the object's label key, and whether it has it;
// borrowed as the Peeked's other strings are.
func (p *Peeked) Label(key string) (string, bool) {
	var value string
	var found bool
	// Labels are ObjectMeta's field 11, a map: one entry message each.
	_ = eachField(p.meta, func(num protowire.Number, entry []byte) error {
		if num != metaLabels || found {
			return nil
		}
		var k, v []byte
		if err := eachField(entry, func(num protowire.Number, b []byte) error {
			switch num {
			case mapEntryKey:
				k = b
			case mapEntryValue:
				v = b
			}
			return nil
		}); err != nil {
			return err
		}
		if string(k) == key {
			value, found = p.str(v), true
		}
		return nil
	})
	return value, found
}

func (p *Peeked) str(b []byte) string {
	if p.borrowed {
		if len(b) == 0 {
			return ""
		}
		// The bytes outlive the call the string is used in: see Peeked.
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
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
	metaLabels             = 11
	mapEntryKey            = 1 // each entry of a protobuf map
	mapEntryValue          = 2
)

var errNotProtobuf = errors.New("not a Kubernetes protobuf object")

// Peek reads an encoded object of kind in place, as a feed reading frames
// does: the Peeked's strings are data's bytes (borrowed). ok is false for
// any other kind.
func Peek(data []byte, kind string) (p Peeked, ok bool, err error) {
	return peekMeta(data, kind, true)
}

// peekMeta reads the namespace, name and resourceVersion of an encoded
// object of kind, and where its labels are, and nothing else; ok is false
// for any other kind. Borrowed: the strings are data's own bytes.
func peekMeta(data []byte, kind string, borrowed bool) (p Peeked, ok bool, err error) {
	p.borrowed = borrowed
	rest, found := bytes.CutPrefix(data, protobufMagic)
	if !found {
		return p, false, errNotProtobuf
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
		return p, false, err
	}
	err = eachField(raw, func(num protowire.Number, v []byte) error {
		if num != objectMetadata {
			return nil
		}
		p.meta = v
		return eachField(v, func(num protowire.Number, v []byte) error {
			switch num {
			case metaName:
				p.Name = p.str(v)
			case metaNamespace:
				p.Namespace = p.str(v)
			case metaResourceVersion:
				p.ResourceVersion = p.str(v)
			}
			return nil
		})
	})
	return p, err == nil, err
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
