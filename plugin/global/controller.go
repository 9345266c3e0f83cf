package global

import (
	"context"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/source"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
)

// dnsController is the plugin's controller loop, as dnsControl is the
// kubernetes plugin's: source's feeds tell it which bases changed, a
// coalescing work queue dedupes them, and one worker rebuilds the answer set
// of each changed global and swaps it in. It has every answer set, keyed
// by the lower-case "name.namespace" a query carries. Queries never wait for
// a rebuild.
type dnsController struct {
	src *source.Source

	// sets maps "name.namespace" to an immutable answer set. A plain map under
	// a read lock is faster to query than sync.Map (one string hash, no trie
	// walk); the writer holds the lock only to store or delete one pointer.
	mu   sync.RWMutex
	sets map[string]*answerSet
	// clusterset maps "base.namespace" to the answer set of the clusterset
	// view; nil when that view is off.
	clusterset map[string]*answerSet
	// native maps "base.namespace" to the answer set of a local service that
	// opted into native names: its own name answers its global's endpoints.
	native map[string]*answerSet
	// natives is len(native), read without the lock: most clusters opt no
	// service into native names, and every name of a Service the cluster
	// asks for is a native name's shape, so it is passed on without taking
	// the lock that every query would share.
	natives atomic.Int64
	// ptr maps an address to the global per-pod names that resolve to it,
	// sorted; nil when reverse answers are off.
	ptr map[netip.Addr][]string

	queue    workqueue.TypedInterface[source.Key]
	queueing atomic.Bool // the feeds have synced: changes are queued from here
	// built: the answers of everything the feeds listed are built; builtCh
	// is closed then, for a start to wait on.
	built    atomic.Bool
	builtCh  chan struct{}
	modified atomic.Int64 // unix seconds of the last change, the SOA serial

	// pending has, per base, when the feeds first delivered a change
	// not yet built into its answers: where a member slice carries no
	// last-change-trigger-time (Linkerd's never do), programming latency is
	// measured from there.
	pendingMu sync.Mutex
	pending   map[source.Key]time.Time

	// Summed by every rebuild, in parallel during the first build.
	countsMu           sync.Mutex
	globals, endpoints int
	// ptrOf is what each global put into ptr, by global key.
	ptrOf map[string][]ptrEntry

	// drains are the drains last told (Drained, source.Drains.Levels), and
	// why the Links were unreadable ("": readable), for its log lines.
	drainsMu        sync.Mutex
	drains          map[string]aggregate.Drain
	linksUnreadable string

	opts controllerOptions

	// now is time.Now, replaceable in tests.
	now func() time.Time
}

// controllerOptions say which views besides the global one to keep.
type controllerOptions struct {
	// ptrZone, when set, keeps the reverse index; the names in it are in
	// this (cluster) zone.
	ptrZone string
	// clusterset keeps the clusterset view; clusterID names the local cluster in it.
	clusterset bool
	clusterID  string
}

// newDNSController builds the loop over src's feeds (not yet started).
func newDNSController(src *source.Source, opts controllerOptions) *dnsController {
	dc := &dnsController{
		src:     src,
		sets:    map[string]*answerSet{},
		native:  map[string]*answerSet{},
		pending: map[source.Key]time.Time{},
		queue:   workqueue.NewTyped[source.Key](),
		now:     time.Now,
		opts:    opts,
		builtCh: make(chan struct{}),
	}
	if opts.clusterset {
		dc.clusterset = map[string]*answerSet{}
	}
	if opts.ptrZone != "" {
		dc.ptr, dc.ptrOf = map[netip.Addr][]string{}, map[string][]ptrEntry{}
	}
	dc.modified.Store(time.Now().Unix())
	src.AddHandler(dc)
	return dc
}

// Changed implements source.Handler.
func (dc *dnsController) Changed(k source.Key) {
	if !dc.queueing.Load() {
		return // the initial build reads every base (run)
	}
	dc.pendingMu.Lock()
	if _, ok := dc.pending[k]; !ok {
		dc.pending[k] = dc.now()
	}
	dc.pendingMu.Unlock()
	dc.queue.Add(k)
}

// Skipped implements source.Handler.
func (dc *dnsController) Skipped(obj metav1.Object, kind string, skip aggregate.Skip) {
	skippedTotal.WithLabelValues(kind, string(skip.Reason)).Inc()
	log.Warningf("Ignoring %s %s/%s: %s: %s", kind, obj.GetNamespace(), obj.GetName(), skip.Reason, skip.Detail)
}

// Drained implements source.DrainHandler.
func (dc *dnsController) Drained(drains source.Drains) {
	for _, l := range []aggregate.Drain{aggregate.DrainShared, aggregate.DrainAll} {
		clusters, services := drains.Count(l)
		drainedGauge.WithLabelValues(l.String()).Set(float64(clusters))
		drainedServicesGauge.WithLabelValues(l.String()).Set(float64(services))
	}
	linksReadableGauge.Set(0)
	if drains.LinksSeen() {
		linksReadableGauge.Set(1)
	}
	dc.drainsMu.Lock()
	defer dc.drainsMu.Unlock()
	now := drains.Levels()
	for what, level := range now {
		if dc.drains[what] != level {
			log.Infof("Drained (%s): %s", level, what)
		}
	}
	for what := range dc.drains {
		if _, ok := now[what]; !ok {
			log.Infof("Undrained: %s", what)
		}
	}
	dc.drains = now
	if dc.linksUnreadable != drains.LinksUnreadable {
		if drains.LinksReadable {
			log.Infof("Linkerd's Links are readable: their drains are honoured")
		} else {
			log.Warningf("Linkerd's Links cannot be read (%s): the %d cluster drains last read stay in force, no new one is seen", drains.LinksUnreadable, len(drains.Clusters))
		}
		dc.linksUnreadable = drains.LinksUnreadable
	}
}

// get returns the answer set of the global "name.namespace", or nil.
func (dc *dnsController) get(key string) *answerSet {
	dc.mu.RLock()
	s := dc.sets[key]
	dc.mu.RUnlock()
	return s
}

// getNative returns the answer set of a native name "base.namespace", or nil.
func (dc *dnsController) getNative(key string) *answerSet {
	if dc.natives.Load() == 0 {
		return nil
	}
	dc.mu.RLock()
	s := dc.native[key]
	dc.mu.RUnlock()
	return s
}

// getClusterset returns the clusterset view's answer set of "base.namespace", or nil.
func (dc *dnsController) getClusterset(key string) *answerSet {
	dc.mu.RLock()
	s := dc.clusterset[key]
	dc.mu.RUnlock()
	return s
}

// swap stores (or, for nil, deletes) the answer sets of one global in every
// view at once, so that queries never see one view ahead of another.
func (dc *dnsController) swap(key string, cur *answerSet, baseKey string, native, cs *answerSet, ptr []ptrEntry) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	setOrDelete(dc.sets, key, cur)
	setOrDelete(dc.native, baseKey, native)
	dc.natives.Store(int64(len(dc.native)))
	if dc.clusterset != nil {
		setOrDelete(dc.clusterset, baseKey, cs)
	}
	if dc.ptr == nil {
		return
	}
	for _, e := range dc.ptrOf[key] {
		names := slices.DeleteFunc(dc.ptr[e.addr], func(n string) bool { return n == e.name })
		if len(names) == 0 {
			delete(dc.ptr, e.addr)
		} else {
			dc.ptr[e.addr] = names
		}
	}
	for _, e := range ptr {
		names := dc.ptr[e.addr]
		if i, found := slices.BinarySearch(names, e.name); !found {
			dc.ptr[e.addr] = slices.Insert(names, i, e.name)
		}
	}
	if len(ptr) > 0 {
		dc.ptrOf[key] = ptr
	} else {
		delete(dc.ptrOf, key)
	}
}

// setOrDelete stores s under key in m, or, for nil, deletes it. A set's own
// key spells the same: stored under it, one string serves both.
func setOrDelete(m map[string]*answerSet, key string, s *answerSet) {
	switch {
	case s == nil:
		delete(m, key)
	case s.key == key:
		m[s.key] = s
	default:
		m[key] = s
	}
}

// ready reports whether the feeds have synced and the answer sets of
// everything they listed are built.
func (dc *dnsController) ready() bool { return dc.built.Load() }

// run builds answer sets until ctx is done. It waits for the feeds to
// sync, builds every known base, reports ready, and serves the queue of
// changes from then on. The initial build does not go through the queue: its
// sets (and the pending map) would keep room for every base for good, where
// a change or a storm needs room only for the bases it touches.
func (dc *dnsController) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		dc.queue.ShutDown()
	}()
	// This instance's share leaves the gauges with it.
	defer func() { dc.addCounts(-dc.globals, -dc.endpoints) }()
	if !dc.src.WaitForSync(ctx) {
		return
	}
	// Before reading the keys: a change from here on is queued, one before
	// is in the index they are read from.
	dc.queueing.Store(true)
	if !dc.buildAll(ctx, dc.src.Keys()) {
		return
	}
	dc.markBuilt()
	for dc.processNext() {
	}
}

// buildAll builds the answers of every base in keys, on one goroutine per
// CPU: a start is not ready until it is done, and a rebuild of one base
// touches no other's answers (each swaps its own keys under mu, and sums
// its counts under countsMu). It reports false if ctx ended first.
func (dc *dnsController) buildAll(ctx context.Context, keys []source.Key) bool {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(keys)) && ctx.Err() == nil; i = next.Add(1) - 1 {
				dc.rebuild(keys[i])
			}
		})
	}
	wg.Wait()
	return ctx.Err() == nil
}

// addCounts keeps the gauges, which sum over every instance of the plugin
// (server blocks, and the old and new instance during a reload).
func (dc *dnsController) addCounts(globals, endpoints int) {
	dc.countsMu.Lock()
	defer dc.countsMu.Unlock()
	dc.globals += globals
	dc.endpoints += endpoints
	globalsGauge.Add(float64(globals))
	endpointsGauge.Add(float64(endpoints))
}

// globalCount is how many global services the index answers for.
func (dc *dnsController) globalCount() int {
	dc.countsMu.Lock()
	defer dc.countsMu.Unlock()
	return dc.globals
}

func (dc *dnsController) markBuilt() {
	dc.built.Store(true)
	close(dc.builtCh)
	log.Infof("Synced: answering for %d global services", dc.globals)
}

func (dc *dnsController) processNext() bool {
	k, shutdown := dc.queue.Get()
	if shutdown {
		return false
	}
	defer dc.queue.Done(k)
	dc.rebuild(k)
	return true
}

// rebuild recomputes the answer set of one base from the index (source).
func (dc *dnsController) rebuild(k source.Key) {
	defer rebuildsTotal.Inc() // once done: tests wait on it
	// Before reading the index: a change delivered from here on is built
	// by the next rebuild and timed from its own delivery.
	delivered, wasDelivered := dc.takePending(k)
	built := dc.built.Load()
	in := dc.src.Input(k)
	name := aggregate.GlobalName(k.Base, dc.src.Suffix())
	key := name + "." + k.Namespace
	old := dc.get(key)

	baseKey := k.Base + "." + k.Namespace
	var (
		cur, cs, native *answerSet
		ptr             []ptrEntry
	)
	var view *aggregate.View // computed once, when needed
	viewOf := func() aggregate.View {
		if view == nil {
			v := aggregate.Aggregate(in)
			view = &v
		}
		return *view
	}
	if aggregate.Native(in) {
		// The local service's own name, whoever owns the global's.
		native = newNamedAnswerSet(viewOf(), k.Base, globalHost)
	}
	switch aggregate.GlobalVerdict(in, dc.src.Service(k.Namespace, name)) {
	case aggregate.VerdictYield, aggregate.VerdictConflict, aggregate.VerdictNone:
		// A user's Service owns the name, or nothing does: not ours to answer.
	case aggregate.VerdictBuild:
		view := viewOf()
		cur = newAnswerSet(view)
		if dc.opts.clusterset {
			cs = newNamedAnswerSet(view, k.Base, clustersetHost(dc.opts.clusterID))
		}
		if dc.opts.ptrZone != "" {
			ptr = ptrEntries(view, dc.opts.ptrZone)
		}
	case aggregate.VerdictRemove:
		// globalmirror's Service outlives the global while the controller
		// is down or behind: every name under it is answered NXDOMAIN from
		// here, never from those stale objects by the next plugin.
		cur, cs = absentSet(name, k.Namespace), absentSet(k.Base, k.Namespace)
	}
	oldNative := dc.getNative(baseKey)
	if cur == nil && old == nil && native == nil && oldNative == nil {
		return
	}
	dc.swap(key, cur, baseKey, native, cs, ptr)
	dg, de := cur.counts()
	og, oe := old.counts()
	dc.addCounts(dg-og, de-oe)
	now := dc.now()
	dc.modified.Store(now.Unix())

	if built && (!sameAnswers(old, cur) || !sameAnswers(oldNative, native)) {
		dc.observeProgramming(now, old, cur, delivered, wasDelivered)
	}
	if cur == nil {
		return
	}
	for detail, reason := range cur.problems() {
		if old != nil {
			if _, known := old.problems()[detail]; known {
				continue
			}
		}
		problemsTotal.WithLabelValues(reason).Inc()
		log.Warningf("%s: %s", reason, detail)
	}
}

// newFromClient builds the plugin and its feeds (not yet started) on client.
func newFromClient(cfg *config, client kubernetes.Interface) (*Global, error) {
	ctrl, err := newController(cfg, client)
	if err != nil {
		return nil, err
	}
	return newGlobal(cfg, ctrl), nil
}

// newController builds the index the stanza asks for (not yet started) on client.
func newController(cfg *config, client kubernetes.Interface) (*dnsController, error) {
	var links dynamic.Interface
	if cfg.api != nil {
		var err error
		if links, err = dynamic.NewForConfig(cfg.api); err != nil {
			return nil, err
		}
	}
	src, err := source.New(source.Config{
		Links:         links,
		Client:        client,
		Namespaces:    cfg.namespaces,
		Suffix:        cfg.suffix,
		LocalSelector: cfg.localSelector,
		NoUIDs:        true, // the plugin owns and deletes nothing
		API:           cfg.api,
		APIs:          cfg.apis,
		Counters:      feedMetrics.Counters,
	})
	if err != nil {
		return nil, err
	}
	return newDNSController(src, cfg.controllerOptions()), nil
}

// controllerOptions are the views the stanza asks the index for.
func (cfg *config) controllerOptions() controllerOptions {
	opts := controllerOptions{clusterset: cfg.clustersetZone != "", clusterID: cfg.clusterID}
	if len(cfg.reverseZones) > 0 {
		opts.ptrZone = cfg.zones[0]
	}
	return opts
}

// start runs the feeds and the controller loop until ctx is done; the
// channel it returns is closed once the loop has stopped.
func (dc *dnsController) start(ctx context.Context) <-chan struct{} {
	dc.src.Start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		dc.run(ctx)
	}()
	return done
}
