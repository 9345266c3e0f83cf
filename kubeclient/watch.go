package kubeclient

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// A watch's body in protobuf is a series of frames: a length, then a
// WatchEvent (a type, and the object in its envelope). A streamed list is a
// watch with sendInitialEvents: the objects as Added events, then a
// bookmark annotated as the list's end, carrying its version. Both are read
// by one loop, events, from the socket to the sink; the watch after a list
// resumes from the last version it delivered where its body ends, as
// client-go's RetryWatcher does, and lists again only on a 410.

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

// stream lists through a streamed list and returns its version.
func (f *Feed) stream(ctx context.Context) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body, err := f.API.Watch(ctx, streamedList())
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
	rv, err := f.events(firstRead{body, func() { timer.Stop() }}, true, nil)
	var ended bodyEnded
	switch {
	case err == nil:
		return rv, nil
	case quiet.Load():
		return "", fmt.Errorf("%w: nothing in %v", errStreamUnsupported, streamQuiet)
	case ctx.Err() != nil:
		return "", ctx.Err()
	case errors.As(err, &ended) && errors.Is(ended.error, io.EOF):
		return "", errors.New("the watch streaming the list ended before the list did")
	case errors.As(err, &ended):
		return "", fmt.Errorf("reading the streamed list: %w", ended.error)
	}
	return "", fmt.Errorf("a streamed list: %w", err)
}

// firstRead calls first once a read has returned something.
type firstRead struct {
	io.Reader
	first func()
}

func (r firstRead) Read(b []byte) (int, error) {
	n, err := r.Reader.Read(b)
	if n > 0 {
		r.first()
	}
	return n, err
}

// follow delivers the watch's events from version rv until the version is
// gone (watchGone: list again), an event cannot be read (its error, as
// client-go's watch decoder ends a watch), or ctx is done. Where the
// watch's body ends (the API server closes every watch now and then, and
// all of them when it restarts), or the API server answers with any error
// but a 410, it watches again from the last version delivered, after a
// wait that grows to a second while the watches deliver nothing: a 403 is
// retried so, without end, as client-go's RetryWatcher retries it.
func (f *Feed) follow(ctx context.Context, rv string) (*watchGone, error) {
	restart := listRetry()
	var ran time.Duration // how long the last watch that started ran
	for {
		asked, before := rv, ran
		called := f.clk().Now()
		body, err := f.API.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		reached := f.clk().Since(called) // through an outage, QuickReconnect's retries
		if err == nil {
			began := f.clk().Now()
			_, err = f.events(body, false, &rv)
			body.Close()
			ran = f.clk().Since(began)
			if rv != asked {
				restart = listRetry()
			}
		}
		var ended bodyEnded
		switch {
		case ctx.Err() != nil:
			return nil, nil
		case isExpired(err):
			return &watchGone{version: asked, reason: err.Error(), ran: max(before, ran), reached: reached}, nil
		case err != nil && !errors.As(err, &ended) && !isAPIError(err):
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-f.clk().After(restart.Step()):
		}
	}
}

// watchGone is a watch that ended for a relist: the API server no longer
// has the version it was (re)started from.
type watchGone struct {
	version string
	reason  string // the API server's message, which names the versions it has
	// ran is how long the refused watch ran, or where it was refused at
	// once, the watch before it (0 for the first watch after a list): an
	// API server that restarted refuses the resumption of a watch that ran.
	ran time.Duration
	// reached is how long reaching the API server for the refused watch
	// took: past an outage (QuickReconnect retrying refused connections
	// until it is back), a restart's length, however short the watch before
	// it ran.
	reached time.Duration
}

// isAPIError is an error the API server sent, as a status or an error event.
func isAPIError(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// bodyEnded is a watch's body ending, or failing to be read: a watch that
// may be resumed.
type bodyEnded struct{ error }

func (e bodyEnded) Unwrap() error { return e.error }

// events reads a watch's frames from body, each into one buffer, reused,
// and hands each event to the sink (handle), until the list ends (listing:
// its version returned), the body ends (bodyEnded), or an event is an error
// or cannot be read. Watching, *rv follows the version of the last event
// delivered and every event counts as heard from.
func (f *Feed) events(body io.Reader, listing bool, rv *string) (string, error) {
	var head [4]byte
	var frame []byte
	p := new(Peeked) // one for the whole body: the sink is asked through an interface, so it lives on the heap
	for {
		_, err := io.ReadFull(body, head[:])
		if err == nil {
			frame, err = readFrame(body, binary.BigEndian.Uint32(head[:]), frame)
		}
		if err != nil {
			if errors.Is(err, errFrameTooLarge) {
				return "", err
			}
			return "", bodyEnded{err}
		}
		if !listing {
			f.heard()
		}
		typ, obj, err := watchEventOf(frame)
		if err != nil {
			return "", fmt.Errorf("not a protobuf watch: %w", err)
		}
		evType, ok := eventType(typ)
		if !ok {
			return "", fmt.Errorf("an event of type %q", typ)
		}
		kind, raw, err := unwrap(obj)
		if err != nil {
			return "", fmt.Errorf("a %s event: %w", evType, err)
		}
		// The object's message, in place: a Status of an error, else one of
		// the feed's kind. Decoding copies what it keeps: nothing refers
		// to the frame after.
		*p = Peeked{} // nothing of the last event's
		decode := func() (runtime.Object, error) { return f.decodeItem(raw) }
		switch {
		case evType == watch.Error && string(kind) == "Status":
			decode = func() (runtime.Object, error) {
				var status metav1.Status
				return &status, status.Unmarshal(raw)
			}
		case string(kind) != f.API.Kind:
			return "", fmt.Errorf("a %s event of a %s, not a %s", evType, kind, f.API.Kind)
		default:
			if *p, err = peekObject(raw, true); err != nil {
				return "", fmt.Errorf("a %s event of a %s: %w", evType, f.API.Kind, err)
			}
		}
		listed, err := f.handle(listing, evType, p, decode)
		if err != nil || listed != "" {
			return listed, err
		}
		if !listing && p.ResourceVersion != "" {
			*rv = strings.Clone(p.ResourceVersion) // the frame's bytes are reused
		}
	}
}

// handle hands one event to the sink, of a streamed list (listing) or of
// the watch after a list. An object added or modified is decoded and
// upserted unless it is current in the sink (p, read in place); one deleted
// is decoded and deleted; a bookmark annotated as the end of the initial
// events ends the list, while listing: the sink is told, and the list's
// version returned, from which the watch goes on; any other bookmark is
// progress, which the feed does not need; an error is the API server's,
// returned. decode decodes the event's object.
func (f *Feed) handle(listing bool, typ watch.EventType, p *Peeked, decode func() (runtime.Object, error)) (listed string, err error) {
	switch typ {
	case watch.Added, watch.Modified:
		return "", f.take(p, decode)
	case watch.Deleted, watch.Bookmark, watch.Error:
	default:
		return "", fmt.Errorf("a %s event of type %q", f.API.Kind, typ)
	}
	obj, err := decode()
	if err != nil {
		return "", err
	}
	switch typ {
	case watch.Deleted:
		f.Sink.Delete(obj)
	case watch.Bookmark:
		m, err := meta.Accessor(obj)
		if err != nil || !listing || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
			return "", err
		}
		if m.GetResourceVersion() == "" {
			return "", errors.New("a streamed list ended without a version to watch from")
		}
		f.Sink.Listed()
		return m.GetResourceVersion(), nil
	case watch.Error:
		return "", apierrors.FromObject(obj)
	}
	return "", nil
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

// errFrameTooLarge is a frame larger than any object the API server sends.
var errFrameTooLarge = errors.New("a watch frame larger than any object")

// readFrame reads a frame of n bytes into buf, grown as needed.
func readFrame(r io.Reader, n uint32, buf []byte) ([]byte, error) {
	if n > maxMessage {
		return nil, fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)
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
