package controller

import (
	"log/slog"
	"maps"
	"sync"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/metrics"
	"github.com/globalmirror/globalmirror/source"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// Event reasons besides aggregate's Problem reasons.
const (
	ReasonGlobalNameConflict = "GlobalNameConflict"
)

// reporter tells people about problems: events, log lines and counters. It
// reports a base's problems and name conflicts when they appear, not on every
// sync, so a steady state stays quiet.
type reporter struct {
	recorder record.EventRecorder
	metrics  *metrics.Metrics
	log      *slog.Logger
	// leading gates events on objects seen by feeds, which run on standbys
	// too: one replica should speak.
	leading func() bool

	mu        sync.Mutex
	reported  map[source.Key]map[aggregate.Problem]bool // problems last reported
	conflicts map[source.Key]types.UID                  // the conflicting Service reported
	drains    map[string]aggregate.Drain                // the drains last reported (source.Drains.Levels)
	// linksReadable and linksUnreadable: as last reported
	linksReadable   bool
	linksUnreadable string
}

func newReporter(rec record.EventRecorder, m *metrics.Metrics, log *slog.Logger, leading func() bool) *reporter {
	return &reporter{recorder: rec, metrics: m, log: log, leading: leading,
		reported: map[source.Key]map[aggregate.Problem]bool{}, conflicts: map[source.Key]types.UID{}}
}

// problems reports the problems of key that were not reported last time, with
// events on global when it is not nil.
func (r *reporter) problems(key source.Key, global *corev1.Service, current []aggregate.Problem) {
	now := map[aggregate.Problem]bool{}
	for _, p := range current {
		now[p] = true
	}
	r.mu.Lock()
	before := r.reported[key]
	if maps.Equal(before, now) {
		r.mu.Unlock()
		return
	}
	if len(now) == 0 {
		delete(r.reported, key)
	} else {
		r.reported[key] = now
	}
	r.mu.Unlock()
	for _, p := range current {
		if before[p] {
			continue
		}
		before = withKey(before, p) // a problem listed twice is reported once
		r.metrics.Problems.WithLabelValues(p.Reason).Inc()
		r.log.Warn("problem in members of a global service", "key", key.String(), "reason", p.Reason, "detail", p.Detail)
		if global != nil { // nil: no global to attach it to
			r.recorder.Event(global, corev1.EventTypeWarning, p.Reason, p.Detail)
		}
	}
}

func withKey(m map[aggregate.Problem]bool, p aggregate.Problem) map[aggregate.Problem]bool {
	if m == nil {
		m = map[aggregate.Problem]bool{}
	}
	m[p] = true
	return m
}

// forget drops what was reported for key, whose global is gone.
func (r *reporter) forget(key source.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.reported, key)
}

// conflict reports a user-owned Service owning the global name of key, once
// per such Service.
func (r *reporter) conflict(key source.Key, svc *corev1.Service) {
	r.mu.Lock()
	_, had := r.conflicts[key]
	seen := had && r.conflicts[key] == svc.UID
	r.conflicts[key] = svc.UID
	r.metrics.Conflicts.Set(float64(len(r.conflicts)))
	r.mu.Unlock()
	if seen {
		return
	}
	r.metrics.ConflictsTotal.Inc()
	msg := "a Service named " + svc.Name + " exists that globalmirror did not create; the global service of " +
		key.Base + " is not written while it exists"
	r.log.Warn("global name taken", "service", key.Namespace+"/"+svc.Name, "base", key.Base)
	r.recorder.Event(svc, corev1.EventTypeWarning, ReasonGlobalNameConflict, msg)
}

func (r *reporter) noConflict(key source.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.conflicts[key]; ok {
		delete(r.conflicts, key)
		r.metrics.Conflicts.Set(float64(len(r.conflicts)))
	}
}

// skipped reports an object source ignored as malformed.
func (r *reporter) skipped(obj metav1.Object, kind string, skip aggregate.Skip) {
	r.metrics.Skipped.WithLabelValues(kind, string(skip.Reason)).Inc()
	r.log.Warn("ignoring malformed object", "kind", kind, "object", obj.GetNamespace()+"/"+obj.GetName(), "reason", skip.Reason, "detail", skip.Detail)
	if ro, ok := obj.(runtime.Object); ok && r.leading() {
		r.recorder.Event(ro, corev1.EventTypeWarning, string(skip.Reason), "globalmirror ignores this "+kind+": "+skip.Detail)
	}
}

// drained sets the drain gauges to drains and logs each drain that began,
// ended or changed level since the last call, and the Links becoming
// readable or not.
func (r *reporter) drained(drains source.Drains) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := drains.Levels()
	for what, level := range now {
		if r.drains[what] != level {
			r.log.Info("drained", "what", what, "level", level.String())
		}
	}
	for what := range r.drains {
		if _, ok := now[what]; !ok {
			r.log.Info("undrained", "what", what)
		}
	}
	r.drains = now
	if r.linksReadable != drains.LinksReadable || r.linksUnreadable != drains.LinksUnreadable {
		if drains.LinksReadable {
			r.log.Info("Linkerd's Links are readable: their drains are honoured")
		} else {
			r.log.Warn("Linkerd's Links cannot be read: the cluster drains last read stay in force, no new one is seen", "reason", drains.LinksUnreadable, "kept", len(drains.Clusters))
		}
		r.linksReadable, r.linksUnreadable = drains.LinksReadable, drains.LinksUnreadable
	}
	r.metrics.LinksReadable.Set(0)
	if drains.LinksSeen() {
		r.metrics.LinksReadable.Set(1)
	}
	r.metrics.OldestDrain.Set(0)
	if oldest := drains.Oldest(); !oldest.IsZero() {
		r.metrics.OldestDrain.Set(float64(oldest.UnixMilli()) / 1000)
	}
	for _, l := range []aggregate.Drain{aggregate.DrainShared, aggregate.DrainAll} {
		clusters, services := drains.Count(l)
		r.metrics.Drained.WithLabelValues(l.String()).Set(float64(clusters))
		r.metrics.DrainedServices.WithLabelValues(l.String()).Set(float64(services))
	}
}
