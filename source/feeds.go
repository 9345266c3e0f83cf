package source

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The resources the feeds read.
var (
	Services = kubeclient.Resource{Name: "services", Kind: "Service", Version: corev1.SchemeGroupVersion,
		New: func() runtime.Object { return &corev1.Service{} }}
	EndpointSlices = kubeclient.Resource{Name: "endpointslices", Kind: "EndpointSlice", Version: discoveryv1.SchemeGroupVersion,
		New: func() runtime.Object { return &discoveryv1.EndpointSlice{} }}
)

// NewFeed is a feed of r in namespace ns ("" for all), selected by sel,
// into sink, through cfg.APIs where it is set, else the API server's
// protobuf (cfg.API); counted where the process counts (cfg.Counters).
func NewFeed(cfg Config, r kubeclient.Resource, ns, sel string, sink kubeclient.Sink) (*kubeclient.Feed, error) {
	var api kubeclient.API
	switch {
	case cfg.APIs != nil:
		var err error
		if api, err = cfg.APIs(r, ns, sel); err != nil {
			return nil, fmt.Errorf("source: %s: %w", r.Name, err)
		}
	case cfg.API != nil:
		c, err := kubeclient.Client(cfg.API, r)
		if err != nil {
			return nil, fmt.Errorf("source: %s: %w", r.Name, err)
		}
		api = kubeclient.RESTAPI(c, r, ns, sel)
	default:
		return nil, fmt.Errorf("source: %s: no API configuration", r.Name)
	}
	f := kubeclient.NewFeed(strings.Join([]string{r.Name, cmp.Or(ns, "all namespaces"), sel}, " "), api, sink)
	if cfg.Counters != nil {
		f.Counters = cfg.Counters(r.Name)
	}
	return f, nil
}

// addFeed adds a feed of r in ns selected by sel into sink.
func (s *Source) addFeed(r kubeclient.Resource, ns, sel string, sink kubeclient.Sink) error {
	f, err := NewFeed(s.cfg, r, ns, sel, sink)
	if err != nil {
		return err
	}
	s.feeds = append(s.feeds, f)
	return nil
}
