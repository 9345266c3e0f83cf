package metrics

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// The adapters below use the metric names component-base gives these client-go
// hooks, so existing dashboards work; labels stay low-cardinality (queue name,
// lease name, HTTP verb and code, API server host).

// WorkqueueProvider returns a workqueue.MetricsProvider that registers in m's
// registry. Give it to a queue through its config (or workqueue.SetProvider).
func (m *Metrics) WorkqueueProvider() workqueue.MetricsProvider {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: name, Help: help}, []string{"name"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: name, Help: help}, []string{"name"})
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: name, Help: help,
			Buckets: m.histogramOpts.Buckets}, []string{"name"})
	}
	p := &workqueueProvider{
		depth:      gauge("depth", "Current depth of the workqueue."),
		adds:       counter("adds_total", "Adds handled by the workqueue."),
		latency:    histogram("queue_duration_seconds", "Time an item waits in the workqueue before being requested."),
		work:       histogram("work_duration_seconds", "Time processing an item from the workqueue takes."),
		unfinished: gauge("unfinished_work_seconds", "Seconds of work in progress not yet observed by work_duration."),
		longest:    gauge("longest_running_processor_seconds", "Seconds the longest running processor of the workqueue has been running."),
		retries:    counter("retries_total", "Retries handled by the workqueue."),
	}
	m.Registry.MustRegister(p.depth, p.adds, p.latency, p.work, p.unfinished, p.longest, p.retries)
	return p
}

type workqueueProvider struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

// The workqueue.MetricsProvider methods: each the series of queue name.
func (p *workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}
func (p *workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}
func (p *workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}
func (p *workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.work.WithLabelValues(name)
}
func (p *workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}
func (p *workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longest.WithLabelValues(name)
}
func (p *workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}

// RegisterLeaderElection makes client-go's leader election report into m's
// registry. client-go accepts one provider per process; later calls are ignored.
func (m *Metrics) RegisterLeaderElection() {
	p := &leaderProvider{
		status: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "leader_election_master_status",
			Help: "1 while this process holds the lease of that name, 0 otherwise."}, []string{"name"}),
		slowpath: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "leader_election_slowpath_total",
			Help: "Lease renewals that had to fall back to a full get-and-update."}, []string{"name"}),
	}
	m.Registry.MustRegister(p.status, p.slowpath)
	leaderelection.SetProvider(p)
}

type leaderProvider struct {
	status   *prometheus.GaugeVec
	slowpath *prometheus.CounterVec
}

func (p *leaderProvider) NewLeaderMetric() leaderelection.LeaderMetric { return p }
func (p *leaderProvider) On(name string)                               { p.status.WithLabelValues(name).Set(1) }
func (p *leaderProvider) Off(name string)                              { p.status.WithLabelValues(name).Set(0) }
func (p *leaderProvider) SlowpathExercised(name string)                { p.slowpath.WithLabelValues(name).Inc() }

// RegisterClientGo makes client-go's REST clients report request counts and
// latencies into m's registry. client-go accepts this once per process; call it
// before creating clients.
func (m *Metrics) RegisterClientGo() {
	c := &clientGoMetrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
			Help: "HTTP requests to the API server, by status code, method and host."}, []string{"code", "method", "host"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
			Help: "Request latency to the API server, by verb and host.", Buckets: m.histogramOpts.Buckets}, []string{"verb", "host"}),
		throttle: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_rate_limiter_duration_seconds",
			Help: "Time requests waited for the client-side rate limiter (--kube-api-qps), by verb and host.", Buckets: m.histogramOpts.Buckets}, []string{"verb", "host"}),
	}
	m.Registry.MustRegister(c.results, c.latency, c.throttle)
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:      resultAdapter{c.results},
		RequestLatency:     latencyAdapter{c.latency},
		RateLimiterLatency: latencyAdapter{c.throttle},
	})
}

type clientGoMetrics struct {
	results           *prometheus.CounterVec
	latency, throttle *prometheus.HistogramVec
}

type resultAdapter struct{ v *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.v.WithLabelValues(code, method, host).Inc()
}

type latencyAdapter struct{ v *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	a.v.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}
