package controller

import (
	"fmt"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/slicewriter"
	"github.com/globalmirror/globalmirror/source"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Plan is what the controller makes of one base, worked out from the index
// in one place: its sync writes it, and `globalmirror check` and `status`
// compare it with what the cluster holds, so that they cannot judge by a
// rule the controller does not follow.
type Plan struct {
	Key   source.Key
	Input aggregate.Input // what it was worked out from
	// Name is the global Service's name; Owner the Service the index holds
	// under it (nil: none), whose owner decides the Verdict.
	Name    string
	Owner   *corev1.Service
	Verdict aggregate.Verdict
	// View is the global's Service and slices, written for VerdictBuild.
	View aggregate.View
	// Local is the local service that opted into native names, nil where
	// none did (its native-name slices, if any are left, are deleted), and
	// Native what is written as its slices: the global's mirror endpoints.
	Local  *corev1.Service
	Native aggregate.View
}

// PlanOf works out the plan of base key from idx.
func PlanOf(idx *source.Source, key source.Key) Plan {
	in := idx.Input(key)
	name := aggregate.GlobalName(key.Base, in.Suffix)
	owner := idx.Service(key.Namespace, name)
	p := Plan{Key: key, Input: in, Name: name, Owner: owner, Verdict: aggregate.GlobalVerdict(in, owner), View: aggregate.Aggregate(in)}
	if aggregate.Native(in) {
		for _, m := range in.Members {
			if m.Local() {
				p.Local = m.Service
			}
		}
		p.Native = p.View.Mirrored()
	}
	return p
}

// Problems are what the controller reports of the base: its view's, for a
// global it writes or one it cannot (mirrors whose global name is
// invalid); none where the name is someone else's.
func (p Plan) Problems() []aggregate.Problem {
	switch {
	case p.Verdict == aggregate.VerdictBuild:
		return p.View.Problems
	case p.Verdict == aggregate.VerdictYield || p.Verdict == aggregate.VerdictConflict || !p.Input.HasMirror():
		return nil
	}
	return p.View.Problems
}

// Differences are how the cluster's objects differ from the plan: global
// are globalmirror's slices of the global Service, native those of the
// local service (native names).
func (p Plan) Differences(global, native []*discoveryv1.EndpointSlice) []slicewriter.Difference {
	var diffs []slicewriter.Difference
	add := func(kind, format string, args ...any) {
		diffs = append(diffs, slicewriter.Difference{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	switch p.Verdict {
	case aggregate.VerdictBuild:
		if p.Owner == nil {
			add("service", "no Service %s", p.Name)
			break
		}
		if serviceDiffers(p.Owner, desiredService(p.View)) {
			add(slicewriter.DiffPorts, "the Service's ports or labels are not its members'")
		}
		diffs = append(diffs, slicewriter.Differences(p.Owner, p.View, global)...)
	case aggregate.VerdictRemove:
		add("removal", "no headless mirror of %s is left, yet the global Service remains", p.Key.Base)
	case aggregate.VerdictNone:
		if len(global) > 0 {
			add("removal", "%d EndpointSlices of a removed global remain", len(global))
		}
	}
	switch {
	case p.Local != nil:
		for _, d := range slicewriter.Differences(p.Local, p.Native, native) {
			add(d.Kind, "native names: %s", d.Detail)
		}
	case len(native) > 0:
		add("native names", "%d native-name EndpointSlices of %s remain, though it no longer opts in", len(native), p.Key.Base)
	}
	return diffs
}
