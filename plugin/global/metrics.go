package global

import (
	"runtime"

	"github.com/coredns/coredns/plugin"
	"github.com/globalmirror/globalmirror/build"
	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics, registered with the default registry like CoreDNS's own plugins so
// the prometheus plugin exports them.
var (
	// requestsTotal counts the queries this plugin answered (not those it passed on).
	// buildInfo is always 1, labelled with the plugin's release: what
	// `globalmirror check` compares with its own and the controller's.
	buildInfo = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "build_info",
		Help:      "Always 1: the globalmirror release of the plugin (version) and the Go release it was built with (goversion).",
	}, []string{"version", "goversion"})

	requestsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "requests_total",
		Help:      "Counter of DNS requests answered by the global plugin, by server, query type (A, AAAA, SRV, PTR, other) and rcode.",
	}, []string{"server", "type", "rcode"})

	globalsGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "globals",
		Help:      "Number of global services the plugin answers for.",
	})

	endpointsGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "endpoints",
		Help:      "Number of ready endpoints of all global services the plugin answers for.",
	})

	programmingDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace:                   plugin.Namespace,
		Subsystem:                   "global",
		Name:                        "programming_duration_seconds",
		Help:                        "Time from a member EndpointSlice change (its last-change-trigger-time) to the new answers being served.",
		Buckets:                     []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
	})

	drainedGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "drained_clusters",
		Help:      "Number of linked clusters drained by the globalmirror.io/drain annotation of their Link, by level (shared, all).",
	}, []string{"level"})

	drainedServicesGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "drained_services",
		Help:      "Number of member services drained by their own globalmirror.io/drain annotation (a local service, or a headless mirror Linkerd copied it onto from the cluster under maintenance), by level (shared, all).",
	}, []string{"level"})

	linksReadableGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "links_readable",
		Help:      "1 while Linkerd's Links are read, or not served at all (no multicluster extension); 0 while they are served but cannot be read (forbidden, failing): the cluster drains last read then stay in force and no new one is seen.",
	})

	skippedTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "skipped_objects_total",
		Help:      "Counter of malformed objects (e.g. mirror Services without a cluster name) the plugin ignored, by kind and reason.",
	}, []string{"kind", "reason"})

	problemsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "problems_total",
		Help:      "Counter of problems found while aggregating global services (hostname collisions, invalid hostnames or addresses), by reason.",
	}, []string{"reason"})

	// feedMetrics are the index's feeds' (coredns_global_lists_total,
	// coredns_global_held_objects_total: objects sent current,
	// coredns_global_api_heard_timestamp_seconds).
	feedMetrics = kubeclient.NewFeedMetrics(prometheus.DefaultRegisterer, plugin.Namespace, "global")

	handoversTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "handovers_total",
		Help:      "Counter of global stanzas a reload handed over, by what became of the index: reused (the stanza's feeds unchanged: no list), built (a new one, complete before the old instance stopped) or incomplete (handover_timeout passed first).",
	}, []string{"index"})

	indexesGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "indexes",
		Help:      "Number of indexes (feeds and answer sets) the process holds: one per distinct set of feeds the loaded global stanzas ask for, two while a reload that changed them hands over.",
	})

	indexReferencesGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "index_references",
		Help:      "Number of global stanzas holding an index, those of an instance being set up by a reload included.",
	})

	rebuildsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "global",
		Name:      "rebuilds_total",
		Help:      "Counter of global service answer sets rebuilt after a change.",
	})
)

// typeLabel keeps the type label's cardinality low.
func typeLabel(qtype uint16) string {
	switch qtype {
	case dns.TypeA:
		return "A"
	case dns.TypeAAAA:
		return "AAAA"
	case dns.TypeSRV:
		return "SRV"
	case dns.TypePTR:
		return "PTR"
	}
	return "other"
}

func init() { buildInfo.WithLabelValues(build.Version, runtime.Version()).Set(1) }
