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
// the feed list again.
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

	synced   atomic.Bool
	noStream atomic.Bool // the API server refused or ignored a streamed list
	lists    atomic.Uint64
	held     atomic.Uint64
}

// NewFeed is a Feed for client (which says whether lists may stream).
func NewFeed(name string, client any, list ListFunc, watchFn WatchFunc, sink Sink) *Feed {
	return &Feed{Name: name, List: list, Watch: watchFn, Sink: sink, PageSize: 500,
		Stream: !DoesNotStream(client)}
}

// Streams reports whether the feed's lists stream (the last one did, or
// none has been tried).
func (f *Feed) Streams() bool { return f.Stream && !f.noStream.Load() }

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
		rv, err := f.stream(ctx)
		if !errors.Is(err, errStreamUnsupported) {
			return rv, err
		}
		klog.InfoS("Listing in pages instead", "feed", f.Name, "reason", err)
		f.noStream.Store(true)
	}
	return f.pages(ctx)
}

// stream lists through a watch that sends the objects first, then a
// bookmark marking the end of the list.
func (f *Feed) stream(ctx context.Context) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	yes := true
	w, err := f.Watch(ctx, metav1.ListOptions{
		SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true,
	})
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return "", fmt.Errorf("%w: %v", errStreamUnsupported, err)
	}
	if err != nil {
		return "", err
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
		if delivered, err := f.deliver(ev); err != nil {
			return "", err
		} else if delivered {
			continue
		}
		switch ev.Type {
		case watch.Bookmark:
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				return "", err
			}
			if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				f.Sink.Listed()
				return m.GetResourceVersion(), nil
			}
		case watch.Error:
			return "", apierrors.FromObject(ev.Object)
		}
	}
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
		if h, ok := f.Sink.(HeldSink); ok && ev.Type != watch.Deleted && h.Held(e.Namespace, e.Name, e.ResourceVersion) {
			f.held.Add(1)
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
