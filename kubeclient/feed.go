package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/klog/v2"
)

// Sink receives one resource's objects from a Feed, in order, from one
// goroutine. It keeps what it needs of each object and nothing of the rest:
// the objects are the API's, decoded for this call only.
type Sink interface {
	// Listing starts a full list (the first, or a relist after the
	// watch's version was lost).
	Listing()
	// Upsert is an object as it now is.
	Upsert(obj runtime.Object)
	// Delete is an object deleted, as it last was.
	Delete(obj runtime.Object)
	// Listed ends a full list: whatever the sink holds that was not upserted
	// since Listing is gone.
	Listed()
}

// Feed lists and watches one resource into a Sink, holding nothing itself:
// an informer without a cache, for sinks that build their own compact index
// from the events (an informer keeps every object, a key, an index entry and
// a queue slot besides).
//
// A list streams where the API server offers it (a watch with
// sendInitialEvents, KEP-3157) and is otherwise read in pages, so that no
// list is ever decoded whole: a relist costs a page of objects, not a second
// copy of the world. The sink keeps what it held until the list ends, so its
// readers answer from the last good state throughout. The watch resumes from
// the last version it delivered when it ends (RetryWatcher: an API server
// restarting closes every watch); only when that version is gone (410) does
// the feed list again. A sink that can tell from an object's name and
// version that it holds it (HeldSink) is spared decoding it again: the feed
// reads a streamed list's frames itself where it can (Frames), and what the
// sink holds then costs no allocation at all.
type Feed struct {
	// Name says which feed, in logs.
	Name  string
	List  ListFunc
	Watch WatchFunc
	Sink  Sink
	// Stream says the client may stream lists; client-go's fakes cannot.
	Stream bool
	// PageSize is the size of a list's pages when it cannot stream.
	PageSize int64
	// Frames, when set, opens the watches of streamed lists, whose frames
	// the feed reads itself (see frames.go).
	Frames *Frames
	// Counters count what the feed does, for a process's metrics.
	Counters Counters

	synced   atomic.Bool
	noStream atomic.Bool // the API server refused or ignored a streamed list
	noFrames atomic.Bool // a streamed list was not in protobuf frames
	lists    atomic.Uint64
	held     atomic.Uint64
}

// Counters are a feed's counters in a process's metrics (Prometheus
// counters); nil ones count nothing. Counting allocates nothing.
type Counters struct {
	// Lists counts full lists ended: the first, and every relist.
	Lists interface{ Inc() }
	// Held counts objects sent at the version the sink held, which the
	// feed therefore decoded no further (HeldSink).
	Held interface{ Inc() }
}

func count(c interface{ Inc() }) {
	if c != nil {
		c.Inc()
	}
}

// NewFeed is a Feed for client (which says whether lists may stream).
func NewFeed(name string, client any, list ListFunc, watchFn WatchFunc, sink Sink) *Feed {
	return &Feed{Name: name, List: list, Watch: watchFn, Sink: sink, PageSize: 500,
		Stream: !DoesNotStream(client)}
}

// Streams reports whether the feed's lists stream (the last one did, or
// none has been tried).
func (f *Feed) Streams() bool { return f.Stream && !f.noStream.Load() }

// ReadsFrames reports whether the feed reads its streamed lists' frames
// itself (Frames), as it does unless a stream was not in frames.
func (f *Feed) ReadsFrames() bool { return f.Streams() && f.Frames != nil && !f.noFrames.Load() }

// Lists is how many full lists have ended: the first and every relist.
func (f *Feed) Lists() uint64 { return f.lists.Load() }

// Held is how many objects the feed's sink held as they came, so that the
// feed decoded no more of them than their names and versions.
func (f *Feed) Held() uint64 { return f.held.Load() }

// HasSynced reports whether the first list has ended.
func (f *Feed) HasSynced() bool { return f.synced.Load() }

// streamQuiet bounds the wait for a streamed list's first event: an API
// server that does not know sendInitialEvents watches from now and sends
// nothing, not even the end of a list.
const streamQuiet = 30 * time.Second

var errStreamUnsupported = errors.New("the API server does not stream lists")

// healthy is how long a watch must have run after its list for the next
// relist to come at once again. Sooner, the wait before each relist
// doubles: a watch that fails right after every list must not make a feed
// list the world in a loop.
const healthy = time.Minute

// Run lists and watches until ctx is done.
//
// Two waits: one before a list that failed is tried again, short (a failed
// list costs the API server little, and answers must follow it soon after
// it is back), reset by a list that succeeds; one before a relist after a
// watch ended, doubling to 10 s, reset by a watch that ran for a minute.
func (f *Feed) Run(ctx context.Context) {
	retry, relist := listRetry(), relistWait()
	for ctx.Err() == nil {
		rv, err := f.list(ctx)
		wait := retry
		if err == nil {
			f.lists.Add(1)
			count(f.Counters.Lists)
			f.synced.Store(true)
			retry = listRetry()
			start := time.Now()
			err = f.follow(ctx, rv)
			if time.Since(start) >= healthy {
				relist = relistWait()
			}
			wait = relist
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			klog.ErrorS(err, "Listing or watching failed", "feed", f.Name)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait.Step()):
		}
	}
}

// listRetry waits 100 ms before a failed list is tried again, doubling to 1 s
// (a refused connection does not even get here: the transport retries it,
// kubeclient.Configure).
func listRetry() *wait.Backoff {
	return &wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 20, Cap: time.Second}
}

// relistWait waits 100 ms before a relist, doubling to 10 s.
func relistWait() *wait.Backoff {
	return &wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 20, Cap: 10 * time.Second}
}

// list delivers every object as a full list and returns its version.
func (f *Feed) list(ctx context.Context) (string, error) {
	if f.Stream && !f.noStream.Load() {
		var rv string
		var err error
		if f.Frames != nil && !f.noFrames.Load() {
			if rv, err = f.streamFrames(ctx); errors.Is(err, errNotFrames) {
				klog.InfoS("Reading streamed lists through client-go's watch instead", "feed", f.Name, "reason", err)
				f.noFrames.Store(true)
				rv, err = f.stream(ctx)
			}
		} else {
			rv, err = f.stream(ctx)
		}
		if !errors.Is(err, errStreamUnsupported) {
			return rv, err
		}
		klog.InfoS("Listing in pages instead", "feed", f.Name, "reason", err)
		f.noStream.Store(true)
	}
	return f.pages(ctx)
}

// streamedList are the options of a watch that sends the objects first,
// then a bookmark marking the end of the list.
func streamedList() metav1.ListOptions {
	yes := true
	return metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}
}

// streamRefused is the error of a streamed list's watch that failed:
// errStreamUnsupported where the API server refused its options.
func streamRefused(err error) error {
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return fmt.Errorf("%w: %v", errStreamUnsupported, err)
	}
	return err
}

// stream lists through a watch that sends the objects first, then a
// bookmark marking the end of the list.
func (f *Feed) stream(ctx context.Context) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := f.Watch(ctx, streamedList())
	if err != nil {
		return "", streamRefused(err)
	}
	defer w.Stop()
	f.Sink.Listing()
	quiet := time.NewTimer(streamQuiet)
	defer quiet.Stop()
	for events := 0; ; events++ {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-quiet.C:
			return "", fmt.Errorf("%w: nothing in %v", errStreamUnsupported, streamQuiet)
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return "", errors.New("the watch streaming the list ended before the list did")
		}
		if events == 0 {
			quiet.Stop()
		}
		if rv, end, err := f.streamed(ev); err != nil || end {
			return rv, err
		}
	}
}

// streamed hands one event of a streamed list to the sink; end reports
// that it ended the list, at version rv, and the sink was told so.
func (f *Feed) streamed(ev watch.Event) (rv string, end bool, err error) {
	if delivered, err := f.deliver(ev); err != nil || delivered {
		return "", false, err
	}
	if rv, end, err = endOfList(ev); end {
		f.Sink.Listed()
	}
	return rv, end, err
}

// pages lists in pages of PageSize, all at the first page's version.
func (f *Feed) pages(ctx context.Context) (string, error) {
	opts := metav1.ListOptions{Limit: f.PageSize}
	f.Sink.Listing()
	for {
		list, err := f.List(ctx, opts)
		if apierrors.IsResourceExpired(err) && opts.Continue != "" {
			// The version the pages were at is gone: start over, a list
			// of its own, so that what the first pages held and is gone
			// since is dropped at its end.
			opts.Continue = ""
			f.Sink.Listing()
			continue
		}
		if err != nil {
			return "", err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return "", err
		}
		for _, it := range items {
			f.Sink.Upsert(it)
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return "", err
		}
		if lm.GetContinue() == "" {
			f.Sink.Listed()
			return lm.GetResourceVersion(), nil
		}
		opts.Continue = lm.GetContinue()
	}
}

// follow delivers the watch's events from version rv until the version is
// gone (nil: list again), the watch fails, or ctx is done.
func (f *Feed) follow(ctx context.Context, rv string) error {
	w, err := resumingWatch(f.Watch)(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return nil // the watch gave up: list again
		}
		delivered, err := f.deliver(ev)
		if err != nil {
			return err
		}
		if delivered || ev.Type != watch.Error {
			continue
		}
		if isGone(ev) {
			return nil
		}
		return apierrors.FromObject(ev.Object)
	}
}

// deliver hands an object's event to the sink, and reports whether it was
// one. An object still encoded (EncodedClient) is decoded first, unless it
// is an update the sink holds as it is; one that cannot be decoded ends the
// watch, as client-go's watch decoder does.
func (f *Feed) deliver(ev watch.Event) (bool, error) {
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		return false, nil
	}
	obj := ev.Object
	if e, ok := obj.(*Encoded); ok {
		if h, ok := f.Sink.(HeldSink); ok && ev.Type != watch.Deleted && h.Held(e.Peeked()) {
			f.held.Add(1)
			count(f.Counters.Held)
			return true, nil
		}
		var err error
		if obj, err = e.Decode(); err != nil {
			return true, err
		}
	}
	if ev.Type == watch.Deleted {
		f.Sink.Delete(obj)
	} else {
		f.Sink.Upsert(obj)
	}
	return true, nil
}

// DoesNotStream reports whether client cannot stream lists: client-go's fakes.
func DoesNotStream(client any) bool { return watchlist.DoesClientNotSupportWatchListSemantics(client) }
