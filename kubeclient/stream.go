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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
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
		evType, ok := eventType(typ)
		if !ok {
			return "", fmt.Errorf("a streamed list's event of type %q", typ)
		}
		kind, raw, err := unwrap(obj)
		if err != nil {
			return "", fmt.Errorf("a streamed list's %s event: %w", evType, err)
		}
		// The object's message, in place: a Status of an error, else one of
		// the feed's kind. Decoding copies what it keeps: nothing refers
		// to the frame after.
		decode := func() (runtime.Object, error) { return f.decodeItem(raw) }
		switch {
		case evType == watch.Error && string(kind) == "Status":
			decode = func() (runtime.Object, error) {
				var status metav1.Status
				return &status, status.Unmarshal(raw)
			}
		case string(kind) != f.API.Kind:
			return "", fmt.Errorf("a streamed list's %s event of a %s, not a %s", evType, kind, f.API.Kind)
		case evType == watch.Added || evType == watch.Modified:
			if *p, err = peekObject(raw, true); err != nil {
				return "", fmt.Errorf("a streamed list's %s: %w", f.API.Kind, err)
			}
		}
		if rv, err := f.handle(true, evType, p, decode); err != nil || rv != "" {
			return rv, err
		}
	}
}

// eventType is the watch event type typ names, without making a string of
// it.
func eventType(typ []byte) (watch.EventType, bool) {
	for _, t := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if string(typ) == string(t) {
			return t, true
		}
	}
	return "", false
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
