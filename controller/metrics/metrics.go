// Package metrics has the controller's Prometheus registry: its own
// globalmirror_* metrics and small adapters that feed client-go's workqueue,
// leader-election and REST client metrics into the same registry, without
// pulling in component-base. Every label has a small, fixed set of values.
package metrics

import (
	"runtime"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/build"
	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const namespace = "globalmirror"

// Sync results, the values of the result label of Syncs.
const (
	ResultSuccess  = "success"
	ResultError    = "error"
	ResultStale    = "stale"    // the slice cache was behind our own writes; retried
	ResultConflict = "conflict" // a user-owned Service owns the global name
)

// Metrics is the controller's instrumentation. The zero value is not usable;
// call New.
type Metrics struct {
	Registry *prometheus.Registry

	Syncs           *prometheus.CounterVec   // {result}
	SyncDuration    prometheus.Histogram     //
	Globals         prometheus.Gauge         // global Services managed now
	Endpoints       prometheus.Gauge         // endpoints written into global slices now
	APIWrites       *prometheus.CounterVec   // {resource,verb}
	Conflicts       prometheus.Gauge         // bases blocked by a user-owned Service now
	ConflictsTotal  prometheus.Counter       // conflicts seen appearing
	Problems        *prometheus.CounterVec   // {reason}
	Skipped         *prometheus.CounterVec   // {kind,reason}
	Drained         *prometheus.GaugeVec     // {level}: clusters drained now, by their Links
	DrainedServices *prometheus.GaugeVec     // {level}: member services drained now, by their own annotation
	LinksReadable   prometheus.Gauge         // 1 while Linkerd's Links are read
	OldestDrain     prometheus.Gauge         // when the oldest drain in force began; 0 for none
	Feeds           *kubeclient.FeedMetrics  // the index's feeds'
	histogramOpts   prometheus.HistogramOpts // template for the adapters' latency histograms
}

// New creates the metrics and registers them, with the Go and process
// collectors, in a fresh registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Syncs: counterVec("syncs_total",
			"Syncs of one base service, by result (success, error, stale, conflict).", "result"),
		SyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "sync_duration_seconds",
			Help:    "Time to sync one base service, API writes included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		Globals:   gauge("globals", "Global Services this controller manages as leader (0 on a standby)."),
		Endpoints: gauge("endpoints", "Endpoints written into the EndpointSlices of the managed global Services."),
		APIWrites: counterVec("api_writes_total",
			"Write requests sent for global objects, by resource (services, endpointslices) and verb (create, update, delete).", "resource", "verb"),
		Conflicts: gauge("name_conflicts", "Bases whose global name is owned by a Service globalmirror did not create."),
		ConflictsTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "name_conflicts_total",
			Help: "Name conflicts seen appearing."}),
		Problems: counterVec("problems_total",
			"Problems found in the members of a base (collisions, invalid hostnames, invalid addresses), counted when first seen.", "reason"),
		Skipped: counterVec("skipped_objects_total", "Malformed objects ignored, by kind and reason.", "kind", "reason"),
		Drained: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "drained_clusters",
			Help: "Linked clusters drained by the globalmirror.io/drain annotation of their Link, by level (shared, all)."}, []string{"level"}),
		DrainedServices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "drained_services",
			Help: "Member services drained by their own globalmirror.io/drain annotation (a local service, or a headless mirror Linkerd copied it onto from the cluster under maintenance), by level (shared, all)."}, []string{"level"}),
		LinksReadable: gauge("links_readable",
			"1 while Linkerd's Links are read, or not served at all (no multicluster extension); 0 while they are served but cannot be read (forbidden, failing): the cluster drains last read then stay in force and no new one is seen."),
		OldestDrain: gauge("oldest_drain_timestamp_seconds",
			"When the oldest drain in force (a Link's or a service's) was declared (the annotation's managed fields), in Unix seconds; 0 while none is."),
		histogramOpts: prometheus.HistogramOpts{Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)},
	}
	// Every result and reason from zero, so that an alert on their
	// increase sees the first one (a series that appears at 1 has not
	// increased).
	for _, r := range []string{ResultSuccess, ResultError, ResultStale, ResultConflict} {
		m.Syncs.WithLabelValues(r)
	}
	for _, r := range []aggregate.SkipReason{aggregate.SkipMissingClusterName, aggregate.SkipInvalidClusterName,
		aggregate.SkipInvalidRemoteName, aggregate.SkipUnknownBase} {
		m.Skipped.WithLabelValues("Service", string(r))
	}
	m.Skipped.WithLabelValues("Link", string(aggregate.SkipInvalidDrain))
	for _, l := range []aggregate.Drain{aggregate.DrainShared, aggregate.DrainAll} {
		m.Drained.WithLabelValues(l.String())
		m.DrainedServices.WithLabelValues(l.String())
	}
	// Always 1, labelled with the controller's release: what `globalmirror
	// check` compares with its own and the plugin's.
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "build_info",
		Help: "Always 1: the globalmirror release of the controller (version) and the Go release it was built with (goversion)."},
		[]string{"version", "goversion"})
	buildInfo.WithLabelValues(build.Version, runtime.Version()).Set(1)
	m.Registry.MustRegister(
		buildInfo,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.Syncs, m.SyncDuration, m.Globals, m.Endpoints, m.APIWrites,
		m.Conflicts, m.ConflictsTotal, m.Problems, m.Skipped, m.Drained, m.DrainedServices, m.LinksReadable, m.OldestDrain,
	)
	m.Feeds = kubeclient.NewFeedMetrics(m.Registry, namespace, "")
	return m
}

// gauge is the gauge globalmirror_<name>.
func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
}

// counterVec is the counter globalmirror_<name>, by labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

// Write counts one write request.
func (m *Metrics) Write(resource, verb string) { m.APIWrites.WithLabelValues(resource, verb).Inc() }
