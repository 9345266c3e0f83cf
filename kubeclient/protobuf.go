package kubeclient

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// A feed reads what the API server sends in protobuf itself, where it would
// otherwise decode every object: a list's pages and a streamed list's watch
// frames. Of each object it reads, in place, its namespace, name, version
// and, on request, a label (Peeked), and asks its sink whether the object is
// current (CurrentSink) before it decodes anything. A relist
// sends every object again, almost all of them current in the sink:
// those cost no allocation at all. That matters beyond the bytes: a
// collection during a relist marks whatever the relist allocated
// meanwhile, so a relist's garbage rate sets the heap's peak, however
// short-lived the garbage.

// Peeked is what a feed reads of an encoded object before it decides to
// decode it: its namespace, name and resourceVersion, and its labels on
// request (Label). Where the feed reads the API server's bytes itself
// (lists, streamed lists), its strings are those bytes: valid only during
// the call it is passed to, never to be kept (a map assignment keeps its
// key's strings: assign only with keys of strings the sink owns).
type Peeked struct {
	Namespace, Name, ResourceVersion string
	meta                             []byte // the object's encoded ObjectMeta
	message                          []byte // the object's message, for a SparseSink
	borrowed                         bool
}

// Message is the object's encoded message, without its envelope (what its
// generated Unmarshal reads), for a SparseSink; borrowed as p's strings are.
func (p *Peeked) Message() []byte { return p.message }

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

// protobufMagic starts everything Kubernetes encodes in protobuf, before
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
	listMetadata           = 1 // every list's ListMeta is its field 1
	listItems              = 2 // and its items field 2
	listMetaVersion        = 2 // metav1.ListMeta
)

var errNotProtobuf = errors.New("not a Kubernetes protobuf object")

// Peek reads an encoded object of kind in place, as a feed does: the
// Peeked's strings are data's bytes (borrowed). ok is false for any other
// kind.
func Peek(data []byte, kind string) (p Peeked, ok bool, err error) {
	return peekMeta(data, kind, true)
}

// peekMeta reads the namespace, name and resourceVersion of an encoded
// object of kind, and where its labels are, and nothing else; ok is false
// for any other kind. Borrowed: the strings are data's own bytes.
func peekMeta(data []byte, kind string, borrowed bool) (p Peeked, ok bool, err error) {
	k, raw, err := unwrap(data)
	if err != nil || string(k) != kind {
		return Peeked{borrowed: borrowed}, false, err
	}
	p, err = peekObject(raw, borrowed)
	return p, err == nil, err
}

// unwrap reads the envelope of an encoded object: its kind, and its own
// message.
func unwrap(data []byte) (kind, raw []byte, err error) {
	rest, found := bytes.CutPrefix(data, protobufMagic)
	if !found {
		return nil, nil, errNotProtobuf
	}
	err = eachField(rest, func(num protowire.Number, v []byte) error {
		switch num {
		case unknownTypeMeta:
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == typeMetaKind {
					kind = v
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
	return kind, raw, err
}

// peekObject reads an object's message (no envelope, as a list's items
// come) as peekMeta does.
func peekObject(raw []byte, borrowed bool) (p Peeked, err error) {
	p.borrowed, p.message = borrowed, raw
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
	return p, err
}

// eachField calls f with each length-delimited field of the message b
// (strings, bytes, messages); it skips the others.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	return EachField(b, func(num protowire.Number, v []byte, _ uint64, isBytes bool) error {
		if !isBytes {
			return nil
		}
		return f(num, v)
	})
}

// EachField calls f with each field of the encoded message msg that a
// sparse decoder reads, in order: a length-delimited one (string, bytes,
// message) with its bytes and isBytes, a varint (bool, integer, enum) with
// its value. It skips fixed-size fields.
func EachField(msg []byte, f func(num protowire.Number, b []byte, varint uint64, isBytes bool) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		var err error
		switch typ {
		case protowire.BytesType:
			var v []byte
			if v, n = protowire.ConsumeBytes(msg); n >= 0 {
				err = f(num, v, 0, true)
			}
		case protowire.VarintType:
			var v uint64
			if v, n = protowire.ConsumeVarint(msg); n >= 0 {
				err = f(num, nil, v, false)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err != nil {
			return err
		}
		msg = msg[n:]
	}
	return nil
}

// maxMessage bounds one object, as client-go's streaming decoder bounds a
// frame: anything larger is not an object the API server would store.
// maxList bounds a list in one response, which is read an item at a time:
// far more than any API server has the memory for.
const (
	maxMessage = 16 << 20
	maxList    = 1 << 50
)

// fieldReader reads the fields of one protobuf message from a stream, each
// length-delimited field into one buffer that every reader of the stream
// shares: a field's bytes are valid until the next is read. A list is read
// so, one item at a time, never whole.
type fieldReader struct {
	r    *bufio.Reader
	left int64   // bytes of the message not read yet; -1: up to the end of the stream
	buf  *[]byte // shared
}

// next reads the next field's tag; io.EOF where the message ends.
func (f *fieldReader) next() (protowire.Number, protowire.Type, error) {
	if f.left == 0 {
		return 0, 0, io.EOF
	}
	tag, err := f.varint()
	if err != nil {
		if errors.Is(err, io.EOF) && f.left > 0 {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(tag)
	if num < protowire.MinValidNumber {
		return 0, 0, errors.New("a protobuf field numbered 0")
	}
	return num, typ, nil
}

// nextOf reads up to the next length-delimited field numbered one of nums,
// skipping every other field, and returns its number; io.EOF where the
// message ends.
func (f *fieldReader) nextOf(nums ...protowire.Number) (protowire.Number, error) {
	for {
		num, typ, err := f.next()
		if err != nil {
			return 0, err
		}
		if typ == protowire.BytesType && slices.Contains(nums, num) {
			return num, nil
		}
		if err := f.skip(typ); err != nil {
			return 0, err
		}
	}
}

// bytes reads a length-delimited field's bytes into the shared buffer.
func (f *fieldReader) bytes() ([]byte, error) {
	n, err := f.length(maxMessage)
	if err != nil {
		return nil, err
	}
	b := (*f.buf)[:0]
	if uint64(cap(b)) < n {
		b = make([]byte, n)
	}
	b = b[:n]
	*f.buf = b
	return b, f.read(b)
}

// message is a reader of the length-delimited field's message, as a stream
// of its own, read from f's stream; f counts it read. Of any length up to
// maxList: a whole list's, which its reader reads field by field, each
// bounded.
func (f *fieldReader) message() (*fieldReader, error) {
	n, err := f.length(maxList)
	if err != nil {
		return nil, err
	}
	if f.left >= 0 {
		f.left -= int64(n) // #nosec G115 -- length() bounds n below left and maxList
	}
	return &fieldReader{r: f.r, left: int64(n), buf: f.buf}, nil // #nosec G115 -- see above
}

// skip skips a field of any other wire type than length-delimited.
func (f *fieldReader) skip(typ protowire.Type) error {
	switch typ {
	case protowire.VarintType:
		_, err := f.varint()
		return err
	case protowire.Fixed32Type:
		return f.read(make([]byte, 4))
	case protowire.Fixed64Type:
		return f.read(make([]byte, 8))
	case protowire.BytesType:
		_, err := f.bytes()
		return err
	}
	return fmt.Errorf("a protobuf field of wire type %d", typ)
}

// length reads a length-delimited field's length, at most most.
func (f *fieldReader) length(most uint64) (uint64, error) {
	n, err := f.varint()
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	switch {
	case err != nil:
	case n > most:
		err = fmt.Errorf("a protobuf field of %d bytes", n)
	case f.left >= 0 && n > uint64(f.left):
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (f *fieldReader) varint() (uint64, error) { return binary.ReadUvarint(f) }

// ReadByte reads a byte of the message (binary.ReadUvarint's reader).
func (f *fieldReader) ReadByte() (byte, error) {
	if f.left == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	b, err := f.r.ReadByte()
	if err == nil && f.left > 0 {
		f.left--
	}
	return b, err
}

func (f *fieldReader) read(b []byte) error {
	if _, err := io.ReadFull(f.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if f.left > 0 {
		f.left -= int64(len(b))
	}
	return nil
}
