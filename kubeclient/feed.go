package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Sink receives one resource's objects from a Feed, in order, from one
// goroutine. It keeps what it needs of each object and nothing of the rest:
// the objects are the API's, decoded for this call only.
type Sink interface {
	// Listing starts a full list (the first, or a relist after the
	// watch's version was lost). It may come again before Listed: a list
	// that failed part way starts anew, and only the last Listing counts.
	Listing()
	// Upsert is an object as it now is.
	Upsert(obj runtime.Object)
	// Delete is an object deleted, as it last was.
	Delete(obj runtime.Object)
	// Listed ends a full list: whatever the sink has that was neither
	// upserted nor found current since Listing is gone.
	Listed()
}

// CurrentSink is a Sink that can tell, from an object's name, version and
// labels alone, that the object is current: present in its index at that
// resourceVersion.
type CurrentSink interface {
	Sink
	// Current reports whether the object is current in the sink; if so it
	// counts the object as delivered again (as Upsert would an object
	// unchanged), and the feed decodes nothing more of it. It keeps none
	// of p's strings (see Peeked).
	Current(p *Peeked) bool
}

// SparseSink is a Sink that stores some objects straight from their encoded
// message (Peeked.Message), as far as it keeps them: of a large world's
// commonest objects, a few fields, where decoding them would allocate every
// one (managed fields, timestamps, each label) for the sink to drop.
type SparseSink interface {
	Sink
	// UpsertSparse stores the object p peeks at as Upsert stores it
	// decoded, keeping none of p's strings, and reports true; false where
	// the sink does not store it so (the feed then decodes it whole and
	// Upserts it) or cannot (the feed's decoding then says why).
	UpsertSparse(p *Peeked) bool
}

// Feed lists and watches one resource into a Sink, keeping no object itself:
// a client-go informer without its cache, for sinks that build their own
// compact index from the events (an informer stores every object, a key, an
// index entry and a queue slot besides).
//
// Each full list takes one of two paths, by what the API server offers at
// that moment: streamed (a watch that sends the objects first and then a
// bookmark, KEP-3157) where it accepts one, else paged. Both read the API
// server's protobuf themselves and ask a CurrentSink about each object before
// decoding it (see protobuf.go); neither decodes a list whole. The sink keeps
// what it had until the list ends, so its readers answer from the last
// good state throughout. After a list the feed watches from its version,
// resuming where a watch ends (an API server restarting closes every
// watch); only when that version is gone (410) does it list again.
type Feed struct {
	// Name says which feed, in logs.
	Name string
	API  API
	Sink Sink
	// Counters count what the feed does, for a process's metrics.
	Counters Counters

	// clock times the waits between lists and watches; nil is the real one.
	clock clock.Clock

	synced atomic.Bool
	path   atomic.Value // Path of the last list
}

// Feeds are the feeds of one index, started and synced together.
type Feeds []*Feed

// Start runs each feed on a goroutine of its own until ctx is done.
func (fs Feeds) Start(ctx context.Context) {
	for _, f := range fs {
		go f.Run(ctx)
	}
}

// HasSynced reports whether every feed has listed once.
func (fs Feeds) HasSynced() bool {
	for _, f := range fs {
		if !f.HasSynced() {
			return false
		}
	}
	return true
}

// Path is the way a full list was read.
type Path string

const (
	// Streamed: a watch sending the objects, then a bookmark ending the list.
	Streamed Path = "streamed"
	// Paged: a list through the list API, client-go's pager's path (the
	// feed asks for it in one response; see pages).
	Paged Path = "paged"
)

// Counters are a feed's counters in a process's metrics (Prometheus
// counters); nil ones count nothing. Counting allocates nothing.
type Counters struct {
	// Streamed and Paged count full lists ended, by their path.
	Streamed, Paged interface{ Inc() }
	// Current counts objects sent current (CurrentSink), which the feed
	// therefore decoded no further.
	Current interface{ Inc() }
	// Heard is set to the time the feed last heard from the API server: a
	// list ended, or a watch sent an event or a bookmark (about one a
	// minute on a quiet watch).
	Heard interface{ SetToCurrentTime() }
}

func count(c interface{ Inc() }) {
	if c != nil {
		c.Inc()
	}
}

// NewFeed is a Feed of api into sink, listing in one response where lists
// cannot stream.
func NewFeed(name string, api API, sink Sink) *Feed {
	return &Feed{Name: name, API: api, Sink: sink}
}

// lastPath is the path the last full list took; "" before the first.
func (f *Feed) lastPath() Path {
	p, _ := f.path.Load().(Path)
	return p
}

// HasSynced reports whether the first list has ended.
func (f *Feed) HasSynced() bool { return f.synced.Load() }

// healthy is how long a watch must have run after its list for the next
// relist to come at once again. Sooner, the wait before each relist
// doubles: a watch that fails right after every list must not make a feed
// list the world in a loop.
const healthy = time.Minute

// interrupted is how long a watch must have run before its connection ended
// for a 410 on its resumption to be taken for an API server's restart (or
// the move to another replica behind the same address), whose watch cache
// starts at its own revision: that relist comes at once, however many came
// before, where the relist of a watch refused at once waits. An API server
// that closes every watch at once and refuses its resumption gets a list a
// second at most.
const interrupted = time.Second

// outage is how long reaching the API server must have taken for a 410 on a
// watch's resumption to be taken for a restart whatever the watch before
// it ran: its connections were refused at least once meanwhile
// (QuickReconnect's pause). Restarts a few seconds apart leave a watch
// that began after a relist less than interrupted to run.
const outage = RetryInterval

// Run lists and watches until ctx is done; nothing else ends it. Every
// error is logged and tried again: a list refused (a 403 included, until
// the rights are granted), a watch that cannot be read, a version gone. It
// logs through ctx's logger (klog.FromContext), so that its lines name the
// process's component.
//
// Two waits, each a jittered exponential backoff as client-go's reflector
// keeps: one before a list that failed is tried again, short (a failed list
// costs the API server little, and answers must follow it soon after it is
// back), reset by a list that succeeds; one before a relist, after a watch
// ended or a list met a version that is gone (410), doubling to 10 s and
// reset only by a watch that ran for a minute, so that an API server
// compacting faster than a feed lists gets a bounded number of lists. A
// relist after a restart (a watch interrupted, or an outage before its
// resumption) does not wait.
func (f *Feed) Run(ctx context.Context) {
	log := klog.FromContext(ctx).WithValues("feed", f.Name)
	ctx = klog.NewContext(ctx, log)
	clk := f.clk()
	retry, relist := listRetry(), relistWait()
	for ctx.Err() == nil {
		rv, err := f.list(ctx)
		var wait time.Duration
		switch {
		case err == nil:
			f.heard()
			f.synced.Store(true)
			retry = listRetry()
			start := clk.Now()
			var gone *watchGone
			gone, err = f.follow(ctx, rv)
			if clk.Since(start) >= healthy {
				relist = relistWait()
			}
			if gone == nil || gone.ran < interrupted && gone.reached < outage {
				wait = relist.Step()
			}
			if gone != nil {
				log.Info("Listing again: the API server no longer has the watch's version (410)",
					"version", gone.version, "reason", gone.reason, "watchRan", gone.ran.Round(time.Millisecond),
					"reachedIn", gone.reached.Round(time.Millisecond), "wait", wait.Round(time.Millisecond))
			}
		case isExpired(err):
			wait = relist.Step()
			log.Info("Listing again: the list's version is gone (410)", "reason", err.Error(), "wait", wait.Round(time.Millisecond))
			err = nil
		default:
			wait = retry.Step()
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Error(err, "Listing or watching failed")
		}
		if wait == 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-clk.After(wait):
		}
	}
}

// clk is the feed's clock: the real one unless a test set another.
func (f *Feed) clk() clock.Clock {
	if f.clock == nil {
		return clock.RealClock{}
	}
	return f.clock
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

// list delivers every object as a full list and returns its version. It
// streams where the API server accepts a streamed list, asking again at
// every list (a control plane upgraded in place streams from then on), and
// lists through the list API where it does not; the log says when the path changes.
func (f *Feed) list(ctx context.Context) (string, error) {
	began := time.Now()
	path := Streamed
	rv, err := f.stream(ctx)
	if errors.Is(err, errStreamUnsupported) {
		path = Paged
		rv, err = f.pages(ctx)
	}
	if err != nil {
		return "", err
	}
	if last := f.lastPath(); last != path {
		log := klog.FromContext(ctx)
		switch {
		case last == "":
			log.Info("Listed", "path", path, "took", time.Since(began).Round(time.Millisecond))
		case path == Paged:
			log.Info("Listing without streaming: the API server no longer streams lists")
		default:
			log.Info("Streaming lists again: the API server offers it")
		}
		f.path.Store(path)
	}
	if path == Streamed {
		count(f.Counters.Streamed)
	} else {
		count(f.Counters.Paged)
	}
	return rv, nil
}

// take hands an object added or modified to the sink: nothing but p where
// it is current in the sink, else p to store as the sink decodes it
// (SparseSink), else the object decoded whole.
func (f *Feed) take(p *Peeked, decode func() (runtime.Object, error)) error {
	if h, ok := f.Sink.(CurrentSink); ok && p != nil && p.Name != "" && h.Current(p) {
		count(f.Counters.Current)
		return nil
	}
	if s, ok := f.Sink.(SparseSink); ok && p != nil && p.Name != "" && s.UpsertSparse(p) {
		return nil
	}
	obj, err := decode()
	if err != nil {
		return err
	}
	f.Sink.Upsert(obj)
	return nil
}

func (f *Feed) heard() {
	if f.Counters.Heard != nil {
		f.Counters.Heard.SetToCurrentTime()
	}
}

// isExpired reports whether err is the API server saying that a version is
// gone (410): compacted away, or older than its watch cache. It is the one
// test of a 410 in the feeds, the one client-go's reflector makes (either
// reason, for API servers before 1.18); an error event of a watch is one
// through apierrors.FromObject.
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// unmarshaler is a generated protobuf message: every built-in object.
type unmarshaler interface{ Unmarshal([]byte) error }

// decodeItem decodes an object's message (a list's item) into a new object.
func (f *Feed) decodeItem(raw []byte) (runtime.Object, error) {
	obj := f.API.New()
	u, ok := obj.(unmarshaler)
	if !ok {
		return nil, fmt.Errorf("%T is no protobuf message", obj)
	}
	if err := u.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("decoding a listed %s: %w", f.API.Kind, err)
	}
	return obj, nil
}
