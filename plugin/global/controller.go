package global

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/source"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
)

// index holds the answer set of every global service, keyed by the lower-case
// "name.namespace" a query carries. It is fed by source's informers through a
// coalescing work queue: each change rebuilds only the affected global's
// answer set and swaps it in. Queries never wait for a rebuild.
type index struct {
	src *source.Source

	// sets maps "name.namespace" to an immutable answer set. A plain map under
	// a read lock is faster to query than sync.Map (one string hash, no trie
	// walk); the writer holds the lock only to store or delete one pointer.
	mu       sync.RWMutex
	sets     map[string]*answerSet
	queue    workqueue.TypedInterface[source.Key]
	synced   atomic.Bool
	modified atomic.Int64 // unix seconds of the last change, the SOA serial

	// pending holds, per base, when the informers first delivered a change
	// not yet built into its answers: where a member slice carries no
	// last-change-trigger-time (Linkerd's never do), programming latency is
	// measured from there.
	pendingMu sync.Mutex
	pending   map[source.Key]time.Time

	// Owned by the worker goroutine.
	globals, endpoints int

	// stopped is closed when run returns.
	stopped chan struct{}

	// now is time.Now, replaceable in tests.
	now func() time.Time
}

func newIndex() *index {
	x := &index{
		sets:    map[string]*answerSet{},
		pending: map[source.Key]time.Time{},
		queue:   workqueue.NewTyped[source.Key](),
		stopped: make(chan struct{}),
		now:     time.Now,
	}
	x.modified.Store(time.Now().Unix())
	return x
}

// Changed implements source.Handler.
func (x *index) Changed(k source.Key) {
	x.pendingMu.Lock()
	if _, ok := x.pending[k]; !ok {
		x.pending[k] = x.now()
	}
	x.pendingMu.Unlock()
	x.queue.Add(k)
}

// takePending returns and forgets when a change of k was first delivered.
func (x *index) takePending(k source.Key) (time.Time, bool) {
	x.pendingMu.Lock()
	defer x.pendingMu.Unlock()
	t, ok := x.pending[k]
	delete(x.pending, k)
	return t, ok
}

// Skipped implements source.Handler.
func (x *index) Skipped(obj metav1.Object, kind, reason string) {
	skippedTotal.WithLabelValues(kind).Inc()
	log.Warningf("Ignoring %s %s/%s: %s", kind, obj.GetNamespace(), obj.GetName(), reason)
}

// get returns the answer set of the global "name.namespace", or nil.
func (x *index) get(key string) *answerSet {
	x.mu.RLock()
	s := x.sets[key]
	x.mu.RUnlock()
	return s
}

func (x *index) store(key string, s *answerSet) {
	x.mu.Lock()
	x.sets[key] = s
	x.mu.Unlock()
}

// ready reports whether the informers have synced and the answer sets of
// everything they listed are built.
func (x *index) ready() bool { return x.synced.Load() }

// run builds answer sets until ctx is done. It waits for the informers to
// sync, queues every known base, and reports ready once those are built.
func (x *index) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		x.queue.ShutDown()
	}()
	defer close(x.stopped)
	// This instance's share leaves the gauges with it.
	defer func() { x.addCounts(-x.globals, -x.endpoints) }()
	if !x.src.WaitForSync(ctx) {
		return
	}
	for _, k := range x.src.Keys() {
		x.queue.Add(k)
	}
	if x.queue.Len() == 0 {
		x.markSynced()
	}
	for x.processNext() {
		if !x.synced.Load() && x.queue.Len() == 0 {
			x.markSynced()
		}
	}
}

// addCounts keeps the gauges, which sum over every instance of the plugin
// (server blocks, and the old and new instance during a reload).
func (x *index) addCounts(globals, endpoints int) {
	x.globals += globals
	x.endpoints += endpoints
	globalsGauge.Add(float64(globals))
	endpointsGauge.Add(float64(endpoints))
}

func (x *index) markSynced() {
	x.synced.Store(true)
	log.Infof("Synced: answering for %d global services", x.globals)
}

func (x *index) processNext() bool {
	k, shutdown := x.queue.Get()
	if shutdown {
		return false
	}
	defer x.queue.Done(k)
	x.rebuild(k)
	return true
}

// rebuild recomputes the answer set of one base from the informer caches.
func (x *index) rebuild(k source.Key) {
	defer rebuildsTotal.Inc() // once done: tests wait on it
	// Before reading the caches: a change delivered from here on is built
	// by the next rebuild and timed from its own delivery.
	delivered, wasDelivered := x.takePending(k)
	synced := x.synced.Load()
	in := x.src.Input(k)
	name := aggregate.GlobalName(k.Base, x.src.Suffix())
	key := name + "." + k.Namespace
	old := x.get(key)

	var cur *answerSet
	switch svc := x.src.Service(k.Namespace, name); {
	case svc != nil && !aggregate.IsManaged(svc.Labels):
		// A user's Service holds the name: it is not ours to answer.
	case aggregate.Exists(in):
		cur = newAnswerSet(aggregate.Aggregate(in))
	case svc != nil:
		// globalmirror's Service outlives the global while the controller
		// is down or behind: every name under it is answered NXDOMAIN from
		// here, never from those stale objects by the next plugin.
		cur = absentSet(name, k.Namespace)
	}
	if cur == nil && old == nil {
		return
	}
	if cur == nil {
		x.mu.Lock()
		delete(x.sets, key)
		x.mu.Unlock()
	} else {
		x.store(key, cur)
	}
	dg, de := cur.counts()
	og, oe := old.counts()
	x.addCounts(dg-og, de-oe)
	now := x.now()
	x.modified.Store(now.Unix())

	if synced && !sameAnswers(old, cur) {
		x.observeProgramming(now, old, cur, delivered, wasDelivered)
	}
	if cur == nil {
		return
	}
	for detail, reason := range cur.problems {
		if old != nil {
			if _, known := old.problems[detail]; known {
				continue
			}
		}
		problemsTotal.WithLabelValues(reason).Inc()
		log.Warningf("%s: %s", reason, detail)
	}
}

// observeProgramming records how long a change took to reach the answers:
// from the newest member slice's last-change-trigger-time when this change
// brought a newer one (the whole path from the pod's change, as kube-proxy
// measures it), otherwise from the informers' delivery of the change.
// Nothing is observed during the initial sync: old trigger times and the
// initial list are not changes.
func (x *index) observeProgramming(now time.Time, old, cur *answerSet, delivered time.Time, wasDelivered bool) {
	from := delivered
	if cur != nil && old != nil && !cur.trigger.IsZero() && cur.trigger.After(old.trigger) {
		from = cur.trigger
	} else if !wasDelivered {
		return
	}
	if d := now.Sub(from); d >= 0 {
		programmingDuration.Observe(d.Seconds())
	}
}
