package source

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// The resources the feeds read.
var (
	Services = kubeclient.Resource{Name: "services", Kind: "Service", Version: corev1.SchemeGroupVersion,
		New: func() runtime.Object { return &corev1.Service{} }}
	EndpointSlices = kubeclient.Resource{Name: "endpointslices", Kind: "EndpointSlice", Version: discoveryv1.SchemeGroupVersion,
		New: func() runtime.Object { return &discoveryv1.EndpointSlice{} }}
)

// Feeds makes the feeds of one index: each group version's REST client
// is made once and serves every feed of it, in every namespace, as it
// would with client-go's clientsets.
type Feeds struct {
	cfg     Config
	clients map[schema.GroupVersion]*rest.RESTClient
}

// NewFeeds makes feeds as cfg says: through cfg.APIs where it is set, else
// the API server's protobuf (cfg.API); counted where the process counts
// (cfg.Counters).
func NewFeeds(cfg Config) *Feeds {
	return &Feeds{cfg: cfg, clients: map[schema.GroupVersion]*rest.RESTClient{}}
}

// New is a feed of r in namespace ns ("" for all), selected by sel, into
// sink.
func (fs *Feeds) New(r kubeclient.Resource, ns, sel string, sink kubeclient.Sink) (*kubeclient.Feed, error) {
	var api kubeclient.API
	switch {
	case fs.cfg.APIs != nil:
		var err error
		if api, err = fs.cfg.APIs(r, ns, sel); err != nil {
			return nil, fmt.Errorf("source: %s: %w", r.Name, err)
		}
	case fs.cfg.API != nil:
		c, ok := fs.clients[r.Version]
		if !ok {
			var err error
			if c, err = kubeclient.Client(fs.cfg.API, r); err != nil {
				return nil, fmt.Errorf("source: %s: %w", r.Name, err)
			}
			fs.clients[r.Version] = c
		}
		api = kubeclient.RESTAPI(c, r, ns, sel)
	default:
		return nil, fmt.Errorf("source: %s: no API configuration", r.Name)
	}
	f := kubeclient.NewFeed(strings.Join([]string{r.Name, cmp.Or(ns, "all namespaces"), sel}, " "), api, sink)
	if fs.cfg.Counters != nil {
		f.Counters = fs.cfg.Counters(r.Name)
	}
	return f, nil
}

// addFeed adds a feed of r in ns selected by sel into sink.
func (s *Source) addFeed(feeds *Feeds, r kubeclient.Resource, ns, sel string, sink kubeclient.Sink) error {
	f, err := feeds.New(r, ns, sel, sink)
	if err != nil {
		return err
	}
	s.feeds = append(s.feeds, f)
	return nil
}
