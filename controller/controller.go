// Package controller keeps one global Service `<base><suffix>` and its
// EndpointSlices per base service: source's feeds say which bases changed,
// a rate-limited workqueue deduplicates them, and workers run one sync per base
// that aggregates the members and writes the difference. It has the shape of
// kubernetes/sample-controller.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/metrics"
	"github.com/globalmirror/globalmirror/controller/slicewriter"
	"github.com/globalmirror/globalmirror/source"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// FieldManager names the controller's writes in their objects' managedFields
// (kubectl get --show-managed-fields). It is also the controller's user
// agent, after which the API server names the writes client-go makes for it
// without a field manager: its Lease and its Events.
const FieldManager = "globalmirror-controller"

// Config is what a Controller needs.
type Config struct {
	Client kubernetes.Interface
	// Suffix of global names; empty means aggregate.DefaultSuffix.
	Suffix string
	// MaxEndpointsPerSlice caps the endpoints of one global slice.
	MaxEndpointsPerSlice int
	Recorder             record.EventRecorder
	Metrics              *metrics.Metrics
	Logger               *slog.Logger
}

// Controller reconciles global Services. Feeds run from Start on every
// replica; only Run (the leader) writes.
type Controller struct {
	client  kubernetes.Interface
	suffix  string
	src     *source.Source
	owned   *OwnedSlices
	tracker *endpointsliceutil.EndpointSliceTracker
	writer  *slicewriter.Reconciler
	// newQueue makes the work queue of a term of leadership: Run shuts it
	// down when the term ends, so the next term needs a new one.
	newQueue func() workqueue.TypedRateLimitingInterface[source.Key]
	report   *reporter
	metrics  *metrics.Metrics
	log      *slog.Logger
	mu       sync.Mutex
	managed  map[source.Key]int // endpoints per managed global, for the gauges
	// managedEndpoints is their sum, kept as they change: a storm syncs
	// every global.
	managedEndpoints int
	// deleted has the UIDs of global Services deleted while the index may
	// still show them, so that each deletion is sent once.
	deleted map[source.Key]types.UID
	leading bool                                             // events only from the leader; guarded by mu
	queue   workqueue.TypedRateLimitingInterface[source.Key] // the term's; guarded by mu
}

// New builds a Controller over its feeds, as sample-controller's
// NewController does: src (members and globals, with the same suffix) and
// owned (the global slices). Nothing runs until Start.
func New(cfg Config, src *source.Source, owned *OwnedSlices) (*Controller, error) {
	if cfg.Client == nil || cfg.Metrics == nil || cfg.Recorder == nil {
		return nil, errors.New("controller: Client, Metrics and Recorder are required")
	}
	if cfg.MaxEndpointsPerSlice < 1 {
		return nil, fmt.Errorf("controller: MaxEndpointsPerSlice must be positive, not %d", cfg.MaxEndpointsPerSlice)
	}
	if cfg.Suffix == "" {
		cfg.Suffix = aggregate.DefaultSuffix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	tracker := endpointsliceutil.NewEndpointSliceTracker()
	provider := cfg.Metrics.WorkqueueProvider()
	c := &Controller{
		client:  cfg.Client,
		suffix:  cfg.Suffix,
		tracker: tracker,
		writer:  slicewriter.NewReconciler(cfg.Client, FieldManager, tracker, cfg.Metrics, cfg.MaxEndpointsPerSlice, cfg.Logger),
		newQueue: func() workqueue.TypedRateLimitingInterface[source.Key] {
			return workqueue.NewTypedRateLimitingQueueWithConfig(
				workqueue.DefaultTypedControllerRateLimiter[source.Key](),
				workqueue.TypedRateLimitingQueueConfig[source.Key]{Name: "globalmirror", MetricsProvider: provider})
		},
		metrics: cfg.Metrics,
		log:     cfg.Logger,
		managed: map[source.Key]int{},
		deleted: map[source.Key]types.UID{},
	}
	c.queue = c.newQueue()
	c.queue.ShutDown() // until the first term: what is added before is synced at its start
	c.report = newReporter(cfg.Recorder, cfg.Metrics, cfg.Logger, c.isLeading)
	if src.Suffix() != cfg.Suffix {
		return nil, fmt.Errorf("controller: the source's suffix %q is not %q", src.Suffix(), cfg.Suffix)
	}
	src.AddHandler(handler{c})
	if err := owned.addHandler(c.onOwnedSlice); err != nil {
		return nil, err
	}
	c.src, c.owned = src, owned
	return c, nil
}

// Start runs the feeds until ctx is done. Every replica runs them, so a
// standby is warm when it becomes leader.
func (c *Controller) Start(ctx context.Context) {
	c.src.Start(ctx)
	c.owned.start(ctx)
}

// HasSynced reports whether every feed has listed once: the readiness of
// leaders and standbys alike.
func (c *Controller) HasSynced() bool { return c.src.HasSynced() && c.owned.hasSynced() }

// Run processes the queue with workers until ctx is done: one term of
// leadership; call it on the leader, after Start, again at each new term.
// It syncs every known base first, so objects that changed while no leader
// ran are caught up.
func (c *Controller) Run(ctx context.Context, workers int) error {
	q := c.newQueue()
	c.mu.Lock()
	c.queue, c.leading = q, true
	c.mu.Unlock()
	defer func() {
		q.ShutDown()
		c.mu.Lock()
		c.leading = false
		c.mu.Unlock()
		c.forgetManaged()
	}()
	c.log.Info("waiting for the feeds to list")
	if !waitFor(ctx, c.HasSynced) {
		return ctx.Err()
	}
	for _, k := range c.src.Keys() {
		q.Add(k)
	}
	for _, k := range c.owned.bases(c.suffix) {
		q.Add(k) // slices whose global Service is gone
	}
	c.log.Info("starting workers", "workers", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNext(ctx, q) {
			}
		})
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
	return nil
}

// currentQueue is the queue of the current term, or of the last one (shut
// down: what it is given is dropped, and the next term syncs everything).
func (c *Controller) currentQueue() workqueue.TypedRateLimitingInterface[source.Key] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queue
}

func (c *Controller) isLeading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

func (c *Controller) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[source.Key]) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	start := time.Now()
	result, err := c.sync(ctx, key)
	c.metrics.SyncDuration.Observe(time.Since(start).Seconds())
	c.metrics.Syncs.WithLabelValues(result).Inc()
	if err == nil {
		q.Forget(key)
		return true
	}
	if ctx.Err() == nil {
		level := slog.LevelError
		switch {
		case errors.Is(err, slicewriter.ErrStale):
			level = slog.LevelDebug // routine: our own writes are on their way
		case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), errors.Is(err, errBeingDeleted):
			level = slog.LevelInfo // a cache behind the API server; the retry sees more
		}
		c.log.Log(ctx, level, "sync failed, retrying", "key", key.String(), "err", err, "retries", q.NumRequeues(key))
	}
	q.AddRateLimited(key)
	return true
}

// handler receives source's notifications.
type handler struct{ c *Controller }

func (h handler) Changed(k source.Key) { h.c.currentQueue().Add(k) }

func (h handler) Skipped(obj metav1.Object, kind string, skip aggregate.Skip) {
	h.c.report.skipped(obj, kind, skip)
}

func (h handler) Drained(drains source.Drains) { h.c.report.drained(drains) }

func waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
