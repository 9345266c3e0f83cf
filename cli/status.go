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
	Exists    bool           `json:"exists"`
	Members   []MemberStatus `json:"members"`
	Endpoints []EndpointRow  `json:"endpoints"`
	Problems  []string       `json:"problems,omitempty"`
	// InSync: the controller's EndpointSlices hold the ready addresses the
	// members give, no more; Missing and Extra say what differs.
	InSync         bool     `json:"inSync"`
	Missing, Extra []string `json:",omitempty"`
	// LastChange is the newest write to any member's EndpointSlice, or to
	// an endpoint mirror's.
	LastChange time.Time `json:"lastChange"`
}

// MemberStatus is one member: the local service or a cluster's mirror.
type MemberStatus struct {
	Cluster string `json:"cluster"` // empty: local
	Service string `json:"service"`
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

// Status reads one global service, NAMESPACE/NAME (NAME its global name,
// or its base).
func Status(ctx context.Context, cl *Cluster, namespace, name string) (*GlobalStatus, error) {
	if cl.Controller == nil {
		return nil, fmt.Errorf("no globalmirror controller found: its flags say what a global is")
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
	return status(ctx, cl, idx, source.Key{Namespace: namespace, Base: base})
}

func status(ctx context.Context, cl *Cluster, idx *source.Source, k source.Key) (*GlobalStatus, error) {
	in := idx.Input(k)
	v := aggregate.Aggregate(in)
	st := &GlobalStatus{Namespace: k.Namespace, Name: aggregate.GlobalName(k.Base, in.Suffix), Base: k.Base, Exists: aggregate.Exists(in)}
	for _, m := range in.Members {
		st.Members = append(st.Members, MemberStatus{Cluster: m.Cluster, Service: m.Service.Name})
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
	}
	missing, extra, err := compareSlices(ctx, cl, v)
	if err != nil {
		return nil, err
	}
	st.Missing, st.Extra, st.InSync = missing, extra, len(missing)+len(extra) == 0
	st.LastChange, err = lastChange(ctx, cl, in)
	return st, err
}

// why says what decided an endpoint's readiness.
func why(e aggregate.Endpoint) string {
	switch {
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
func lastChange(ctx context.Context, cl *Cluster, in aggregate.Input) (time.Time, error) {
	var last time.Time
	names := []string{}
	for _, m := range in.Members {
		names = append(names, m.Service.Name)
	}
	for host := range in.EndpointMirrors {
		names = append(names, host)
	}
	for _, n := range names {
		l, err := cl.Client.DiscoveryV1().EndpointSlices(in.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + n})
		if err != nil {
			return last, err
		}
		for _, s := range l.Items {
			for _, f := range s.ManagedFields {
				if f.Time != nil && f.Time.After(last) {
					last = f.Time.Time
				}
			}
		}
	}
	return last, nil
}

// Write writes st as the command shows it.
func (st *GlobalStatus) Write(out io.Writer) {
	fmt.Fprintf(out, "%s.%s (base %s)", st.Name, st.Namespace, st.Base)
	if !st.Exists {
		fmt.Fprintf(out, ": does not exist (no headless mirror of %s)\n", st.Base)
		return
	}
	ready := 0
	for _, e := range st.Endpoints {
		if e.Ready {
			ready++
		}
	}
	var members []string
	for _, m := range st.Members {
		if m.Cluster == "" {
			members = append(members, "local "+m.Service)
		} else {
			members = append(members, m.Cluster+" "+m.Service)
		}
	}
	fmt.Fprintf(out, ": %d endpoints, %d ready; members: %s\n\n", len(st.Endpoints), ready, strings.Join(members, ", "))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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
	if st.InSync {
		fmt.Fprintf(out, "controller's EndpointSlices: in sync (%d ready addresses)\n", countReady(st))
	} else {
		fmt.Fprintf(out, "controller's EndpointSlices: out of sync: missing %v, extra %v\n", st.Missing, st.Extra)
	}
	if !st.LastChange.IsZero() {
		fmt.Fprintf(out, "last change: %s (%v ago)\n", st.LastChange.UTC().Format(time.RFC3339), time.Since(st.LastChange).Round(time.Second))
	}
}

func countReady(st *GlobalStatus) int {
	n := 0
	for _, e := range st.Endpoints {
		if e.Ready {
			n += len(e.Addresses)
		}
	}
	return n
}

// WriteResults writes check results as the command shows them: ✔ or ✘,
// the check, what was found, and for a failure what to do.
func WriteResults(out io.Writer, rs []Result) {
	for _, r := range rs {
		mark := "✔"
		if !r.OK {
			mark = "✘"
		}
		fmt.Fprintf(out, "%s %s: %s\n", mark, r.Check, r.Detail)
		if !r.OK && r.Hint != "" {
			fmt.Fprintf(out, "    hint: %s\n", r.Hint)
		}
	}
}

// Failed reports whether any check failed.
func Failed(rs []Result) bool {
	return slices.ContainsFunc(rs, func(r Result) bool { return !r.OK })
}
