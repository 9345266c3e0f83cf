package source

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

// Linkerd's Link: one per linked cluster. Its drain annotation and its
// spec.targetClusterName (the cluster name Linkerd labels that Link's
// mirrors with) are read, fields every version Linkerd has shipped has; the
// version asked for is the group's preferred one.
const (
	LinkGroup    = "multicluster.linkerd.io"
	LinkResource = "links"
	LinkKind     = "Link"
)

// ClusterDrain is a cluster drained by the annotation on its Link.
type ClusterDrain struct {
	// Cluster is the Link's spec.targetClusterName, as Linkerd labels its
	// mirrors; the Link's name where the field is absent.
	Cluster string
	Level   aggregate.Drain
	// Since is when the annotation was last written, as the Link's managed
	// fields record it; else when this process first saw it.
	Since time.Time
	// Link is the Link's namespace/name.
	Link string
}

// ServiceDrain is a member service drained by its own annotation: a local
// service, or a headless mirror onto which Linkerd copied the annotation
// of the service it mirrors (a drain written in the cluster under
// maintenance).
type ServiceDrain struct {
	Service string // namespace/name
	Cluster string // the mirror's cluster; "" for a local service
	Level   aggregate.Drain
	// Since is when the annotation was last written, as the Service's
	// managed fields say when this process first saw it at this level;
	// else when it first saw it.
	Since time.Time
}

// Drains are the drains in force, as the index holds them.
type Drains struct {
	Clusters []ClusterDrain // by cluster
	Services []ServiceDrain // by service
	// LinksReadable is false while the Links cannot be read (not served,
	// forbidden, failing): the cluster drains last read are kept.
	LinksReadable bool
	// LinksUnreadable says why, where they are not readable.
	LinksUnreadable string
	// LinksNotServed: the API server serves no Link resource (Linkerd's
	// multicluster extension is not installed): nothing to read.
	LinksNotServed bool
	// InvalidLinks are the Links whose drain annotation is no level
	// ("namespace/name: value"): each keeps the drain it had before the
	// value was written, as this process saw it (none, for one started
	// since).
	InvalidLinks []string
}

// Oldest is the Since of the oldest drain in force, zero where none is.
func (d Drains) Oldest() time.Time {
	var oldest time.Time
	for _, c := range d.Clusters {
		if oldest.IsZero() || c.Since.Before(oldest) {
			oldest = c.Since
		}
	}
	for _, s := range d.Services {
		if oldest.IsZero() || s.Since.Before(oldest) {
			oldest = s.Since
		}
	}
	return oldest
}

// LinksSeen reports whether every drain written on a Link is seen: the
// Links are read, or not served at all (no multicluster extension, no Link
// to write one on). The halves' links_readable gauges.
func (d Drains) LinksSeen() bool { return d.LinksReadable || d.LinksNotServed }

// Count is how many clusters and services are drained at level.
func (d Drains) Count(level aggregate.Drain) (clusters, services int) {
	for _, c := range d.Clusters {
		if c.Level == level {
			clusters++
		}
	}
	for _, s := range d.Services {
		if s.Level == level {
			services++
		}
	}
	return clusters, services
}

// linkFeed lists and watches the Links into the source's drains.
// Unlike the Service and EndpointSlice feeds it keeps going where its
// resource is absent (Linkerd's CRD not installed, or not readable): it
// counts as synced, keeps the drains last read (none where it never read
// any: unreadable), and looks again every absentPoll, so a
// cluster without Linkerd's multicluster extension costs one discovery
// request a poll.
type linkFeed struct {
	s          *Source
	client     dynamic.Interface
	groups     func() (string, error) // the preferred version of LinkGroup; "" if it is not served
	absentPoll time.Duration

	synced    atomic.Bool
	notServed atomic.Bool            // the last look found the Link resource not served
	why       atomic.Pointer[string] // why the Links are not readable; nil while they are
	listed    bool                   // the Links were listed once: their drains are kept while they cannot be read
	version   string                 // the version of LinkGroup last listed
	links     map[nsName]linkState
}

// linkState is one Link's drain as last read.
type linkState struct {
	cluster string // LinkCluster
	invalid string // the annotation's value, where it is no level
	level   aggregate.Drain
	since   time.Time
	rv      string
}

// errLinksAbsent: no Link resource is served, or none may be read.
var errLinksAbsent = errors.New("no Link resource to read")

// DefaultLinksPoll is how often a source looks for Linkerd's Link resource
// while it is absent.
const DefaultLinksPoll = 30 * time.Second

func (l *linkFeed) run(ctx context.Context) {
	log := klog.FromContext(ctx).WithValues("feed", "links")
	retry := &wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 20, Cap: 30 * time.Second}
	var wasAbsent bool
	for ctx.Err() == nil {
		began := time.Now()
		err := l.listAndWatch(ctx)
		pause := time.Duration(0)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errLinksAbsent):
			kept := l.unreadable(err)
			if !wasAbsent && kept > 0 {
				log.Info("Linkerd's Link resource can no longer be read; keeping the drains last read until it can; looking again every poll", "reason", err, "drains", kept, "poll", l.absentPoll)
			} else if !wasAbsent {
				log.Info("No drains: Linkerd's Link resource is not there to read; looking again every poll", "reason", err, "poll", l.absentPoll)
			}
			wasAbsent = true
			pause = l.absentPoll
		case err != nil:
			log.Error(err, "Listing or watching Links failed")
			l.unreadableFor(err)
			pause = retry.Step()
		default:
			wasAbsent = false
			if time.Since(began) >= time.Minute {
				retry = &wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 20, Cap: 30 * time.Second}
			}
			pause = retry.Step() // a watch that ends at once must not make a loop of lists
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// unreadable marks the Links absent (not served, or not readable), synced,
// and returns how many drains it keeps. Where they were read before, the
// drains last read stay: a chart upgrade that rebinds the rights, or a CRD
// being replaced, must not send traffic back to a cluster under
// maintenance. Where they never were, there are none.
func (l *linkFeed) unreadable(why error) int {
	if !l.listed {
		l.replace(nil)
	}
	l.synced.Store(true)
	l.unreadableFor(why)
	kept := 0
	for _, st := range l.links {
		if st.level != aggregate.NotDrained {
			kept++
		}
	}
	return kept
}

// unreadableFor records why the Links are not readable and tells the
// handlers, where that is news.
func (l *linkFeed) unreadableFor(why error) {
	msg := why.Error()
	if old := l.why.Swap(&msg); old == nil || *old != msg {
		l.s.tellDrains()
	}
}

// listAndWatch lists the Links, replacing every drain, then applies their
// changes until the watch ends.
func (l *linkFeed) listAndWatch(ctx context.Context) error {
	version, err := l.groups()
	if err != nil {
		return fmt.Errorf("discovering %s: %w", LinkGroup, err)
	}
	l.notServed.Store(version == "")
	if version == "" {
		return fmt.Errorf("%w: the API server serves no %s", errLinksAbsent, LinkGroup)
	}
	l.version = version
	res := l.client.Resource(schema.GroupVersionResource{Group: LinkGroup, Version: version, Resource: LinkResource})
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return fmt.Errorf("%w: %w", errLinksAbsent, err)
		}
		return err
	}
	l.replace(list.Items)
	l.listed = true
	l.synced.Store(true)
	// replace told the handlers while the Links were not yet synced ("not
	// listed yet"): told again, they see them readable from this list on,
	// not only from the next Link change.
	l.why.Store(nil)
	l.s.tellDrains()
	w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			m, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			next := maps.Clone(l.links)
			if next == nil {
				next = map[nsName]linkState{}
			}
			id := nsName{m.GetNamespace(), m.GetName()}
			delete(next, id)
			if ev.Type != watch.Deleted {
				l.read(next, m)
			}
			l.set(next)
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		}
	}
	return nil
}

// replace sets the drains to those of links.
func (l *linkFeed) replace(links []unstructured.Unstructured) {
	next := make(map[nsName]linkState, len(links))
	for i := range links {
		l.read(next, &links[i])
	}
	l.set(next)
}

// read adds m's drain to links, if it is drained; an unknown value keeps
// the drain the Link had (a typo must not undrain a cluster under
// maintenance) and is reported once per version of the Link.
func (l *linkFeed) read(links map[nsName]linkState, m *unstructured.Unstructured) {
	id := nsName{m.GetNamespace(), m.GetName()}
	cluster := LinkCluster(m)
	level, since, err := LinkDrain(m)
	old, known := l.links[id]
	if err != nil {
		if !known || old.rv != m.GetResourceVersion() {
			l.s.skippedLink(m, aggregate.Skip{Reason: aggregate.SkipInvalidDrain, Detail: err.Error() + "; the Link's drain stays as it was"})
		}
		links[id] = linkState{cluster: cmp.Or(old.cluster, cluster), invalid: m.GetAnnotations()[aggregate.AnnotationDrain],
			level: old.level, since: old.since, rv: m.GetResourceVersion()} // remembered, so reported once
		return
	}
	if level == aggregate.NotDrained {
		return
	}
	if known && old.level == level && old.cluster == cluster && (since.IsZero() || !old.since.IsZero() && since.Equal(old.since)) {
		since = old.since
	}
	if since.IsZero() {
		since = time.Now()
	}
	links[id] = linkState{cluster: cluster, level: level, since: since, rv: m.GetResourceVersion()}
}

// LinkCluster is the cluster a Link's mirrors are labelled with (Linkerd's
// mirror.linkerd.io/cluster-name): its spec.targetClusterName, or its name
// where that is absent.
func LinkCluster(link *unstructured.Unstructured) string {
	name, _, _ := unstructured.NestedString(link.Object, "spec", "targetClusterName")
	return cmp.Or(name, link.GetName())
}

// LinkDrain is the drain a Link declares, and when its annotation was last
// written (zero where its managed fields do not say).
func LinkDrain(m metav1.Object) (aggregate.Drain, time.Time, error) {
	level, err := aggregate.ParseDrain(m.GetAnnotations()[aggregate.AnnotationDrain])
	if err != nil || level == aggregate.NotDrained {
		return aggregate.NotDrained, time.Time{}, err
	}
	return level, annotatedAt(m), nil
}

// annotatedAt is when the drain annotation was last written, as the managed
// fields of the manager that owns it say; zero where none does.
func annotatedAt(m metav1.Object) time.Time {
	field := []byte(`"f:` + aggregate.AnnotationDrain + `"`)
	for _, mf := range m.GetManagedFields() {
		if mf.Time != nil && mf.FieldsV1 != nil && bytes.Contains(mf.FieldsV1.GetRawBytes(), field) {
			return mf.Time.Time
		}
	}
	return time.Time{}
}

// set makes links the drains, and tells the handlers about every base with
// a member of a cluster whose drain changed.
func (l *linkFeed) set(links map[nsName]linkState) {
	l.links = links
	drains := map[string]ClusterDrain{}
	var invalid []string
	for id, st := range links {
		if st.invalid != "" {
			invalid = append(invalid, fmt.Sprintf("%s/%s: %q", id.namespace, id.name, st.invalid))
		}
		if st.level == aggregate.NotDrained {
			continue
		}
		// Two Links to one cluster (two multicluster installs, or two
		// names): the stronger drain holds.
		if d, ok := drains[st.cluster]; !ok || st.level > d.Level {
			drains[st.cluster] = ClusterDrain{Cluster: st.cluster, Level: st.level, Since: st.since, Link: id.namespace + "/" + id.name}
		}
	}
	slices.Sort(invalid)
	l.s.setDrains(drains, invalid)
}

// setDrains makes drains the clusters' drains and tells the handlers about
// the bases of every cluster whose level changed.
func (s *Source) setDrains(drains map[string]ClusterDrain, invalid []string) {
	s.write(func() []Key {
		s.invalidLinks = invalid
		var changed []string
		for c, d := range drains {
			if s.drains[c].Level != d.Level {
				changed = append(changed, c)
			}
		}
		for c := range s.drains {
			if _, ok := drains[c]; !ok {
				changed = append(changed, c)
			}
		}
		s.drains = drains
		s.levels = nil
		if len(drains) > 0 {
			s.levels = make(map[string]aggregate.Drain, len(drains))
			for c, d := range drains {
				s.levels[c] = d.Level
			}
		}
		s.drainsChanged = true
		return s.clusterKeys(changed)
	})
}

// tellDrains tells every DrainHandler the drains in force.
func (s *Source) tellDrains() {
	now := s.Drains()
	for _, h := range s.handlers {
		if d, ok := h.(DrainHandler); ok {
			d.Drained(now)
		}
	}
}

// DrainHandler is a Handler told the drains in force whenever they may have
// changed (a Link read, a drained service indexed or dropped, the Links
// becoming readable or not), for its metrics and logs.
type DrainHandler interface {
	Drained(Drains)
}

// clusterKeys are the bases with a headless mirror of one of clusters;
// called with the lock held.
func (s *Source) clusterKeys(clusters []string) []Key {
	if len(clusters) == 0 {
		return nil
	}
	var keys []Key
	s.bases.each(func(namespace, base string, cs []*indexedService) {
		for _, c := range cs {
			if c.memberBase != "" && slices.Contains(clusters, c.label(aggregate.LabelClusterName)) {
				keys = append(keys, Key{namespace, base})
				return
			}
		}
	})
	return keys
}

// Drains are the drains in force: the clusters drained by their Links, by
// cluster, and the member services drained by their own annotation.
func (s *Source) Drains() Drains {
	s.mu.RLock()
	out := Drains{Clusters: make([]ClusterDrain, 0, len(s.drains)), Services: make([]ServiceDrain, 0, len(s.serviceDrains)), LinksReadable: true,
		InvalidLinks: slices.Clone(s.invalidLinks)}
	for _, d := range s.drains {
		out.Clusters = append(out.Clusters, d)
	}
	for _, d := range s.serviceDrains {
		out.Services = append(out.Services, d)
	}
	s.mu.RUnlock()
	slices.SortFunc(out.Clusters, func(a, b ClusterDrain) int { return compare(a.Cluster, b.Cluster) })
	slices.SortFunc(out.Services, func(a, b ServiceDrain) int { return compare(a.Service, b.Service) })
	if s.links == nil {
		out.LinksReadable, out.LinksUnreadable = false, "no client for Links"
	} else if why := s.links.why.Load(); why != nil {
		out.LinksReadable, out.LinksUnreadable, out.LinksNotServed = false, *why, s.links.notServed.Load()
	} else if !s.links.synced.Load() {
		out.LinksReadable, out.LinksUnreadable = false, "not listed yet"
	}
	return out
}

// skippedLink reports a Link whose drain annotation is unknown.
func (s *Source) skippedLink(m *unstructured.Unstructured, skip aggregate.Skip) {
	for _, h := range s.handlers {
		h.Skipped(m, LinkKind, skip)
	}
}

// LinkRules are what reading the Links' drains needs, cluster-wide: a Link
// lives where Linkerd's multicluster extension is installed. Without them
// no cluster is drained and nothing else changes, so neither half's checks
// require them; the chart grants them to both.
func LinkRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{LinkGroup}, Resources: []string{LinkResource}, Verbs: []string{"list", "watch"}}}
}

// Levels are the drains in force by what they drain ("cluster east",
// "service ns/db-east"), for the halves' logs of what began, changed and
// ended.
func (d Drains) Levels() map[string]aggregate.Drain {
	out := make(map[string]aggregate.Drain, len(d.Clusters)+len(d.Services))
	for _, c := range d.Clusters {
		out["cluster "+c.Cluster+" (Link "+c.Link+")"] = c.Level
	}
	for _, s := range d.Services {
		out["service "+s.Service] = s.Level
	}
	return out
}
