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
)

// A streamed list is a watch with sendInitialEvents: the objects as Added
// events, then a bookmark annotated as the list's end, carrying its
// version. In protobuf the watch is a series of frames: a length, then a
// WatchEvent (a type, and the object in its envelope).

// errStreamUnsupported is an API server that does not stream lists: it
// refused the options (422: 1.31 and older, and 1.33, whose feature gate
// went back to off), or sent nothing at all.
var errStreamUnsupported = errors.New("the API server does not stream lists")

// streamQuiet bounds the wait for a streamed list's first event: an API
// server that does not know sendInitialEvents (before 1.27) watches from
// now and sends nothing, not even the end of a list.
const streamQuiet = 30 * time.Second

// streamedList are the options of a watch that sends the objects first,
// then a bookmark marking the end of the list.
func streamedList() metav1.ListOptions {
	yes := true
	return metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}
}

// Field numbers of metav1.WatchEvent and runtime.RawExtension.
const (
	watchEventType   = 1
	watchEventObject = 2
	rawExtensionRaw  = 1
)

// stream reads a streamed list's frames, each into one buffer, reused.
func (f *Feed) stream(ctx context.Context) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body, err := f.API.Stream(ctx, streamedList())
	if err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			return "", fmt.Errorf("%w: %v", errStreamUnsupported, err)
		}
		return "", err
	}
	defer body.Close()
	f.Sink.Listing()
	// Nothing at all for streamQuiet: no stream. Cancelling ends the read.
	var quiet atomic.Bool
	timer := time.AfterFunc(streamQuiet, func() { quiet.Store(true); cancel() })
	defer timer.Stop()
	var head [4]byte
	var frame []byte
	p := new(Peeked) // one for the whole list: the sink is asked through an interface, so it lives on the heap
	for events := 0; ; events++ {
		_, err := io.ReadFull(body, head[:])
		if err == nil {
			frame, err = readFrame(body, binary.BigEndian.Uint32(head[:]), frame)
		}
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
		typ, obj, err := watchEventOf(frame)
		if err != nil {
			return "", fmt.Errorf("not a protobuf watch: %w", err)
		}
		switch string(typ) { // no string made of it
		case string(watch.Added), string(watch.Modified):
			kind, raw, err := unwrap(obj)
			if err != nil || string(kind) != f.API.Kind {
				return "", fmt.Errorf("a streamed list's object that is no %s (%v)", f.API.Kind, err)
			}
			if *p, err = peekObject(raw, true); err != nil {
				return "", fmt.Errorf("a streamed list's %s: %w", f.API.Kind, err)
			}
			if err := f.take(p, func() (runtime.Object, error) { return f.decodeItem(raw) }); err != nil {
				return "", err
			}
			continue
		case string(watch.Deleted), string(watch.Bookmark), string(watch.Error):
		default:
			return "", fmt.Errorf("a streamed list's event of type %q", typ)
		}
		// Decoding copies what it keeps: nothing refers to the frame after.
		o, _, err := scheme.Codecs.UniversalDeserializer().Decode(obj, nil, nil)
		if err != nil {
			return "", fmt.Errorf("decoding a streamed list's %s event: %w", typ, err)
		}
		if rv, end, err := f.streamed(watch.Event{Type: watch.EventType(typ), Object: o}); err != nil || end {
			return rv, err
		}
	}
}

// readFrame reads a frame of n bytes into buf, grown as needed.
func readFrame(r io.Reader, n uint32, buf []byte) ([]byte, error) {
	if n > maxMessage {
		return nil, fmt.Errorf("a watch frame of %d bytes", n)
	}
	if uint32(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

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

// streamed hands a deletion, a bookmark or an error of a streamed list to
// the sink; end reports that it ended the list, at version rv, and the sink
// was told so.
func (f *Feed) streamed(ev watch.Event) (rv string, end bool, err error) {
	switch ev.Type {
	case watch.Deleted:
		f.Sink.Delete(ev.Object)
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return "", false, err
		}
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
			return "", false, nil
		}
		if m.GetResourceVersion() == "" {
			return "", false, errors.New("a streamed list ended without a version to watch from")
		}
		f.Sink.Listed()
		return m.GetResourceVersion(), true, nil
	case watch.Error:
		return "", false, apierrors.FromObject(ev.Object)
	}
	return "", false, nil
}
