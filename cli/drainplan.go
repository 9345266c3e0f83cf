package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/options"
	"github.com/globalmirror/globalmirror/source"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DrainChange is a drain about to be written, as the index sees it: a
// cluster's, by its Link, or member services' own (namespace/name).
type DrainChange struct {
	Cluster  string
	Services []string
	Level    aggregate.Drain // NotDrained: an undrain
}

// GlobalChange is what one global's shared names lose or regain by a drain
// change: the endpoints that leave (or return to) its A, AAAA and SRV
// answers and its ready EndpointSlice endpoints.
type GlobalChange struct {
	Global string `json:"global"` // namespace/name
	// Endpoints are the endpoints that leave or return: "db-0-east
	// 10.1.0.5", its per-pod name in the global (its cluster where it has
	// none) and its addresses.
	Endpoints []string `json:"endpoints"`
	// ReadyBefore and ReadyAfter count the endpoints its shared names
	// answer before and after.
	ReadyBefore int `json:"readyBefore"`
	ReadyAfter  int `json:"readyAfter"`
}

// Emptied reports whether the change leaves the global with no ready
// endpoint its shared names answer, where it had one.
func (g GlobalChange) Emptied() bool { return g.ReadyBefore > 0 && g.ReadyAfter == 0 }

// DrainPreview is what a drain change does to every global the index
// holds: the globals it changes, in name order.
type DrainPreview struct {
	Change  DrainChange    `json:"-"`
	Globals []GlobalChange `json:"globals"`
	// Left are the globals left with no ready endpoint (Emptied).
	Left []string `json:"leftWithNoReadyEndpoint"`
}

// Emptied are the globals the change leaves with no ready endpoint.
func (p *DrainPreview) Emptied() []string {
	var out []string
	for _, g := range p.Globals {
		if g.Emptied() {
			out = append(out, g.Global)
		}
	}
	return out
}

// PreviewDrain aggregates every global of idx as it is and as it would be
// after change, as both halves do, and returns those whose shared names
// change. From the drained cluster (--exported), its own view stands for
// every linking cluster's: each sees the same pods leave, beside the
// others' pods.
func PreviewDrain(idx *source.Source, change DrainChange) *DrainPreview {
	p := &DrainPreview{Change: change}
	for _, k := range idx.Keys() {
		in := idx.Input(k)
		if !aggregate.Exists(in) {
			continue
		}
		before := readyEndpoints(aggregate.Aggregate(in))
		after := readyEndpoints(aggregate.Aggregate(change.apply(in)))
		var moved []string
		for e := range before {
			if !after[e] {
				moved = append(moved, e)
			}
		}
		for e := range after {
			if !before[e] {
				moved = append(moved, e)
			}
		}
		if len(moved) == 0 {
			continue
		}
		slices.Sort(moved)
		p.Globals = append(p.Globals, GlobalChange{Global: k.Namespace + "/" + aggregate.GlobalName(k.Base, in.Suffix),
			Endpoints: moved, ReadyBefore: len(before), ReadyAfter: len(after)})
	}
	slices.SortFunc(p.Globals, func(a, b GlobalChange) int { return strings.Compare(a.Global, b.Global) })
	p.Left = p.Emptied()
	return p
}

// ResolveDrain is the change a drain of target to level makes, as the
// index sees it: the cluster its Link drains (FindLink), or the services.
func ResolveDrain(ctx context.Context, cl *Cluster, target DrainTarget, level aggregate.Drain) (DrainChange, error) {
	change := DrainChange{Level: level}
	switch {
	case target.Service != "":
		change.Services = []string{target.Service}
	case target.Exported:
		list, err := cl.Client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: aggregate.DefaultLocalSelector})
		if err != nil {
			return change, err
		}
		change.Services = exportedServices(list.Items)
	default:
		links, err := linkClient(cl.Client, cl.Config, target.LinkNamespace)
		if err != nil {
			return change, err
		}
		link, err := FindLink(ctx, links, target.Cluster)
		if err != nil {
			return change, fmt.Errorf("%w (in namespace %s)", err, target.LinkNamespace)
		}
		change.Cluster = source.LinkCluster(link)
	}
	return change, nil
}

// apply is in with the change made: the cluster's Link drain set (a
// service's own drain, where stronger, still holds), or the services'
// annotations set; in is not modified.
func (c DrainChange) apply(in aggregate.Input) aggregate.Input {
	if c.Cluster != "" {
		drains := maps.Clone(in.Drains)
		if drains == nil {
			drains = map[string]aggregate.Drain{}
		}
		drains[c.Cluster] = c.Level
		in.Drains = drains
	}
	if len(c.Services) > 0 {
		members := slices.Clone(in.Members)
		for i, m := range members {
			if m.Service == nil || !slices.Contains(c.Services, in.Namespace+"/"+m.Service.Name) {
				continue
			}
			svc := m.Service.DeepCopy()
			svc.Annotations = maps.Clone(svc.Annotations)
			if svc.Annotations == nil {
				svc.Annotations = map[string]string{}
			}
			delete(svc.Annotations, aggregate.AnnotationDrain)
			if c.Level != aggregate.NotDrained {
				svc.Annotations[aggregate.AnnotationDrain] = c.Level.String()
			}
			members[i].Service = svc
		}
		in.Members = members
	}
	return in
}

// readyEndpoints are the endpoints a view's shared names answer, each as
// "hostname address" (its per-pod name in the global), or "cluster
// address" where it has none (the local cluster as "local").
func readyEndpoints(v aggregate.View) map[string]bool {
	out := map[string]bool{}
	for _, e := range v.Endpoints {
		if !e.Ready {
			continue
		}
		name := cmp.Or(e.Hostname, e.Cluster, "local")
		out[name+" "+strings.Join(e.Addresses, ",")] = true
	}
	return out
}

// Write says what the preview found: each global's endpoints leaving (or
// returning), and those left with none.
func (p *DrainPreview) Write(w io.Writer) {
	verb := "leave"
	if p.Change.Level == aggregate.NotDrained {
		verb = "return to"
	}
	if len(p.Globals) == 0 {
		fmt.Fprintf(w, "No endpoint would %s any global's shared names.\n", verb)
		return
	}
	for _, g := range p.Globals {
		note := ""
		if g.Emptied() {
			note = " — none left ready"
		}
		fmt.Fprintf(w, "%s: %d endpoints %s its shared names (%d ready -> %d)%s: %s\n", g.Global, len(g.Endpoints), verb, g.ReadyBefore, g.ReadyAfter, note, strings.Join(g.Endpoints, ", "))
	}
}

// IndexFor is Index of the namespaces cl's controller watches, with its
// suffix and local selector; the chart's defaults where no controller was
// found (a drain from a cluster without one).
func IndexFor(ctx context.Context, cl *Cluster) (*source.Source, error) {
	if cl.Controller == nil {
		c := *cl
		c.Controller = &Controller{Options: options.Default()}
		cl = &c
	}
	return Index(ctx, cl, cl.Controller.Options.Namespaces)
}

// exportedServices are the local member services DrainExported annotates:
// each headless Service with Linkerd's export label, neither Linkerd's
// mirror nor globalmirror's.
func exportedServices(items []corev1.Service) []string {
	var out []string
	for _, svc := range items {
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Labels[aggregate.LabelMirroredService] == "true" || aggregate.WrittenByGlobalmirror(svc.Labels) {
			continue
		}
		out = append(out, svc.Namespace+"/"+svc.Name)
	}
	return out
}

// PreviewOf is what a drain of target to level does to every global the
// controller writes, read with the user's own rights (an index of its own,
// stopped once read).
func PreviewOf(ctx context.Context, cl *Cluster, target DrainTarget, level aggregate.Drain) (*DrainPreview, error) {
	change, err := ResolveDrain(ctx, cl, target, level)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	idx, err := IndexFor(ctx, cl)
	if err != nil {
		return nil, err
	}
	return PreviewDrain(idx, change), nil
}
