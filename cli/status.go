package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/slicewriter"
	"github.com/globalmirror/globalmirror/source"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GlobalStatus is one global service as both halves see it.
type GlobalStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Base      string `json:"base"`
	// Exists: a headless mirror of the base exists, so the global does.
	Exists bool `json:"exists"`
	// Verdict is what the controller does with the name
	// (aggregate.GlobalVerdict): write, remove, none, yield or conflict.
	Verdict   string         `json:"verdict"`
	Members   []MemberStatus `json:"members"`
	Endpoints []EndpointRow  `json:"endpoints"`
	Problems  []string       `json:"problems,omitempty"`
	// InSync: the Service and EndpointSlices are what the controller
	// writes for the verdict; Differences says what is not.
	InSync      bool                     `json:"inSync"`
	Differences []slicewriter.Difference `json:"differences,omitempty"`
	// LastChange is the newest write to any member's EndpointSlice, or to
	// an endpoint mirror's.
	LastChange time.Time `json:"lastChange"`
}

// MemberStatus is one member: the local service or a cluster's mirror.
type MemberStatus struct {
	Cluster   string `json:"cluster"` // empty: local
	Service   string `json:"service"`
	Endpoints int    `json:"endpoints"`
	Ready     int    `json:"ready"`
	// ReadyBy says what decided its endpoints' readiness: their own
	// condition, their endpoint mirrors, or the headless mirror.
	ReadyBy []string `json:"readyBy"`
	// Drained is its cluster's drain level (shared, all), "" for none.
	Drained string `json:"drained,omitempty"`
}

// EndpointRow is one endpoint of the global.
type EndpointRow struct {
	Member    string   `json:"member"` // "local" or the cluster
	Pod       string   `json:"pod"`    // the member endpoint's hostname
	Name      string   `json:"name"`   // the per-pod name; empty where it has none
	Addresses []string `json:"addresses"`
	Ready     bool     `json:"ready"`
	// Why says what decided Ready, and for a mirrored endpoint not ready
	// what that means.
	Why string `json:"why"`
}

// verdicts name aggregate's verdicts for an operator.
var verdicts = map[aggregate.Verdict]string{
	aggregate.VerdictNone: "none", aggregate.VerdictBuild: "write", aggregate.VerdictRemove: "remove",
	aggregate.VerdictYield: "yield", aggregate.VerdictConflict: "conflict",
}

// Status reads one global service, NAMESPACE/NAME (NAME its global name,
// or its base): the index of its namespace (one list of Services and one
// of EndpointSlices), and one more list of EndpointSlices for what the
// index does not keep (the controller's own slices, write times).
func Status(ctx context.Context, cl *Cluster, namespace, name string) (*GlobalStatus, error) {
	if cl.ControllerErr != nil {
		return nil, cl.ControllerErr
	}
	if cl.Controller == nil {
		return nil, errNoController
	}
	suffix := cl.Controller.Options.Suffix
	base, ok := aggregate.BaseOf(name, suffix)
	if !ok {
		base = name
	}
	ctx, stop := context.WithCancel(ctx) // the index's watches end with the status
	defer stop()
	idx, err := Index(ctx, cl, []string{namespace})
	if err != nil {
		return nil, err
	}
	l, err := cl.Client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return status(idx, source.Key{Namespace: namespace, Base: base}, l.Items), nil
}

func status(idx *source.Source, k source.Key, all []discoveryv1.EndpointSlice) *GlobalStatus {
	j := judge(idx, k, byService(all))
	in, v := j.Input, j.View
	st := &GlobalStatus{Namespace: k.Namespace, Name: j.Name, Base: k.Base, Exists: aggregate.Exists(in),
		Verdict: verdicts[j.Verdict], Differences: j.diffs}
	if j.Verdict == aggregate.VerdictConflict {
		st.Differences = append(st.Differences, slicewriter.Difference{Kind: "conflict", Detail: "a Service globalmirror did not create owns the name"})
	}
	st.InSync = len(st.Differences) == 0
	members := map[string]*MemberStatus{}
	for _, m := range in.Members {
		st.Members = append(st.Members, MemberStatus{Cluster: m.Cluster, Service: m.Service.Name})
	}
	for i := range st.Members {
		members[st.Members[i].Cluster] = &st.Members[i]
	}
	for _, p := range v.Problems {
		st.Problems = append(st.Problems, p.Reason+": "+p.Detail)
	}
	for _, e := range v.Endpoints {
		row := EndpointRow{Member: "local", Addresses: e.Addresses, Ready: e.Ready}
		if e.Cluster != "" {
			row.Member = e.Cluster
		}
		if e.Source != nil && e.Source.Hostname != nil {
			row.Pod = *e.Source.Hostname
		}
		if e.Hostname != "" {
			row.Name = e.Hostname + "." + st.Name + "." + k.Namespace + ".svc"
		}
		row.Why = why(e)
		st.Endpoints = append(st.Endpoints, row)
		if m := members[e.Cluster]; m != nil {
			m.Endpoints++
			if e.Ready {
				m.Ready++
			}
			if by := e.ReadyBy.String(); !slices.Contains(m.ReadyBy, by) {
				m.ReadyBy = append(m.ReadyBy, by)
			}
			m.Drained = e.Drained.String()
		}
	}
	st.LastChange = lastChange(in, all)
	return st
}

// why says what decided an endpoint's readiness.
func why(e aggregate.Endpoint) string {
	switch {
	case e.Drained == aggregate.DrainShared && e.NameReady:
		return "drained (shared): out of the shared names, its own names answering"
	case e.Drained == aggregate.DrainAll:
		return "drained (all): out of every name"
	case e.ReadyBy == aggregate.ByEndpointMirror && !e.Ready:
		return "its endpoint mirror " + e.Hostname + " is not ready: the pod, or the gateway of " + e.Cluster + " (Linkerd's probe)"
	case e.ReadyBy == aggregate.ByHeadlessMirror && !e.Ready:
		return "the headless mirror says not ready (no endpoint mirror)"
	case !e.Ready:
		return "the pod is not ready"
	case e.ReadyBy == aggregate.ByEndpointMirror && e.Source != nil && !aggregate.EndpointReady(e.Source):
		// Linkerd does not repair a headless mirror after a gateway outage.
		return "ready by its endpoint mirror (the headless mirror says not ready: Linkerd left it unrepaired)"
	}
	return "ready by " + e.ReadyBy.String()
}

// lastChange is the newest write to a member's or an endpoint mirror's
// EndpointSlice, from their managed fields.
func lastChange(in aggregate.Input, all []discoveryv1.EndpointSlice) time.Time {
	names := map[string]bool{}
	for _, m := range in.Members {
		names[m.Service.Name] = true
	}
	for host := range in.EndpointMirrors {
		names[host] = true
	}
	var last time.Time
	for _, s := range all {
		if !names[s.Labels[discoveryv1.LabelServiceName]] {
			continue
		}
		for _, f := range s.ManagedFields {
			if f.Time != nil && f.Time.After(last) {
				last = f.Time.Time
			}
		}
	}
	return last
}

// Write writes st as the command shows it.
func (st *GlobalStatus) Write(out io.Writer) {
	fmt.Fprintf(out, "%s.%s (base %s)", st.Name, st.Namespace, st.Base)
	if !st.Exists {
		fmt.Fprintf(out, ": does not exist (no headless mirror of %s)\n", st.Base)
		st.writeSync(out)
		return
	}
	ready := 0
	for _, e := range st.Endpoints {
		if e.Ready {
			ready++
		}
	}
	fmt.Fprintf(out, ": %d endpoints, %d ready\n\n", len(st.Endpoints), ready)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSERVICE\tENDPOINTS\tREADY\tREADY BY")
	for _, m := range st.Members {
		c := m.Cluster
		if c == "" {
			c = "local"
		}
		by := strings.Join(m.ReadyBy, ", ")
		if m.Drained != "" {
			by += "; drained (" + m.Drained + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", c, m.Service, m.Endpoints, m.Ready, by)
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tPOD\tNAME\tADDRESS\tREADY\tWHY")
	for _, e := range st.Endpoints {
		name := e.Name
		if name == "" {
			name = "(none)"
		}
		r := "no"
		if e.Ready {
			r = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Member, e.Pod, name, strings.Join(e.Addresses, ","), r, e.Why)
	}
	tw.Flush()
	fmt.Fprintln(out)
	for _, p := range st.Problems {
		fmt.Fprintln(out, "problem: "+p)
	}
	st.writeSync(out)
	if !st.LastChange.IsZero() {
		fmt.Fprintf(out, "last change: %s (%v ago)\n", st.LastChange.UTC().Format(time.RFC3339), time.Since(st.LastChange).Round(time.Second))
	}
}

func (st *GlobalStatus) writeSync(out io.Writer) {
	if st.InSync {
		fmt.Fprintf(out, "controller's objects: in sync (verdict %s)\n", st.Verdict)
		return
	}
	fmt.Fprintf(out, "controller's objects: out of sync (verdict %s):\n", st.Verdict)
	for _, d := range st.Differences {
		fmt.Fprintf(out, "  %s\n", d)
	}
}
