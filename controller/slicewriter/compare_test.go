package slicewriter

import (
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// What Reconcile wrote has no differences from its view; each way the slices
// can fall behind their view (a stopped controller, a user's edit) is named
// by its kind, and only by it.
func TestDifferencesNameWhatReconcileWouldChange(t *testing.T) {
	h := newHarness(t, 2)
	v := view(append(many(3, tcp80), ep("2001:db8::1", "db-v6", true, tcp80))...)
	h.sync(v)
	if d := Differences(global, v, h.cache()); len(d) != 0 {
		t.Fatalf("slices just written differ from their view: %v", d)
	}
	first := func(s []*discoveryv1.EndpointSlice) *discoveryv1.Endpoint {
		for _, x := range s {
			if x.AddressType == discoveryv1.AddressTypeIPv4 {
				return &x.Endpoints[0]
			}
		}
		t.Fatal("no IPv4 slice")
		return nil
	}
	for _, tc := range []struct {
		name, kind, detail string
		view               func(aggregate.View) aggregate.View
		slices             func([]*discoveryv1.EndpointSlice)
		deleted            bool
	}{
		{name: "an endpoint added", kind: DiffAddresses, detail: "missing 192.0.2.9",
			view: func(v aggregate.View) aggregate.View {
				v.Endpoints = append(v.Endpoints, ep("192.0.2.9", "db-9", true, tcp80))
				return v
			}},
		{name: "an endpoint gone", kind: DiffAddresses, detail: "extra 2001:db8::1",
			view: func(v aggregate.View) aggregate.View { v.Endpoints = v.Endpoints[:3]; return v }},
		{name: "a hostname edited", kind: DiffHostnames, detail: `is "x", want "db-0"`,
			slices: func(s []*discoveryv1.EndpointSlice) { first(s).Hostname = new("x") }},
		{name: "a pod turned unready", kind: DiffReadiness, detail: "ready true, want false",
			view: func(v aggregate.View) aggregate.View { v.Endpoints[0].Ready = false; return v }},
		{name: "a port renumbered", kind: DiffPorts, detail: "https:443/TCP",
			view: func(v aggregate.View) aggregate.View {
				for i := range v.Endpoints {
					v.Endpoints[i].Ports = tcp443
				}
				return v
			}},
		{name: "a zone edited", kind: DiffTopology, detail: "192.0.2.1",
			slices: func(s []*discoveryv1.EndpointSlice) { first(s).Zone = new("elsewhere") }},
		{name: "a label removed", kind: DiffMetadata, detail: "slice ",
			slices: func(s []*discoveryv1.EndpointSlice) { delete(s[0].Labels, aggregate.LabelBase) }},
		{name: "every slice deleted", kind: DiffAddresses, detail: "missing 192.0.2.1, 192.0.2.2, 192.0.2.3, 2001:db8::1", deleted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, want := h.cache(), v
			if tc.deleted {
				got = nil
			}
			want.Endpoints = append([]aggregate.Endpoint(nil), v.Endpoints...)
			if tc.view != nil {
				want = tc.view(want)
			}
			if tc.slices != nil {
				tc.slices(got)
			}
			d := Differences(global, want, got)
			if len(d) != 1 || d[0].Kind != tc.kind || !strings.Contains(d[0].Detail, tc.detail) {
				t.Errorf("differences %v; want one, %s with %q", d, tc.kind, tc.detail)
			}
		})
	}
}
