package kubeclient

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// A relist sends every object again, almost all of them at the version the
// sink holds. Through client-go's watch each costs garbage however little
// is decoded of it: its frame is copied into a WatchEvent, then into a
// runtime.Unknown, and lands in an event on a channel, ahead of the feed
// that would tell whether it is needed. The API server's protobuf watch
// frames are simple (a length, then a WatchEvent: a type and the object's
// bytes), so a feed reads a streamed list's frames itself, into one buffer,
// and asks its sink about each object right there: one the sink holds
// costs the reading of its name, version and labels, and no allocation at
// all. That matters beyond the bytes: a collection during a relist marks
// whatever the relist allocated meanwhile, so a relist's garbage rate sets
// the heap's peak, however short-lived the garbage.

// Frames opens watches whose frames a Feed reads itself (Feed.Frames).
type Frames struct {
	kind    string
	open    func(context.Context, metav1.ListOptions) (io.ReadCloser, error)
	decoder runtime.Decoder
}

// WatchFrames opens watches of resource (of kind) in namespace ("" for
// all), carrying label selector sel, through c: a client of the resource's
// group version.
func WatchFrames(c rest.Interface, namespace, resource, kind, sel string) *Frames {
	return &Frames{kind: kind, decoder: scheme.Codecs.UniversalDeserializer(),
		open: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			o.Watch, o.LabelSelector = true, sel
			return c.Get().Namespace(namespace).Resource(resource).
				VersionedParams(&o, scheme.ParameterCodec).
				SetHeader("Accept", runtime.ContentTypeProtobuf).
				Stream(ctx)
		}}
}

// maxFrame bounds a frame, as client-go's streaming decoder does: anything
// larger is not an object the API server would store.
const maxFrame = 16 << 20

// frameReader reads length-delimited frames into one buffer, reused: a
// frame is valid until the next is read.
type frameReader struct {
	r    io.Reader
	head [4]byte
	buf  []byte
}

func (fr *frameReader) next() ([]byte, error) {
	if _, err := io.ReadFull(fr.r, fr.head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(fr.head[:])
	if n > maxFrame {
		return nil, fmt.Errorf("%w: a frame of %d bytes", errNotFrames, n)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	fr.buf = fr.buf[:n]
	if _, err := io.ReadFull(fr.r, fr.buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return fr.buf, nil
}

// Field numbers of metav1.WatchEvent and runtime.RawExtension.
const (
	watchEventType   = 1
	watchEventObject = 2
	rawExtensionRaw  = 1
)

// watchEventOf reads a WatchEvent frame in place: its type and its
// object's bytes.
func watchEventOf(frame []byte) (typ, raw []byte, err error) {
	err = eachField(frame, func(num protowire.Number, v []byte) error {
		switch num {
		case watchEventType:
			typ = v
		case watchEventObject:
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == rawExtensionRaw {
					raw = v
				}
				return nil
			})
		}
		return nil
	})
	if err == nil && (len(typ) == 0 || len(raw) == 0) {
		err = errors.New("a watch frame without a type or an object")
	}
	return typ, raw, err
}

// errNotFrames is a stream that is not protobuf watch frames: the feed
// watches through client-go from then on.
var errNotFrames = errors.New("the watch is not in protobuf frames")

// streamFrames is stream, reading the watch's frames itself (Frames).
func (f *Feed) streamFrames(ctx context.Context) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body, err := f.Frames.open(ctx, streamedList())
	if err != nil {
		return "", streamRefused(err)
	}
	defer body.Close()
	f.Sink.Listing()
	// Nothing at all for streamQuiet: no stream (see stream). Cancelling
	// ends the read.
	var quiet atomic.Bool
	timer := time.AfterFunc(streamQuiet, func() { quiet.Store(true); cancel() })
	defer timer.Stop()
	held, _ := f.Sink.(HeldSink)
	frames := &frameReader{r: body}
	var p Peeked // one for the whole list: the sink is asked through an interface, so it lives on the heap
	for events := 0; ; events++ {
		frame, err := frames.next()
		switch {
		case err == nil:
		case quiet.Load():
			return "", fmt.Errorf("%w: nothing in %v", errStreamUnsupported, streamQuiet)
		case ctx.Err() != nil:
			return "", ctx.Err()
		case errors.Is(err, io.EOF):
			return "", errors.New("the watch streaming the list ended before the list did")
		default:
			return "", fmt.Errorf("reading the streamed list: %w", err)
		}
		if events == 0 {
			timer.Stop()
		}
		typ, raw, err := watchEventOf(frame)
		if err != nil {
			return "", fmt.Errorf("%w: %v", errNotFrames, err)
		}
		switch string(typ) { // no string made of it
		case string(watch.Added), string(watch.Modified):
			if held == nil {
				break
			}
			var ok bool
			if p, ok, _ = peekMeta(raw, f.Frames.kind, true); ok && p.Name != "" && held.Held(&p) {
				f.held.Add(1)
				count(f.Counters.Held)
				continue
			}
		case string(watch.Deleted), string(watch.Bookmark), string(watch.Error):
		default:
			return "", fmt.Errorf("%w: an event of type %q", errNotFrames, typ)
		}
		// Decoding copies what it keeps: nothing refers to the frame after.
		obj, _, err := f.Frames.decoder.Decode(raw, nil, nil)
		if err != nil {
			return "", fmt.Errorf("decoding a streamed list's %s event: %w", typ, err)
		}
		ev := watch.Event{Type: watch.EventType(typ), Object: obj}
		if rv, end, err := f.streamed(ev); err != nil || end {
			return rv, err
		}
	}
}

// endOfList reports whether ev ends a streamed list (a bookmark so
// annotated), and at which version; a watch's error event is the error.
func endOfList(ev watch.Event) (rv string, end bool, err error) {
	switch ev.Type {
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return "", false, err
		}
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
			if m.GetResourceVersion() == "" {
				return "", false, errors.New("a streamed list ended without a version to watch from")
			}
			return m.GetResourceVersion(), true, nil
		}
	case watch.Error:
		return "", false, apierrors.FromObject(ev.Object)
	}
	return "", false, nil
}
