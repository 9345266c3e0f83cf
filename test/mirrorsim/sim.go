// Package mirrorsim simulates Linkerd's multicluster service mirror for tests
// and the demo (headless mode), following Linkerd's own source (edge-26.8.3,
// multicluster/service-mirror/): for every Service exported from a linked
// target cluster it writes into the source cluster the same Services and v1
// Endpoints that Linkerd writes, and follows the target's changes, gateway
// failures and unlinks. The Linkerd behaviours it reproduces, each with the
// file it follows, are listed in Behaviours.
//
// Each link watches the target's exported Services and its Endpoints; the
// source's mirrors are watched too, so that drift is repaired. One reconcile
// per remote Service compares what exists with what should and writes the
// difference with create/update/delete under the field manager FieldManager.
// The simulator converges on restart: Link re-reconciles every exported
// Service and every mirror of the link. Mirrors of clusters that are not
// linked are left alone; only Unlink removes a cluster's mirrors.
package mirrorsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// FieldManager names the simulator's writes in the source cluster.
const FieldManager = "mirrorsim"

// DefaultGatewayIdentity is the identity of Linkerd's gateway in the
// linkerd-multicluster namespace of a trust domain cluster.local.
const DefaultGatewayIdentity = "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local"

// DefaultResync is Linkerd's informer resync period (controller/k8s: ResyncTime).
const DefaultResync = 10 * time.Minute

// workers reconcile concurrently.
const workers = 4

// Options configure a Simulator. Zero values take the defaults.
type Options struct {
	// GatewayIP of every target's gateway; default 192.0.2.254, a
	// documentation address (Endpoints reject loopback).
	GatewayIP netip.Addr
	// GatewayPort; default 4143, Linkerd's.
	GatewayPort int32
	// ClusterDomain of the target clusters; default cluster.local.
	ClusterDomain string
	// Namespace limits mirroring to one namespace; default all.
	Namespace string
	// ExcludedLabels and ExcludedAnnotations are the Links'
	// excludedLabels and excludedAnnotations (v1alpha3): keys of the
	// exported Service not copied onto its mirrors, each exact or a prefix
	// ending in "/*".
	ExcludedLabels, ExcludedAnnotations []string
	// GatewayIdentity is the Links' gatewayIdentity, written on the mirrors'
	// Endpoints; default Linkerd's gateway's, as linkerd multicluster link
	// reads it from the gateway.
	GatewayIdentity string
	// Resync is the period of the resync of the informers on the target
	// clusters, whose updates Linkerd handles as any other: every remote
	// Endpoints is an event again, which rewrites its headless mirror from
	// the pods. Default 10 minutes, Linkerd's (controller/k8s: ResyncTime);
	// negative: none.
	Resync time.Duration
	// Links installs Linkerd's Link CRD in the source cluster and keeps a
	// Link for each linked cluster (links.go).
	Links bool
	// Logger; nil discards.
	Logger *slog.Logger
}

// Behaviours are the Linkerd service-mirror behaviours the simulator
// reproduces, with the Linkerd source they follow (edge-26.8.3,
// multicluster/service-mirror/). `mirrorsim --help` prints them.
const Behaviours = `Linkerd behaviours reproduced (edge-26.8.3, multicluster/service-mirror/):
  - An exported headless Service with ports whose Endpoints have an address
    (ready or not) with a hostname is mirrored headless: db-<cluster>
    (clusterIP None), one ClusterIP endpoint mirror <host>-<cluster> per
    ready named address, whose Endpoints hold the gateway, and Endpoints for
    db-<cluster> mapping each hostname to its endpoint mirror's ClusterIP;
    with addresses but no hostname it gets one ClusterIP mirror in front of
    the gateway; before it has any address, no mirror. The choice sticks.
    (cluster_watcher_headless.go: createOrUpdateHeadlessEndpoints,
    createRemoteHeadlessService, createHeadlessMirrorEndpoints)
  - Mirror Services carry the remote labels without mirror.linkerd.io/* and
    the Link's excludedLabels, plus the mirror labels; headless and
    ClusterIP mirrors also every annotation of the exported Service but the
    topology ones and the Link's excludedAnnotations (opaque ports always),
    plus remote-svc-fq-name and remote-resource-version (the Service's).
    Endpoint mirrors get the labels and the remote Endpoints' version, no
    copied annotation. Endpoints get their Service's labels and the gateway
    identity when created, never new labels after. (cluster_watcher.go:
    getMirrorServiceLabels, getCommonServiceAnnotations,
    getMirrorServiceAnnotations, getMirrorEndpointLabels;
    cluster_watcher_headless.go: createEndpointMirrorService)
  - An update of the exported Service whose version differs from the
    mirror's remote-resource-version (a label, an annotation, a port)
    replaces the mirror's labels, annotations and ports and rewrites its
    Endpoints to the gateway's address, without a hostname, on the gateway
    port, headless or not; endpoint mirrors are left as they were. Nothing
    puts a headless mirror's pods back but the next remote Endpoints event
    (a label change makes one: the Endpoints controller copies the labels;
    an annotation change does not); the last event wins. (cluster_watcher.go:
    createOrUpdateService, handleRemoteExportedServiceUpdated)
  - The informers on the target resync every 10 minutes, and Linkerd takes a
    resync for an update: every remote Endpoints rewrites its headless
    mirror from the pods, ready as the gateway is alive. (controller/k8s:
    ResyncTime; cluster_watcher.go: Start)
  - A remote pod that turns not ready leaves the headless mirror and its
    endpoint mirror is deleted; when ready again, the endpoint mirror is
    re-created with a new ClusterIP. (cluster_watcher_headless.go:
    createOrUpdateHeadlessEndpoints)
  - The gateway probe starts "not alive" and reports a transition only: the
    first success marks the gateway alive, and failures count only after a
    success, so a gateway that is down from the start never marks anything
    not ready. The cluster watcher itself starts with the gateway alive.
    (probe_worker.go: run; cluster_watcher.go: NewRemoteClusterServiceWatcher)
  - While the gateway is dead, every Endpoints the mirror writes has its
    addresses moved to notReadyAddresses: ClusterIP and endpoint mirrors, and
    the headless mirror's Endpoints whenever a remote event makes the mirror
    update them. Only their first creation is always ready.
    (cluster_watcher.go: updateReadiness, createMirrorEndpoints,
    updateMirrorEndpoints; cluster_watcher_headless.go:
    createHeadlessMirrorEndpoints)
  - On a gateway liveness change the mirror repairs the Endpoints of the
    ClusterIP and endpoint mirrors, but skips headless mirrors ("Skipped
    repairing endpoints for headless mirror"): a headless mirror written while
    the gateway was dead, or rewritten to the gateway, stays so until the next
    remote Endpoints event. (cluster_watcher.go: repairEndpoints)
  - The Endpoints it writes carry no endpoints.kubernetes.io/last-change-
    trigger-time, so neither do the slices mirrored from them.
  - Unlinking deletes all of a cluster's mirrors. (cluster_watcher.go:
    cleanupMirroredResources)
  - With Options.Links: the Link CRD is installed (v1alpha1 to v1alpha3,
    v1alpha3 stored) and each linked cluster has a Link named after it in
    linkerd-multicluster, deleted on unlink, as linkerd multicluster
    install and link write them. (charts/linkerd-multicluster/templates/
    link-crd.yaml; cmd/link.go)

Left out, or done otherwise (read at the same tag):
  - Linkerd handles its events one at a time from one queue, and a Service
    update's rewrite is queued behind the events already there; the
    simulator reconciles each remote Service as a whole, so where a Service
    and an Endpoints event come close together it lets the later one win.
    On restart Linkerd may so rewrite to the gateway a headless mirror whose
    Service changed while it was down; the simulator puts the pods.
  - The simulator repairs drift of the source's mirrors (it watches them);
    Linkerd only reads them through listers.
  - stable-2.14.10 labels a headless mirror's Endpoints with the two mirror
    labels only; remote discovery, federated
    services, namespace creation, the orphaned-service GC and the Link
    status are not simulated.
  - A headless mirror's Endpoints take a created address's hostname from its
    target reference's name (createHeadlessMirrorEndpoints), equal to the
    hostname for StatefulSet pods, the only pods the simulator mirrors.
`

// LinkStatus describes one link.
type LinkStatus struct {
	Name string `json:"name"`
	// GatewayAlive is what the mirrors show: the cluster watcher's view of
	// the gateway, changed only by the probe's transitions.
	GatewayAlive bool `json:"gatewayAlive"`
	// GatewayUp is whether the gateway passes its probes now.
	GatewayUp bool `json:"gatewayUp"`
}

// Simulator is a running service mirror for one source cluster.
type Simulator struct {
	opts   Options
	log    *slog.Logger
	source kubernetes.Interface
	// dynamic writes the source's Links; nil without Options.Links.
	dynamic dynamic.Interface
	// The source's mirrors: Services and Endpoints labelled with a cluster name.
	mirrorServices  corelisters.ServiceLister
	mirrorEndpoints corelisters.EndpointsLister
	queue           workqueue.TypedRateLimitingInterface[key]
	busy            atomic.Int32 // keys being reconciled
	retryMu         sync.Mutex
	retrying        map[key]bool // keys waiting to be retried after an error

	ctx     context.Context
	cancel  context.CancelFunc
	workers sync.WaitGroup

	mu    sync.Mutex
	links map[string]*link
}

// key names one remote Service of one linked cluster: the unit of reconcile.
type key struct{ Cluster, Namespace, Name string }

type link struct {
	name      string
	client    kubernetes.Interface        // the target's
	services  corelisters.ServiceLister   // exported ones
	endpoints corelisters.EndpointsLister // all, to see hostnames before export
	stop      context.CancelFunc
	inflight  sync.WaitGroup // reconciles using this link

	mu sync.Mutex
	// gatewayUp: the gateway passes its probes now.
	gatewayUp bool
	// probeAlive is the probe worker's state; it starts false, and only its
	// transitions reach the cluster watcher (probe_worker.go).
	probeAlive bool
	// events holds the remote events of each remote Service not yet
	// reconciled: they decide what its headless mirror's Endpoints are
	// rewritten to.
	events map[key]remoteEvents

	// gatewayAlive is the cluster watcher's view, which the mirrors'
	// readiness follows; it starts true (cluster_watcher.go).
	gatewayAlive atomic.Bool
}

// LinkOption changes how Link starts a link.
type LinkOption func(*link)

// GatewayDown links a cluster whose gateway fails its probes from the start.
// As with Linkerd, nothing is marked not ready for it until its gateway has
// passed a probe once and failed again.
func GatewayDown() LinkOption { return func(l *link) { l.gatewayUp = false } }

// remoteEvents are the remote events of one remote Service that a
// reconcile answers.
type remoteEvents struct {
	// endpoints: its Endpoints had an event (Linkerd's
	// createOrUpdateHeadlessEndpoints rewrites the headless mirror's from
	// the pods).
	endpoints bool
	// serviceLast: the last event was the Service's, so an update of the
	// exported Service (handleRemoteExportedServiceUpdated) writes last.
	serviceLast bool
}

// takeEvents reports and forgets k's remote events.
func (l *link) takeEvents(k key) remoteEvents {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.events[k]
	delete(l.events, k)
	return ev
}

// addEvents records k's remote events ev, after those already recorded.
func (l *link) addEvents(k key, ev remoteEvents) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.events[k]
	if ev.endpoints {
		cur.endpoints, cur.serviceLast = true, false
	}
	if ev.serviceLast {
		cur.serviceLast = true
	}
	l.events[k] = cur
}

// probe records the outcome of a gateway probe, as Linkerd's probe worker
// does, and reports whether the cluster watcher heard of a transition.
func (l *link) probe(up bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gatewayUp = up
	if up == l.probeAlive {
		return false // no transition: the probe worker says nothing
	}
	l.probeAlive = up
	l.gatewayAlive.Store(up)
	return true
}

// Start starts a simulator writing into the source cluster, with no link yet.
// It runs until ctx is done or Stop is called.
func Start(ctx context.Context, source *rest.Config, opts Options) (*Simulator, error) {
	opts.GatewayIP = cmp.Or(opts.GatewayIP, netip.MustParseAddr("192.0.2.254"))
	opts.GatewayPort = cmp.Or(opts.GatewayPort, 4143)
	opts.ClusterDomain = cmp.Or(opts.ClusterDomain, "cluster.local")
	opts.GatewayIdentity = cmp.Or(opts.GatewayIdentity, DefaultGatewayIdentity)
	opts.Resync = cmp.Or(opts.Resync, DefaultResync)
	s := &Simulator{opts: opts, log: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)), links: map[string]*link{}, retrying: map[key]bool{}}
	var err error
	if s.source, err = newClient(source); err != nil {
		return nil, fmt.Errorf("mirrorsim: source: %w", err)
	}
	if opts.Links {
		if err := InstallLinkCRD(ctx, source); err != nil {
			return nil, err
		}
		if s.dynamic, err = dynamic.NewForConfig(source); err != nil {
			return nil, fmt.Errorf("mirrorsim: source: %w", err)
		}
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](50*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "mirrorsim"})

	factory := informers.NewSharedInformerFactoryWithOptions(s.source, 0,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelClusterName }))
	svcInformer := factory.Core().V1().Services()
	epInformer := factory.Core().V1().Endpoints()
	s.mirrorServices, s.mirrorEndpoints = svcInformer.Lister(), epInformer.Lister()
	for _, inf := range []cache.SharedIndexInformer{svcInformer.Informer(), epInformer.Informer()} {
		if _, err := inf.AddEventHandler(s.handler(s.mirrorKey)); err != nil {
			return nil, err
		}
	}
	factory.Start(s.ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(s.ctx.Done()) {
		if !ok {
			s.Stop()
			return nil, fmt.Errorf("mirrorsim: source %v cache did not sync", typ)
		}
	}
	go func() {
		<-s.ctx.Done()
		s.queue.ShutDown()
	}()
	for range workers {
		s.workers.Go(s.work)
	}
	return s, nil
}

// Stop stops the simulator and its links, leaving the mirrors in place, as a
// stopped Linkerd would.
func (s *Simulator) Stop() {
	s.cancel()
	s.workers.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.links {
		l.stop()
	}
}

// Link starts mirroring the target cluster `name` and returns once its caches
// are synced and every exported Service and existing mirror of the cluster is
// queued for reconcile. Its gateway passes its first probe at once unless
// GatewayDown is given.
func (s *Simulator) Link(ctx context.Context, name string, target *rest.Config, opts ...LinkOption) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("mirrorsim: cluster name %q: %s", name, strings.Join(errs, "; "))
	}
	client, err := newClient(target)
	if err != nil {
		return fmt.Errorf("mirrorsim: target %s: %w", name, err)
	}
	l := &link{name: name, client: client, gatewayUp: true, events: map[key]remoteEvents{}}
	for _, o := range opts {
		o(l)
	}
	l.gatewayAlive.Store(true)
	l.probe(l.gatewayUp)
	linkCtx, stop := context.WithCancel(s.ctx)
	l.stop = stop

	resync := max(s.opts.Resync, 0)
	exported := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithNamespace(s.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelExported + "=true" }))
	// Endpoints are watched unfiltered: they get the Service's labels only
	// after the Service is exported, and the hostnames decide the mirror mode.
	all := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(s.opts.Namespace))
	svcInformer := exported.Core().V1().Services()
	epInformer := all.Core().V1().Endpoints()
	l.services, l.endpoints = svcInformer.Lister(), epInformer.Lister()
	remoteKey := func(obj metav1.Object) (key, bool) {
		return key{Cluster: name, Namespace: obj.GetNamespace(), Name: obj.GetName()}, true
	}
	onRemoteService := s.handler(func(obj metav1.Object) (key, bool) {
		k, _ := remoteKey(obj)
		l.addEvents(k, remoteEvents{serviceLast: true})
		return k, true
	})
	if _, err := svcInformer.Informer().AddEventHandler(onRemoteService); err != nil {
		stop()
		return err
	}
	// A remote Endpoints add or update is what makes Linkerd rewrite a
	// headless mirror's Endpoints (cluster_watcher.go: Start).
	onRemoteEndpoints := s.handler(func(obj metav1.Object) (key, bool) {
		k, _ := remoteKey(obj)
		l.addEvents(k, remoteEvents{endpoints: true})
		return k, true
	})
	if _, err := epInformer.Informer().AddEventHandler(onRemoteEndpoints); err != nil {
		stop()
		return err
	}

	s.mu.Lock()
	if _, ok := s.links[name]; ok {
		s.mu.Unlock()
		stop()
		return fmt.Errorf("mirrorsim: %s is already linked", name)
	}
	s.links[name] = l
	s.mu.Unlock()

	exported.Start(linkCtx.Done())
	all.Start(linkCtx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), svcInformer.Informer().HasSynced, epInformer.Informer().HasSynced) {
		_ = s.Unlink(context.WithoutCancel(ctx), name)
		return fmt.Errorf("mirrorsim: target %s: caches did not sync", name)
	}
	s.enqueueLink(name)
	if s.dynamic != nil {
		if err := s.writeLink(ctx, name); err != nil {
			return fmt.Errorf("mirrorsim: the Link to %s: %w", name, err)
		}
	}
	s.log.Info("linked", "cluster", name, "host", target.Host)
	return nil
}

// Unlink stops mirroring cluster `name` and deletes all its mirrors from the
// source, in every namespace the simulator watches.
func (s *Simulator) Unlink(ctx context.Context, name string) error {
	s.mu.Lock()
	l := s.links[name]
	delete(s.links, name)
	s.mu.Unlock()
	if l == nil {
		return fmt.Errorf("mirrorsim: %s is not linked", name)
	}
	l.stop()
	l.inflight.Wait() // no reconcile may write after the deletion below

	sel := metav1.ListOptions{LabelSelector: labels.Set{LabelClusterName: name}.String()}
	var errs []error
	svcs, err := s.source.CoreV1().Services(s.opts.Namespace).List(ctx, sel)
	if err != nil {
		return err
	}
	for _, svc := range svcs.Items {
		errs = append(errs, deleteObject(ctx, s.source.CoreV1().Services(svc.Namespace), "service", svc.Namespace, svc.Name))
	}
	eps, err := s.source.CoreV1().Endpoints(s.opts.Namespace).List(ctx, sel)
	if err != nil {
		return err
	}
	for _, ep := range eps.Items {
		errs = append(errs, deleteObject(ctx, s.source.CoreV1().Endpoints(ep.Namespace), "endpoints", ep.Namespace, ep.Name))
	}
	if s.dynamic != nil {
		errs = append(errs, s.deleteLink(ctx, name))
	}
	s.log.Info("unlinked", "cluster", name, "services", len(svcs.Items), "endpoints", len(eps.Items))
	return errors.Join(errs...)
}

// SetGatewayAlive makes cluster `name`'s gateway pass (true) or fail (false)
// its probes (the failure threshold reached). Only a transition the probe
// worker reports changes the mirrors: a gateway that never passed a probe
// is not marked dead. A dead gateway's ClusterIP and endpoint mirrors get
// their Endpoints' address moved to notReadyAddresses, and so does a
// headless mirror's Endpoints if a remote change rewrites them meanwhile;
// when the gateway is back, the ClusterIP and endpoint mirrors are repaired,
// the headless mirrors are not.
func (s *Simulator) SetGatewayAlive(name string, alive bool) error {
	l := s.linkNamed(name)
	if l == nil {
		return fmt.Errorf("mirrorsim: %s is not linked", name)
	}
	if l.probe(alive) {
		s.log.Info("gateway liveness changed", "cluster", name, "alive", alive)
		s.enqueueLink(name) // Linkerd's RepairEndpoints
	} else {
		s.log.Info("gateway probe", "cluster", name, "up", alive, "reported", false)
	}
	return nil
}

func (s *Simulator) setRetrying(k key, retrying bool) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	if retrying {
		s.retrying[k] = true
	} else {
		delete(s.retrying, k)
	}
}

func (s *Simulator) idle() bool {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	return s.queue.Len() == 0 && s.busy.Load() == 0 && len(s.retrying) == 0
}

// WaitIdle returns once nothing is queued, being reconciled or waiting for
// a retry, or ctx ends.
func (s *Simulator) WaitIdle(ctx context.Context) error {
	for !s.idle() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Links lists the linked clusters by name.
func (s *Simulator) Links() []LinkStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LinkStatus
	for _, l := range s.links {
		l.mu.Lock()
		up := l.gatewayUp
		l.mu.Unlock()
		out = append(out, LinkStatus{Name: l.name, GatewayAlive: l.gatewayAlive.Load(), GatewayUp: up})
	}
	slices.SortFunc(out, func(a, b LinkStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// enqueueLink queues every exported Service of the link and every mirror of
// the cluster, so that stale mirrors are deleted too.
func (s *Simulator) enqueueLink(name string) {
	l := s.linkNamed(name)
	if l == nil {
		return
	}
	svcs, _ := l.services.List(labels.Everything())
	for _, svc := range svcs {
		s.queue.Add(key{Cluster: name, Namespace: svc.Namespace, Name: svc.Name})
	}
	mirrors, _ := s.mirrorServices.List(labels.SelectorFromSet(labels.Set{LabelClusterName: name}))
	for _, m := range mirrors {
		if k, ok := s.mirrorKey(m); ok {
			s.queue.Add(k)
		}
	}
}

func (s *Simulator) linkNamed(name string) *link {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.links[name]
}

// mirrorKey maps a mirror in the source back to its remote Service:
// db-east and db-0-east (headless mirror db-east) both to east/db.
func (s *Simulator) mirrorKey(obj metav1.Object) (key, bool) {
	cluster := obj.GetLabels()[LabelClusterName]
	name := obj.GetName()
	if h := obj.GetLabels()[LabelHeadlessMirrorSvcName]; h != "" {
		name = h
	}
	remote, ok := strings.CutSuffix(name, "-"+cluster)
	if cluster == "" || !ok || remote == "" {
		return key{}, false
	}
	return key{Cluster: cluster, Namespace: obj.GetNamespace(), Name: remote}, true
}

func (s *Simulator) handler(keyOf func(metav1.Object) (key, bool)) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			if k, ok := keyOf(m); ok {
				s.queue.Add(k)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}
}

func (s *Simulator) work() {
	for {
		k, shutdown := s.queue.Get()
		if shutdown {
			return
		}
		s.busy.Add(1)
		err := s.reconcileKey(k)
		s.setRetrying(k, err != nil && s.ctx.Err() == nil)
		switch {
		case err == nil, s.ctx.Err() != nil:
			s.queue.Forget(k)
		default:
			// Conflicts and stale caches are expected: retry soon.
			s.log.Debug("reconcile failed, retrying", "cluster", k.Cluster, "namespace", k.Namespace, "service", k.Name, "err", err)
			if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
				utilruntime.HandleErrorWithContext(s.ctx, err, "mirrorsim reconcile", "cluster", k.Cluster, "namespace", k.Namespace, "service", k.Name)
			}
			s.queue.AddRateLimited(k)
		}
		s.queue.Done(k)
		s.busy.Add(-1)
	}
}

// reconcileKey runs one reconcile while holding the link, so that Unlink
// waits for it.
func (s *Simulator) reconcileKey(k key) error {
	s.mu.Lock()
	l := s.links[k.Cluster]
	if l != nil {
		l.inflight.Add(1)
	}
	s.mu.Unlock()
	if l == nil {
		return nil // not linked: leave its mirrors alone
	}
	defer l.inflight.Done()
	start := time.Now()
	ev := l.takeEvents(k)
	changes, err := s.reconcile(s.ctx, l, k, ev)
	if err != nil {
		l.addEvents(k, ev) // the retry still answers them
	}
	if changes > 0 {
		s.log.Info("mirrored", "cluster", k.Cluster, "namespace", k.Namespace, "service", k.Name,
			"writes", changes, "elapsed", time.Since(start).Round(time.Microsecond), "err", err)
	}
	return err
}

// linkSpec is what of the Links' spec the mirrors' metadata follows.
func (s *Simulator) linkSpec() linkSpec {
	return linkSpec{excludedLabels: s.opts.ExcludedLabels, excludedAnnotations: s.opts.ExcludedAnnotations, gatewayIdentity: s.opts.GatewayIdentity}
}

func newClient(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	// Linkerd reads and writes v1 Endpoints; their deprecation warning is noise.
	cfg.WarningHandler = rest.NoWarnings{}
	return kubernetes.NewForConfig(cfg)
}

// Behind describes what of the API servers' objects the simulator's caches
// have not seen yet, the first difference of each cache; "" once every
// cache (the source's mirrors, each link's exported Services and
// Endpoints) holds what a list of its API server returns now. A test that
// must know the simulator has followed every change (after an API server
// restart its informers relist on client-go's schedule) waits for "" and
// WaitIdle.
func (s *Simulator) Behind(ctx context.Context) (string, error) {
	type cache struct {
		what   string
		list   func(context.Context, metav1.ListOptions) (map[string]string, error)
		cached func() map[string]string
		sel    string
	}
	caches := []cache{
		{"the source's mirror Services", listServices(s.source, s.opts.Namespace), cachedOf(s.mirrorServices.List), LabelClusterName},
		{"the source's mirror Endpoints", listEndpoints(s.source, s.opts.Namespace), cachedOf(s.mirrorEndpoints.List), LabelClusterName},
	}
	s.mu.Lock()
	for _, l := range s.links {
		caches = append(caches,
			cache{l.name + "'s exported Services", listServices(l.client, s.opts.Namespace), cachedOf(l.services.List), LabelExported + "=true"},
			cache{l.name + "'s Endpoints", listEndpoints(l.client, s.opts.Namespace), cachedOf(l.endpoints.List), ""})
	}
	s.mu.Unlock()
	var behind []string
	for _, c := range caches {
		live, err := c.list(ctx, metav1.ListOptions{LabelSelector: c.sel})
		if err != nil {
			return "", err
		}
		if cached := c.cached(); !maps.Equal(live, cached) {
			behind = append(behind, fmt.Sprintf("%s: %d cached, %d listed", c.what, len(cached), len(live)))
		}
	}
	return strings.Join(behind, "; "), nil
}

// cachedOf is a lister's objects as namespace/name → resourceVersion.
func cachedOf[T metav1.Object](list func(labels.Selector) ([]T, error)) func() map[string]string {
	return func() map[string]string {
		objs, _ := list(labels.Everything())
		out := make(map[string]string, len(objs))
		for _, o := range objs {
			out[o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
		}
		return out
	}
}

func listServices(c kubernetes.Interface, ns string) func(context.Context, metav1.ListOptions) (map[string]string, error) {
	return func(ctx context.Context, o metav1.ListOptions) (map[string]string, error) {
		l, err := c.CoreV1().Services(ns).List(ctx, o)
		if err != nil {
			return nil, err
		}
		return versionsOf(l.Items), nil
	}
}

func listEndpoints(c kubernetes.Interface, ns string) func(context.Context, metav1.ListOptions) (map[string]string, error) {
	return func(ctx context.Context, o metav1.ListOptions) (map[string]string, error) {
		l, err := c.CoreV1().Endpoints(ns).List(ctx, o)
		if err != nil {
			return nil, err
		}
		return versionsOf(l.Items), nil
	}
}

// versionsOf is a list's items as namespace/name → resourceVersion.
func versionsOf[T any, P interface {
	*T
	metav1.Object
}](items []T) map[string]string {
	out := make(map[string]string, len(items))
	for i := range items {
		o := P(&items[i])
		out[o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
	}
	return out
}
