package source

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Resource is what a feed reads, defined once: its API resource, which
// also names its feeds in logs and labels their counters; its kind and
// group version; and a typed client's list and watch of it, for client-go's
// fakes.
type Resource struct {
	Name    string // "services"
	Kind    string
	Version schema.GroupVersion
	New     func() runtime.Object
	typed   func(c kubernetes.Interface, ns string) (list func(context.Context, metav1.ListOptions) (runtime.Object, error), watch kubeclient.WatchFunc)
}

// The resources the feeds read.
var (
	Services = Resource{Name: "services", Kind: "Service", Version: corev1.SchemeGroupVersion,
		New: func() runtime.Object { return &corev1.Service{} },
		typed: func(c kubernetes.Interface, ns string) (func(context.Context, metav1.ListOptions) (runtime.Object, error), kubeclient.WatchFunc) {
			api := c.CoreV1().Services(ns)
			return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, o) }, api.Watch
		}}
	EndpointSlices = Resource{Name: "endpointslices", Kind: "EndpointSlice", Version: discoveryv1.SchemeGroupVersion,
		New: func() runtime.Object { return &discoveryv1.EndpointSlice{} },
		typed: func(c kubernetes.Interface, ns string) (func(context.Context, metav1.ListOptions) (runtime.Object, error), kubeclient.WatchFunc) {
			api := c.DiscoveryV1().EndpointSlices(ns)
			return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, o) }, api.Watch
		}}
)

// NewFeed is a feed of r in namespace ns ("" for all), selected by sel,
// into sink, as cfg says: through the API server's protobuf (cfg.API) or,
// where that is nil, cfg.Client's typed lists and watches; counted where
// the process counts (cfg.Counters).
func NewFeed(cfg Config, r Resource, ns, sel string, sink kubeclient.Sink) (*kubeclient.Feed, error) {
	var api kubeclient.API
	if cfg.API == nil {
		selector, err := labels.Parse(sel)
		if err != nil {
			return nil, fmt.Errorf("source: %s: %w", r.Name, err)
		}
		list, watchFn := r.typed(cfg.Client, ns)
		api = kubeclient.TypedAPI(r.Kind, r.New,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel
				return list(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel
				w, err := watchFn(ctx, o)
				if err != nil {
					return nil, err
				}
				// client-go's fakes select what they list, not what they
				// watch; an API server selects both.
				return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
					m, err := meta.Accessor(ev.Object)
					return ev, ev.Type == watch.Bookmark || ev.Type == watch.Error || err != nil || selector.Matches(labels.Set(m.GetLabels()))
				}), nil
			})
	} else {
		apiPath := "/apis"
		if r.Version.Group == "" {
			apiPath = "/api"
		}
		c, err := kubeclient.Client(cfg.API, r.Version, apiPath)
		if err != nil {
			return nil, fmt.Errorf("source: %s: %w", r.Name, err)
		}
		api = kubeclient.RESTAPI(c, ns, r.Name, r.Kind, sel, r.New)
	}
	f := kubeclient.NewFeed(strings.Join([]string{r.Name, cmp.Or(ns, "all namespaces"), sel}, " "), api, sink)
	if cfg.Counters != nil {
		f.Counters = cfg.Counters(r.Name)
	}
	return f, nil
}

// addFeed adds a feed of r in ns selected by sel into sink.
func (s *Source) addFeed(r Resource, ns, sel string, sink kubeclient.Sink) error {
	f, err := NewFeed(s.cfg, r, ns, sel, sink)
	if err != nil {
		return err
	}
	s.feeds = append(s.feeds, f)
	return nil
}
