// Package source watches the Services and EndpointSlices that make up global
// services and assembles aggregate.Input for each base. Both the controller and
// the CoreDNS plugin build on it, so they see the same members the same way.
//
// Its index is built from the watch events themselves (kubeclient.Feed into
// the sinks of servicesink.go and slicesink.go), keeping compact entries
// (service.go, slice.go, mirror.go) and only what is read. Services are watched whole but for Linkerd's endpoint mirrors
// (one per mirrored pod, which nothing watches: their slices carry readiness,
// and those of a rewritten headless mirror are listed once, rewrite.go):
// a Service named like a global that globalmirror did not write has no label
// to select it by, and both halves must see it to leave it alone. Of the
// rest, only members, globals and Services named like a global are kept. The
// one endpoint mirror that could be named like a global is known without its
// Service: it is <hostname>-<cluster> of an endpoint of a headless mirror
// (globalNamed). EndpointSlices, the bulk of the data, are label-selected:
// Linkerd's mirror labels (copied onto mirrored slices by Kubernetes'
// mirroring controller) and the local selector (copied from the Service by
// the EndpointSlice controller).
package source

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Key names one base service in one namespace.
type Key struct {
	Namespace string
	Base      string
}

// String is "namespace/base".
func (k Key) String() string { return k.Namespace + "/" + k.Base }

// Config says what to watch.
type Config struct {
	Client kubernetes.Interface
	// Namespaces to watch; empty means all.
	Namespaces []string
	// Suffix of global service names (aggregate.DefaultSuffix).
	Suffix string
	// LocalSelector selects local member services; nil leaves local services out.
	LocalSelector labels.Selector
	// NoUIDs keeps no Service's UID, for a user that neither owns nor
	// deletes anything by one (the plugin).
	NoUIDs bool
	// API is the configuration Client was made with: the feeds read the
	// API server's lists and watches themselves (kubeclient.RESTAPI), and
	// ask their sinks whether an object is current at the version sent
	// before they decode it, so that a relist decodes only what changed
	// and makes no garbage for the rest.
	API *rest.Config
	// APIs, where set, are the feeds' APIs instead (unit tests serve them
	// from client-go's fakes: test/fakeapi).
	APIs func(r kubeclient.Resource, namespace, sel string) (kubeclient.API, error)
	// Links reads the metadata of Linkerd's Links, whose drain annotations
	// drain clusters (aggregate.AnnotationDrain); nil: no Link drains
	// anything. Its group's version is found through Client's discovery.
	Links dynamic.Interface
	// LinksPoll is how often to look for the Link resource while it is
	// absent; 0 is DefaultLinksPoll.
	LinksPoll time.Duration
	// Counters, when set, are the counters of the feeds of resource
	// ("services", "endpointslices"), for the process's metrics.
	Counters func(resource string) kubeclient.Counters
}

// Handler is told about every base whose inputs may have changed.
type Handler interface {
	// Changed is called with the base whose inputs may have changed.
	Changed(Key)
	// Skipped is called once per object version that is malformed and ignored.
	Skipped(obj metav1.Object, kind string, skip aggregate.Skip)
}

// Source is the feeds and the index they build.
type Source struct {
	cfg       Config
	labelKeys []string // the Service label keys kept
	feeds     kubeclient.Feeds
	handlers  []Handler

	mu       sync.RWMutex
	intern   *interner
	hash     nameHash
	entries  nsMap[*entry]          // by Service name (store.go)
	held     nsMap[[]*indexedSlice] // headless mirrors' slices held through Linkerd's gateway rewrite (rewrite.go)
	rebuilds workqueue.TypedRateLimitingInterface[nsName]
	rebuilt  atomic.Bool // the rebuilds queued by the first lists were tried
	// ctx is Start's; endpointMirrorWatches the namespaces whose endpoint
	// mirror Services are watched while a headless mirror there is held
	// (rewrite.go).
	ctx                   context.Context
	endpointMirrorWatches map[string]bool
	bases                 nsMap[[]*indexedService] // members and globals of ours, by base
	skipped               map[nsName]skipped
	serviceSinks          map[string]*serviceSink // by watched namespace; "" for all
	slices                []*sliceSink
	links                 *linkFeed               // nil without Config.Links
	drains                map[string]ClusterDrain // by cluster, from the Links
	invalidLinks          []string                // Drains.InvalidLinks
	// serviceDrains are the member services drained by their own
	// annotation, kept as they are indexed (addService, removeService).
	serviceDrains map[nsName]ServiceDrain
	// drainsChanged: the write under way changed the drains; the
	// DrainHandlers are told after it (write).
	drainsChanged bool
	levels        map[string]aggregate.Drain // drains' levels, shared by every Input; replaced, never written
}

// notEndpointMirrors selects every Service but Linkerd's endpoint mirrors.
var notEndpointMirrors = "!" + aggregate.LabelHeadlessMirrorName

// New builds the feeds; add handlers with AddHandler, then Start them.
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("source: no Kubernetes client")
	}
	if cfg.Suffix == "" {
		cfg.Suffix = aggregate.DefaultSuffix
	}
	s := &Source{cfg: cfg, labelKeys: labelKeysRead(cfg.LocalSelector), intern: newInterner(),
		hash: nameHash(maphash.MakeSeed()), entries: nsMap[*entry]{}, held: nsMap[[]*indexedSlice]{}, rebuilds: newRebuilds(), bases: nsMap[[]*indexedService]{}, skipped: map[nsName]skipped{},
		serviceSinks: map[string]*serviceSink{}}
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	feeds := NewFeeds(cfg)
	mirrorSel := labels.SelectorFromSet(labels.Set{aggregate.LabelMirroredService: "true"})
	for _, ns := range namespaces {
		svcs := &serviceSink{s: s}
		s.serviceSinks[ns] = svcs
		if err := s.addFeed(feeds, Services, ns, notEndpointMirrors, svcs); err != nil {
			return nil, err
		}

		selectors := []labels.Selector{mirrorSel}
		if cfg.LocalSelector != nil && !cfg.LocalSelector.Empty() {
			selectors = append(selectors, cfg.LocalSelector)
		}
		for feed, sel := range selectors {
			sink := newSliceSink(s, sel, ns, sliceFeed(feed))
			s.slices = append(s.slices, sink)
			if err := s.addFeed(feeds, EndpointSlices, ns, sel.String(), sink); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Links != nil {
		s.links = &linkFeed{s: s, client: cfg.Links, absentPoll: cmp.Or(cfg.LinksPoll, DefaultLinksPoll),
			groups: func() (string, error) { return LinkVersion(cfg.Client.Discovery()) }}
	}
	return s, nil
}

// LinkVersion is the version of Linkerd's Links the API server prefers, ""
// where it serves none.
func LinkVersion(d discovery.DiscoveryInterface) (string, error) {
	groups, err := d.ServerGroups()
	if err != nil {
		return "", err
	}
	for _, g := range groups.Groups {
		if g.Name == LinkGroup {
			return cmp.Or(g.PreferredVersion.Version, firstVersion(g.Versions)), nil
		}
	}
	return "", nil
}

func firstVersion(vs []metav1.GroupVersionForDiscovery) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0].Version
}

// labelKeysRead are the Service label keys Classify, WrittenByGlobalmirror
// and the local selector read: the only labels the index keeps.
func labelKeysRead(local labels.Selector) []string {
	keys := []string{
		aggregate.LabelMirroredService, aggregate.LabelClusterName, aggregate.LabelHeadlessMirrorName,
		aggregate.LabelManagedBy, aggregate.LabelBase,
	}
	if local != nil {
		reqs, _ := local.Requirements()
		for _, r := range reqs {
			keys = append(keys, r.Key())
		}
	}
	return keys
}

// AddHandler tells h about every base whose inputs may change, as the feeds
// deliver their objects. Add handlers before Start.
func (s *Source) AddHandler(h Handler) {
	s.handlers = append(s.handlers, h)
}

// Start runs the feeds until ctx is done.
func (s *Source) Start(ctx context.Context) {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	s.feeds.Start(ctx)
	go s.runRebuilds(ctx)
	if s.links != nil {
		go s.links.run(ctx)
	}
}

// HasSynced reports whether every feed has listed once, the Links' having
// listed them or found them absent, and the headless mirrors those lists
// found rewritten to Linkerd's gateway were rebuilt (rewrite.go), each
// tried once: what the index answers from then on is complete.
func (s *Source) HasSynced() bool {
	return s.listed() && s.rebuilt.Load()
}

// listed reports whether every feed has listed once, the Links' having
// listed them or found them absent.
func (s *Source) listed() bool {
	return s.feeds.HasSynced() && (s.links == nil || s.links.synced.Load())
}

// WaitForSync blocks until HasSynced or ctx is done.
func (s *Source) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.HasSynced)
}

// Suffix is the global name suffix in use.
func (s *Source) Suffix() string { return s.cfg.Suffix }

// serviceSinkOf is the sink the Services of ns come from.
func (s *Source) serviceSinkOf(ns string) *serviceSink {
	if k, ok := s.serviceSinks[ns]; ok {
		return k
	}
	return s.serviceSinks[metav1.NamespaceAll]
}

// Watches reports whether namespace is one the feeds watch.
func (s *Source) Watches(namespace string) bool {
	return len(s.cfg.Namespaces) == 0 || slices.Contains(s.cfg.Namespaces, namespace)
}

// Service returns the present Service as a sparse API object (see service.go),
// or nil. An endpoint mirror named like a global, which the index keeps no
// Service of, is returned as such: a Service globalmirror did not write.
func (s *Source) Service(namespace, name string) *corev1.Service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c := s.service(namespace, name); c != nil {
		return c.service()
	}
	if _, ok := aggregate.BaseOf(name, s.cfg.Suffix); ok {
		for _, k := range s.slices {
			for _, by := range k.globalNamed.get(namespace, name) {
				return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
					aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: by.slice.cluster(),
					aggregate.LabelHeadlessMirrorName: by.headless,
				}}}
			}
		}
	}
	return nil
}

// Keys lists every base that has a member or a managed global service.
func (s *Source) Keys() []Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := make([]Key, 0, s.bases.len())
	s.bases.each(func(namespace, base string, _ []*indexedService) {
		keys = append(keys, Key{namespace, base})
	})
	return keys
}

// Input assembles the aggregation input of a base from the index.
func (s *Source) Input(k Key) aggregate.Input {
	s.mu.RLock()
	defer s.mu.RUnlock()
	in := aggregate.Input{Namespace: k.Namespace, Base: k.Base, Suffix: s.cfg.Suffix, Drains: s.levels}
	for _, c := range s.bases.get(k.Namespace, k.Base) {
		svc := c.service()
		cl, _ := aggregate.Classify(svc, s.cfg.LocalSelector)
		if cl.Base != k.Base || !cl.Member() {
			continue // the managed global itself, filed under the same base
		}
		m := aggregate.Member{Cluster: cl.Cluster, Service: svc}
		e := s.entries.get(k.Namespace, svc.Name) // present: bases files only what entries have
		// Held through Linkerd's gateway rewrite (rewrite.go), or live;
		// held, but rebuilt from no endpoint mirror, the live slices'
		// named endpoints are its members.
		for _, sl := range s.held.get(k.Namespace, svc.Name) {
			m.Slices = append(m.Slices, sl.slice(svc.Name))
		}
		for _, feed := range []sliceFeed{mirrorFeed, localFeed} {
			if m.Slices != nil {
				break // held
			}
			for _, sl := range e.members {
				if sl.feed() != feed || (feed != mirrorFeed && slices.ContainsFunc(m.Slices, func(o *discoveryv1.EndpointSlice) bool { return sl.named(svc.Name, o.Name) })) {
					continue // another feed's, or delivered by both: their selectors match it
				}
				m.Slices = append(m.Slices, sl.slice(svc.Name))
			}
		}
		in.Members = append(in.Members, m)
		if cl.Role == aggregate.RoleHeadlessMirror {
			in.EndpointMirrors = s.endpointMirrors(e, cl.Cluster, m.Slices, in.EndpointMirrors)
		}
	}
	return in
}

// endpointMirrors adds to em, for each endpoint with a hostname of a
// headless mirror's slices, its endpoint mirror <hostname>-<cluster> as the
// sparse slices aggregate.MirrorEndpointReady reads, where the headless
// mirror's entry e has slices of it.
func (s *Source) endpointMirrors(e *entry, cluster string, headless []*discoveryv1.EndpointSlice, em map[string][]*discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	if len(e.mirrors) == 0 {
		return em
	}
	// ready: whether any slice of an endpoint mirror has a ready endpoint,
	// by the hash of the endpoint mirror's name. A slice both feeds deliver
	// (their selectors match it) is read as the mirror feed's: that
	// one sorts first, its key's low bit clear.
	ready := make(map[uint64]bool, len(e.mirrors))
	for i, ms := range e.mirrors {
		if i > 0 && e.mirrors[i-1].key == ms.key&^1 {
			continue
		}
		ready[ms.serviceHash()] = ready[ms.serviceHash()] || ms.ready()
	}
	for _, sl := range headless {
		for i := range sl.Endpoints {
			h := sl.Endpoints[i].Hostname
			if h == nil || *h == "" {
				continue
			}
			name := *h + "-" + cluster
			r, ok := ready[mirrorService(s.hash.of(name))]
			if !ok {
				continue
			}
			if em == nil {
				em = map[string][]*discoveryv1.EndpointSlice{}
			}
			em[name] = notReadyMirror
			if r {
				em[name] = readyMirror
			}
		}
	}
	return em
}

// globalBase is the base of a Service globalmirror wrote.
func (s *Source) globalBase(svc *corev1.Service) (string, bool) {
	if !aggregate.WrittenByGlobalmirror(svc.Labels) {
		return "", false
	}
	return aggregate.ManagedBase(svc.Labels, svc.Name, s.cfg.Suffix)
}
