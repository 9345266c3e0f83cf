package slicewriter

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// What a Difference is about.
const (
	DiffAddresses = "addresses"
	DiffHostnames = "hostnames"
	DiffReadiness = "readiness"
	DiffPorts     = "ports"
	DiffTopology  = "zones or nodes"
	DiffMetadata  = "labels or owner"
)

// Difference is one way the slices of a Service differ from what Reconcile
// writes for its view.
type Difference struct {
	// Kind is one of the Diff constants.
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// String is "kind: detail", as check prints it.
func (d Difference) String() string { return d.Kind + ": " + d.Detail }

// Differences compares the slices among existing that the writer owns with
// what Reconcile writes for view into the slices of svc: the same rule, so
// that a tool judging an installation judges by what the controller does.
// Empty when they have the same endpoints, each with the same hostname,
// readiness, zone, node and ports, under the labels and owner Reconcile
// writes; how the endpoints are spread over slices is not compared.
func Differences(svc *corev1.Service, view aggregate.View, existing []*discoveryv1.EndpointSlice) []Difference {
	existing = Owned(existing)
	type placed struct {
		e     *discoveryv1.Endpoint
		ports portsKey
	}
	want, got := map[string]placed{}, map[string]placed{}
	wantPorts, gotPorts := map[portsKey][]discoveryv1.EndpointPort{}, map[portsKey][]discoveryv1.EndpointPort{}
	for k, g := range desiredGroups(view.Endpoints) {
		wantPorts[k.ports] = g.ports
		for _, e := range g.order {
			for _, a := range e.Addresses {
				want[a] = placed{e, k.ports}
			}
		}
	}
	var diffs []Difference
	add := func(kind, format string, args ...any) {
		diffs = append(diffs, Difference{kind, fmt.Sprintf(format, args...)})
	}
	meta := newSliceMeta(svc, view.Base, view.TriggerTime)
	for _, s := range existing {
		k, ports := keyOf(s.AddressType, s.Ports)
		gotPorts[k.ports] = ports
		if !meta.matches(s) {
			add(DiffMetadata, "slice %s", s.Name)
		}
		for i := range s.Endpoints {
			for _, a := range s.Endpoints[i].Addresses {
				if _, dup := got[a]; dup {
					add(DiffAddresses, "%s twice", a)
				}
				got[a] = placed{&s.Endpoints[i], k.ports}
			}
		}
	}
	// With no slice at all, the missing addresses say it all.
	samePortSets := len(existing) == 0 || slices.Equal(slices.Sorted(maps.Keys(wantPorts)), slices.Sorted(maps.Keys(gotPorts)))
	if !samePortSets {
		add(DiffPorts, "%s, want %s", portSets(gotPorts), portSets(wantPorts))
	}
	var missing, extra []string
	for _, a := range slices.Sorted(maps.Keys(want)) {
		w, ok := got[a]
		if !ok {
			missing = append(missing, a)
			continue
		}
		d := want[a]
		switch {
		case ptr.Deref(d.e.Hostname, "") != ptr.Deref(w.e.Hostname, ""):
			add(DiffHostnames, "%s is %q, want %q", a, ptr.Deref(w.e.Hostname, ""), ptr.Deref(d.e.Hostname, ""))
		case !ptr.Equal(d.e.Conditions.Ready, w.e.Conditions.Ready):
			add(DiffReadiness, "%s ready %s, want %s", a, ptrString(w.e.Conditions.Ready), ptrString(d.e.Conditions.Ready))
		case d.ports != w.ports && samePortSets:
			add(DiffPorts, "%s has ports %s, want %s", a, portList(gotPorts[w.ports]), portList(wantPorts[d.ports]))
		case d.ports != w.ports: // named above, once
		case !sameEndpoint(d.e, w.e):
			add(DiffTopology, "%s", a)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[a]; !ok {
			extra = append(extra, a)
		}
	}
	if len(missing) > 0 {
		add(DiffAddresses, "missing %s", strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		add(DiffAddresses, "extra %s", strings.Join(extra, ", "))
	}
	return diffs
}

func ptrString(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}

func portSets(sets map[portsKey][]discoveryv1.EndpointPort) string {
	var out []string
	for _, ports := range sets {
		out = append(out, portList(ports))
	}
	slices.Sort(out)
	return "[" + strings.Join(out, " ") + "]"
}

func portList(ports []discoveryv1.EndpointPort) string {
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("%s:%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, corev1.ProtocolTCP)))
	}
	return "(" + strings.Join(out, ",") + ")"
}
