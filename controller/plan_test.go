package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/fixture"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the controller wrote for a base is its plan: no differences, the
// global's and the native names' alike; an endpoint taken out of a slice
// behind its back is one, named by the side it is on.
func TestPlanIsWhatTheSyncWrites(t *testing.T) {
	east := mirror("db", "east")
	local := fixture.LocalService("ns", "db", pg)
	local.Annotations = map[string]string{aggregate.AnnotationIncludeMirrors: "true"}
	e := start(t, east, memberSlice(east, "db-0", "192.0.2.10"), local, memberSlice(local, "db-0", "192.0.2.1"))
	ctx := context.Background()
	ours := func() (global, native []*discoveryv1.EndpointSlice, err error) {
		list, err := e.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, err
		}
		for i := range list.Items {
			switch s := &list.Items[i]; {
			case !aggregate.WrittenByGlobalmirror(s.Labels):
			case s.Labels[discoveryv1.LabelServiceName] == "db-global":
				global = append(global, s)
			case s.Labels[discoveryv1.LabelServiceName] == "db":
				native = append(native, s)
			}
		}
		return global, native, nil
	}
	var global, native []*discoveryv1.EndpointSlice
	e.eventually("the plan written", func() error {
		var err error
		if global, native, err = ours(); err != nil {
			return err
		}
		p := PlanOf(e.ctrl.src, baseKey("db"))
		if p.Verdict != aggregate.VerdictBuild || p.Local == nil || len(global) == 0 || len(native) == 0 {
			return fmt.Errorf("verdict %v, local %v, %d global and %d native slices", p.Verdict, p.Local != nil, len(global), len(native))
		}
		if d := p.Differences(global, native); len(d) > 0 {
			return fmt.Errorf("differences: %v", d)
		}
		return nil
	})

	e.cancel() // nothing repairs what follows
	p := PlanOf(e.ctrl.src, baseKey("db"))
	edited := native[0].DeepCopy()
	edited.Endpoints = nil
	d := p.Differences(global, []*discoveryv1.EndpointSlice{edited})
	if len(d) == 0 {
		t.Error("a native slice emptied: no difference")
	}
	for _, x := range d {
		if !strings.HasPrefix(x.Detail, "native names: ") {
			t.Errorf("a native slice emptied: %v, not named native", x)
		}
	}
	if d := p.Differences(nil, native); len(d) == 0 {
		t.Error("no global slices: no difference")
	}
}
