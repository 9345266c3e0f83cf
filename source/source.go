// Package source watches the Services and EndpointSlices that make up global
// services and assembles aggregate.Input for each base. Both the controller and
// the CoreDNS plugin build on it, so they see the same members the same way.
//
// Services are watched whole but for Linkerd's endpoint mirrors (one per
// mirrored pod, which nothing reads: their slices carry readiness): a Service
// named like a global that globalmirror did not write has no label to select
// it by, and both halves must see it to leave it alone. The one endpoint
// mirror that could be named like a global is known without its Service: it
// is <hostname>-<cluster> of an endpoint of a headless mirror, whose slices
// are cached (globalNamed). EndpointSlices, the bulk of the data, are
// label-selected:
// Linkerd's mirror labels (copied onto mirrored slices by Kubernetes'
// mirroring controller) and the local selector (copied from the Service by
// the EndpointSlice controller). The caches hold minimal types, not API
// objects (object.go).
package source

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Key names one base service in one namespace.
type Key struct {
	Namespace string
	Base      string
}

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
	// Resync re-delivers every object this often; 0 disables it.
	Resync time.Duration
}

// Handler is told about every base whose inputs may have changed.
type Handler interface {
	// Changed is called with the base whose inputs may have changed.
	Changed(Key)
	// Skipped is called once per object version that is malformed and ignored.
	Skipped(obj metav1.Object, kind string, skip aggregate.Skip)
}

// Source is a set of informers and the indexes that map objects to bases.
type Source struct {
	cfg       Config
	factories []informers.SharedInformerFactory
	services  []cache.SharedIndexInformer
	slices    []cache.SharedIndexInformer
}

const (
	indexBase           = "globalmirror/base"            // services by namespace/base (members and globals)
	indexService        = "globalmirror/service"         // slices by namespace/service-name
	indexHeadlessMirror = "globalmirror/headless-mirror" // endpoint-mirror slices by namespace/headless mirror
	indexGlobalNamed    = "globalmirror/global-named"    // headless-mirror slices by namespace/endpoint mirror named like a global
)

// notEndpointMirrors selects every Service but Linkerd's endpoint mirrors.
var notEndpointMirrors = "!" + aggregate.LabelHeadlessMirrorName

// New builds the informers; add handlers with AddHandler, then Start them.
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("source: no Kubernetes client")
	}
	if cfg.Suffix == "" {
		cfg.Suffix = aggregate.DefaultSuffix
	}
	s := &Source{cfg: cfg}
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	mirrorSel := labels.SelectorFromSet(labels.Set{aggregate.LabelMirroredService: "true"}).String()
	stripService := newServiceStripper(cfg.LocalSelector).strip
	for _, ns := range namespaces {
		svcFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.Resync,
			informers.WithNamespace(ns), informers.WithTransform(stripService))
		svc := svcFactory.InformerFor(&corev1.Service{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			api := c.CoreV1().Services(ns)
			return selected(c, notEndpointMirrors, api.List, api.Watch, &corev1.Service{}, resync)
		})
		if err := svc.AddIndexers(cache.Indexers{indexBase: s.baseIndex}); err != nil {
			return nil, err
		}
		s.factories = append(s.factories, svcFactory)
		s.services = append(s.services, svc)

		selectors := []string{mirrorSel}
		if cfg.LocalSelector != nil && !cfg.LocalSelector.Empty() {
			selectors = append(selectors, cfg.LocalSelector.String())
		}
		for _, sel := range selectors {
			f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.Resync,
				informers.WithNamespace(ns), informers.WithTransform(sliceStripper{cfg.Suffix}.strip))
			inf := f.InformerFor(&discoveryv1.EndpointSlice{}, SliceInformer(ns, sel))
			if err := inf.AddIndexers(cache.Indexers{indexService: serviceIndex, indexHeadlessMirror: headlessMirrorIndex,
				indexGlobalNamed: globalNamedIndex}); err != nil {
				return nil, err
			}
			s.factories = append(s.factories, f)
			s.slices = append(s.slices, inf)
		}
	}
	return s, nil
}

// SliceInformer builds the EndpointSlice informer of ns for label selector
// sel (for an informer factory's InformerFor), with a watch that resumes where it stopped (see kubeclient.Informer).
func SliceInformer(ns, sel string) func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
	return func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		api := c.DiscoveryV1().EndpointSlices(ns)
		return selected(c, sel, api.List, api.Watch, &discoveryv1.EndpointSlice{}, resync)
	}
}

// selected is a resuming informer (kubeclient.Informer) of one API whose
// lists and watches carry label selector sel.
func selected[L runtime.Object](c kubernetes.Interface, sel string,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchOf func(context.Context, metav1.ListOptions) (watch.Interface, error),
	obj runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	return kubeclient.Informer(c,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return list(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return watchOf(ctx, o)
		},
		obj, resync)
}

// AddHandler tells h about every base whose inputs may change, as the
// informers deliver their objects. Add handlers before Start.
func (s *Source) AddHandler(h Handler) error {
	for _, inf := range s.services {
		if _, err := inf.AddEventHandler(s.serviceHandler(h)); err != nil {
			return err
		}
	}
	for _, inf := range s.slices {
		if _, err := inf.AddEventHandler(s.sliceHandler(h)); err != nil {
			return err
		}
	}
	return nil
}

// Start runs the informers until ctx is done.
func (s *Source) Start(ctx context.Context) {
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
}

// HasSynced reports whether every informer has listed once.
func (s *Source) HasSynced() bool {
	for _, inf := range slices.Concat(s.services, s.slices) {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// WaitForSync blocks until HasSynced or ctx is done.
func (s *Source) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.HasSynced)
}

// Suffix is the global name suffix in use.
func (s *Source) Suffix() string { return s.cfg.Suffix }

// Watches reports whether namespace is one the informers watch.
func (s *Source) Watches(namespace string) bool {
	return len(s.cfg.Namespaces) == 0 || slices.Contains(s.cfg.Namespaces, namespace)
}

// Service returns the cached Service as a sparse API object (see object.go),
// or nil. An endpoint mirror named like a global, which the cache does not
// hold, is returned as such: a Service globalmirror did not write.
func (s *Source) Service(namespace, name string) *corev1.Service {
	for _, inf := range s.services {
		obj, ok, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
		if err == nil && ok {
			if svc, ok := asService(obj); ok {
				return svc
			}
		}
	}
	if _, ok := aggregate.BaseOf(name, s.cfg.Suffix); ok {
		for _, obj := range s.byIndex(s.slices, indexGlobalNamed, namespace+"/"+name) {
			sl := obj.(*cachedSlice)
			return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
				aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: sl.cluster,
				aggregate.LabelHeadlessMirrorName: sl.serviceName,
			}}}
		}
	}
	return nil
}

// Keys lists every base that has a member or a managed global service.
func (s *Source) Keys() []Key {
	seen := map[Key]bool{}
	var keys []Key
	for _, inf := range s.services {
		for _, v := range inf.GetIndexer().ListIndexFuncValues(indexBase) {
			k := parseKey(v)
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// Input assembles the aggregation input of a base from the caches.
func (s *Source) Input(k Key) aggregate.Input {
	in := aggregate.Input{Namespace: k.Namespace, Base: k.Base, Suffix: s.cfg.Suffix}
	for _, svc := range s.byIndex(s.services, indexBase, k.String()) {
		svc, _ := asService(svc)
		c, _ := aggregate.Classify(svc, s.cfg.LocalSelector)
		if c.Base != k.Base || !c.Member() {
			continue // the managed global itself, indexed under the same base
		}
		m := aggregate.Member{Cluster: c.Cluster, Service: svc}
		for _, obj := range s.byIndex(s.slices, indexService, k.Namespace+"/"+svc.Name) {
			m.Slices = append(m.Slices, obj.(*cachedSlice).slice())
		}
		in.Members = append(in.Members, m)
		if c.Role != aggregate.RoleHeadlessMirror {
			continue
		}
		for _, obj := range s.byIndex(s.slices, indexHeadlessMirror, k.Namespace+"/"+svc.Name) {
			sl := obj.(*cachedSlice)
			if in.EndpointMirrors == nil {
				in.EndpointMirrors = map[string][]*discoveryv1.EndpointSlice{}
			}
			in.EndpointMirrors[sl.serviceName] = append(in.EndpointMirrors[sl.serviceName], sl.slice())
		}
	}
	return in
}

// byIndex looks a value up in the same index of several informers, once per object.
func (s *Source) byIndex(infs []cache.SharedIndexInformer, index, value string) []any {
	var out []any
	seen := map[string]bool{}
	for _, inf := range infs {
		objs, err := inf.GetIndexer().ByIndex(index, value)
		if err != nil {
			continue
		}
		for _, o := range objs {
			uid := string(o.(interface{ objUID() types.UID }).objUID())
			if len(infs) > 1 && seen[uid] {
				continue
			}
			seen[uid] = true
			out = append(out, o)
		}
	}
	return out
}

// baseIndex files members under their base and globals under theirs.
func (s *Source) baseIndex(obj any) ([]string, error) {
	svc, ok := asService(obj)
	if !ok {
		return nil, nil
	}
	if k, ok := s.memberKey(svc); ok {
		return []string{k.String()}, nil
	}
	if base, ok := s.globalBase(svc); ok {
		return []string{Key{svc.Namespace, base}.String()}, nil
	}
	return nil, nil
}

func (s *Source) memberKey(svc *corev1.Service) (Key, bool) {
	if c, _ := aggregate.Classify(svc, s.cfg.LocalSelector); c.Member() {
		return Key{svc.Namespace, c.Base}, true
	}
	return Key{}, false
}

// globalBase is the base of a Service globalmirror wrote.
func (s *Source) globalBase(svc *corev1.Service) (string, bool) {
	if !aggregate.WrittenByGlobalmirror(svc.Labels) {
		return "", false
	}
	return aggregate.ManagedBase(svc.Labels, svc.Name, s.cfg.Suffix)
}

// serviceIndex files members' slices under their service. Endpoint mirrors'
// slices are only ever looked up by their headless mirror: an index entry
// each (one per mirrored pod) would cost more than the slice itself.
func serviceIndex(obj any) ([]string, error) {
	sl, ok := asSlice(obj)
	if !ok || sl.serviceName == "" || sl.headlessMirror != "" {
		return nil, nil
	}
	return []string{sl.namespace + "/" + sl.serviceName}, nil
}

func globalNamedIndex(obj any) ([]string, error) {
	sl, ok := asSlice(obj)
	if !ok || len(sl.globalNamed) == 0 {
		return nil, nil
	}
	keys := make([]string, len(sl.globalNamed))
	for i, n := range sl.globalNamed {
		keys[i] = sl.namespace + "/" + n
	}
	return keys, nil
}

func headlessMirrorIndex(obj any) ([]string, error) {
	sl, ok := asSlice(obj)
	if !ok {
		return nil, nil
	}
	if sl.headlessMirror != "" {
		return []string{sl.namespace + "/" + sl.headlessMirror}, nil
	}
	return nil, nil
}

func parseKey(s string) Key {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return Key{s[:i], s[i+1:]}
		}
	}
	return Key{Base: s}
}
