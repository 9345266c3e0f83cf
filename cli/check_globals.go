package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller"
	"github.com/globalmirror/globalmirror/controller/slicewriter"
	"github.com/globalmirror/globalmirror/source"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// globals is what the global services check and the name conflicts check
// found: every base judged by aggregate.GlobalVerdict, as the controller
// judges it.
type globals struct {
	err       error
	total     int
	stuck     []string
	kinds     map[string]bool
	conflicts []string
	// drains are the drains in force as the halves read them; annotated
	// (by namespace/service) every member service's drain annotation,
	// valid or not; clusters the clusters with a member mirror here.
	drains    source.Drains
	annotated map[string]string
	clusters  map[string]bool
	// probe is the global the DNS probe asks for; suffix the controller's.
	probe  *probeTarget
	suffix string
}

// readGlobals judges every base in the index of the namespaces the
// controller watches. A base whose objects differ from its verdict is
// judged again, twice, 2 s apart: a change may be on its way.
func readGlobals(ctx context.Context, cl *Cluster) globals {
	if cl.Controller == nil {
		return globals{err: errNoController}
	}
	ctx, stop := context.WithCancel(ctx) // the index's watches end with the check
	defer stop()
	idx, err := Index(ctx, cl, cl.Controller.Options.Namespaces)
	if err != nil {
		return globals{err: err}
	}
	var g globals
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return globals{err: ctx.Err()}
			case <-time.After(2 * time.Second):
			}
		}
		owned, err := ownedSlices(ctx, cl, cl.Controller.Options.Namespaces)
		if err != nil {
			return globals{err: err}
		}
		g = globals{kinds: map[string]bool{}, drains: idx.Drains(), annotated: map[string]string{}, clusters: map[string]bool{},
			suffix: cl.Controller.Options.Suffix}
		for _, k := range idx.Keys() {
			j := judge(idx, k, owned)
			for _, m := range j.Input.Members {
				if v := m.Service.Annotations[aggregate.AnnotationDrain]; v != "" {
					g.annotated[k.Namespace+"/"+m.Service.Name] = v
				}
				if !m.Local() {
					g.clusters[m.Cluster] = true
				}
			}
			if j.Verdict == aggregate.VerdictBuild {
				g.total++
				if t := probeTargetOf(j); t != nil && (g.probe == nil || t.namespace+"/"+t.name < g.probe.namespace+"/"+g.probe.name) {
					g.probe = t
				}
			}
			if j.Verdict == aggregate.VerdictConflict {
				g.conflicts = append(g.conflicts, fmt.Sprintf("%s/%s (owned by a Service globalmirror did not create; mirrors of %s exist)", k.Namespace, j.Name, k.Base))
			}
			if len(j.diffs) > 0 {
				var kinds []string
				for _, d := range j.diffs {
					g.kinds[d.Kind] = true
					kinds = append(kinds, d.String())
				}
				g.stuck = append(g.stuck, fmt.Sprintf("%s/%s: %s", k.Namespace, j.Name, strings.Join(kinds, "; ")))
			}
		}
		if len(g.stuck) == 0 {
			break
		}
	}
	slices.Sort(g.stuck)
	slices.Sort(g.conflicts)
	return g
}

var errNoController = errors.New("no controller: its flags say what a global is")

func checkSync(_ context.Context, c check, _ *Cluster, g globals) Result {
	if g.err != nil {
		return c.globalsFailure(g.err)
	}
	if len(g.stuck) > 0 {
		return c.result(Error, fmt.Sprintf("%d out of sync for 4 s: %s", len(g.stuck), strings.Join(g.stuck, ". ")),
			fmt.Sprintf("the controller has not written their %s: is it running and leading? read its log (sync failed) and globalmirror_syncs_total{result=\"error\"}; globalmirror status NAMESPACE/NAME shows one",
				strings.Join(slices.Sorted(maps.Keys(g.kinds)), ", ")))
	}
	return c.result(OK, fmt.Sprintf("%d global services, each with what its members give (addresses, hostnames, readiness, ports), none left to remove", g.total), "")
}

func checkConflicts(_ context.Context, c check, _ *Cluster, g globals) Result {
	if g.err != nil {
		return c.globalsFailure(g.err)
	}
	if len(g.conflicts) > 0 {
		return c.result(Error, "name conflicts: "+strings.Join(g.conflicts, ", "),
			"rename or delete the Service that owns the global name (globalmirror never touches a Service it did not create); until then the name answers from that Service, not from the mirrors")
	}
	return c.result(OK, "no Service of anyone else owns a global name", "")
}

// checkDrains lists every drain in force, as the halves read them: a
// warning, since a drain is meant to end; and says where it could not see
// (Links unreadable) or a drain reaches nothing (no mirror of its cluster).
func checkDrains(_ context.Context, c check, _ *Cluster, g globals) Result {
	now := time.Now()
	if g.err != nil {
		return c.globalsFailure(g.err)
	}
	ago := func(t time.Time) string {
		return fmt.Sprintf("since %s (%s ago)", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Minute))
	}
	var drained, unmatched []string
	for _, d := range g.drains.Clusters {
		drained = append(drained, fmt.Sprintf("cluster %s: %s %s, Link %s", d.Cluster, d.Level, ago(d.Since), d.Link))
		if !g.clusters[d.Cluster] {
			unmatched = append(unmatched, fmt.Sprintf("Link %s drains cluster %s, of which there is no headless mirror here (Linkerd labels a Link's mirrors with its spec.targetClusterName)", d.Link, d.Cluster))
		}
	}
	inForce := map[string]bool{}
	for _, d := range g.drains.Services {
		inForce[d.Service] = true
		if d.Cluster == "" {
			drained = append(drained, fmt.Sprintf("the local pods of %s: %s %s", d.Service, d.Level, ago(d.Since)))
		} else {
			drained = append(drained, fmt.Sprintf("%s's pods of mirror %s: %s %s (written in %s, copied by Linkerd)", d.Cluster, d.Service, d.Level, ago(d.Since), d.Cluster))
		}
	}
	for _, svc := range slices.Sorted(maps.Keys(g.annotated)) {
		if !inForce[svc] {
			drained = append(drained, fmt.Sprintf("%s: %q, an unknown level that drains nothing", svc, g.annotated[svc]))
		}
	}
	for _, l := range g.drains.InvalidLinks {
		drained = append(drained, "Link "+l+", an unknown level: each half keeps the drain the Link had before it was written (a process started since sees none); write shared or all, or undrain")
	}
	undo := "when the maintenance is over: globalmirror undrain CLUSTER (a Link's), globalmirror undrain --exported in the drained cluster (its services'), or --service NAMESPACE/NAME"
	switch {
	case !g.drains.LinksReadable && !g.drains.LinksNotServed:
		detail := "could not read Linkerd's Links (" + g.drains.LinksUnreadable + "), so the clusters drained by them are unknown here"
		if len(drained) > 0 {
			detail += "; " + strings.Join(drained, "; ")
		}
		return c.result(Warning, detail, "read with a user who may list and watch links.multicluster.linkerd.io, as both halves do (see their RBAC checks)")
	case len(unmatched) > 0:
		return c.result(Warning, strings.Join(append(unmatched, drained...), "; "), "drain the cluster by the name its mirrors carry (mirror.linkerd.io/cluster-name); "+undo)
	case len(drained) > 0:
		return c.result(Warning, strings.Join(drained, "; "), undo)
	case g.drains.LinksNotServed:
		return c.result(OK, "none: the API server serves no Linkerd Link (no multicluster extension), and no service is drained", "")
	}
	return c.result(OK, "none", "")
}

// globalsFailure is c's Error where the globals could not be read.
func (c check) globalsFailure(err error) Result {
	if errors.Is(err, errNoController) {
		return c.skipped("controller running")
	}
	return c.apiFailure("reading the mirrors and global services", err, "")
}

// judgement is one base's plan, and how its objects differ from it.
type judgement struct {
	controller.Plan
	diffs []slicewriter.Difference
}

// judge compares one base's global (and its native-name slices) with the
// plan the controller writes for it.
func judge(idx *source.Source, k source.Key, owned map[string][]*discoveryv1.EndpointSlice) judgement {
	p := controller.PlanOf(idx, k)
	return judgement{Plan: p, diffs: p.Differences(owned[k.Namespace+"/"+p.Name], owned[k.Namespace+"/"+k.Base])}
}

// ownedSlices lists, once, every EndpointSlice globalmirror wrote in the
// namespaces (empty: all), by namespace/service.
func ownedSlices(ctx context.Context, cl *Cluster, namespaces []string) (map[string][]*discoveryv1.EndpointSlice, error) {
	sel := discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy
	var all []discoveryv1.EndpointSlice
	for _, ns := range orAll(namespaces) {
		l, err := cl.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, err
		}
		all = append(all, l.Items...)
	}
	return byService(all), nil
}

// byService keeps the slices globalmirror wrote, by namespace/service.
func byService(items []discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	out := map[string][]*discoveryv1.EndpointSlice{}
	for i := range items {
		if s := &items[i]; slicewriter.Owns(s) {
			key := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
			out[key] = append(out[key], s)
		}
	}
	return out
}

// Index builds the index both halves build, of namespaces (empty: all),
// as the controller's flags say, with the UIDs the controller keeps (its
// slices' owner is its Service's UID). It follows the cluster until ctx is done,
// and fails when its first lists have not ended by then.
func Index(ctx context.Context, cl *Cluster, namespaces []string) (*source.Source, error) {
	o := cl.Controller.Options
	sel, err := aggregate.ParseLocalSelector(o.LocalSelector)
	if err != nil {
		return nil, err
	}
	// The Links too, as both halves read them: a drained endpoint is
	// written not ready.
	var links dynamic.Interface
	if cl.Config != nil {
		if links, err = dynamic.NewForConfig(cl.Config); err != nil {
			return nil, err
		}
	}
	src, err := source.New(source.Config{Client: cl.Client, API: cl.Config, Links: links, Namespaces: namespaces, Suffix: o.Suffix, LocalSelector: sel})
	if err != nil {
		return nil, err
	}
	// The feeds retry a list or a watch the API server refuses, without
	// end (and a list streams as a watch where the server can): ask first,
	// so that a refusal is reported as one, naming the verb.
	if err := mayRead(ctx, cl, namespaces); err != nil {
		return nil, err
	}
	src.Start(ctx)
	if !src.WaitForSync(ctx) {
		return nil, fmt.Errorf("listing the mirrors did not end: %w", ctx.Err())
	}
	return src, nil
}

func orAll(namespaces []string) []string {
	if len(namespaces) == 0 {
		return []string{metav1.NamespaceAll}
	}
	return namespaces
}
