package kubeclient

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// FeedMetrics are the metrics of a process's feeds, defined once for both
// halves: each registers them under its own namespace and subsystem
// (coredns_global_* in the plugin, globalmirror_* in the controller), so
// both export the same series. Every label has a small, fixed set of
// values.
type FeedMetrics struct {
	// Lists counts full lists ended, by resource and path.
	Lists *prometheus.CounterVec
	// Current counts objects sent at the version the sink already had
	// (current, so not decoded), by resource: the series
	// held_objects_total, named before the word "current" was chosen.
	Current *prometheus.CounterVec
	// Heard is when any of the process's feeds last heard from the API
	// server.
	Heard prometheus.Gauge
}

// NewFeedMetrics makes the feeds' metrics as namespace_subsystem_<name>
// and registers them with reg.
func NewFeedMetrics(reg prometheus.Registerer, namespace, subsystem string) *FeedMetrics {
	f := promauto.With(reg)
	return &FeedMetrics{
		Lists: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "lists_total",
			Help: "Full lists the index read, by resource (services, endpointslices) and path (streamed: a watch sending the list, where the API server offers one; paged): the first, and a relist after each watch whose version was gone.",
		}, []string{"resource", "path"}),
		Current: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "held_objects_total",
			Help: "Objects a list or watch sent at the version the index already had, which it therefore did not decode, by resource.",
		}, []string{"resource"}),
		Heard: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "api_heard_timestamp_seconds",
			Help: "When the index last heard from the Kubernetes API: a list ended, or a watch sent an event or a bookmark (about one a minute on a quiet watch); 0 before the first list.",
		}),
	}
}

// Counters are the counters of the feeds of resource (the lists_total and
// held_objects_total series of that resource; api_heard_timestamp_seconds
// is every feed's).
func (m *FeedMetrics) Counters(resource string) Counters {
	return Counters{
		Streamed: m.Lists.WithLabelValues(resource, string(Streamed)),
		Paged:    m.Lists.WithLabelValues(resource, string(Paged)),
		Current:  m.Current.WithLabelValues(resource),
		Heard:    m.Heard,
	}
}
