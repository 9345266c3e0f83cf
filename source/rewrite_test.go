package source

import (
	"fmt"
	"slices"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// hosts renders a base's view as "host addr ready" lines, for comparison.
func hosts(s *Source, base string) []string {
	var out []string
	for _, e := range aggregate.Aggregate(s.Input(Key{"ns", base})).Endpoints {
		r := "ready"
		if !e.Ready {
			r = "not-ready"
		}
		out = append(out, e.Hostname+" "+e.Addresses[0]+" "+r)
	}
	return out
}

// Linkerd rewrites a headless mirror's Endpoints to its gateway on an update
// of the exported Service, in place (the mirroring controller updates the
// same slice), and back to the pods on the next remote Endpoints event.
func TestGatewayRewriteIsHeldUntilLinkerdWritesThePodsAgain(t *testing.T) {
	db := fixture.HeadlessMirror("ns", "db", "east")
	pods := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "db-0", "10.96.0.10", "db-1", "10.96.0.11")
	pods.ResourceVersion = "10"
	em0 := epSlice("db-0-east-x", "db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), true, "", "192.0.2.254")
	em1 := epSlice("db-1-east-x", "db-1-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), true, "", "192.0.2.254")
	s := indexOf(db, pods, em0, em1)
	want := []string{"db-0-east 10.96.0.10 ready", "db-1-east 10.96.0.11 ready"}
	if got := hosts(s, "db"); !slices.Equal(got, want) {
		t.Fatalf("before: %q, want %q", got, want)
	}
	mirrorSink := s.slices[0]

	gateway := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "", "192.0.2.254")
	gateway.ResourceVersion = "11"
	mirrorSink.Upsert(gateway)
	if got := hosts(s, "db"); !slices.Equal(got, want) || s.Held() != 1 {
		t.Errorf("rewritten to the gateway: %q (%d held), want %q, held", got, s.Held(), want)
	}
	// The gateway dies meanwhile: Linkerd marks the endpoint mirrors, and
	// writes a Service update's gateway not ready.
	deadGateway := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), false, "", "192.0.2.254")
	deadGateway.ResourceVersion = "12"
	mirrorSink.Upsert(deadGateway)
	em1Dead := epSlice("db-1-east-x", "db-1-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), false, "", "192.0.2.254")
	em1Dead.ResourceVersion = "13"
	mirrorSink.Upsert(em1Dead)
	if got, want := hosts(s, "db"), []string{"db-0-east 10.96.0.10 ready", "db-1-east 10.96.0.11 not-ready"}; !slices.Equal(got, want) {
		t.Errorf("held, a gateway down: %q, want %q", got, want)
	}
	// A relist of the same objects changes nothing.
	relist(s, db, deadGateway, em0, em1Dead)
	if got, want := hosts(s, "db"), []string{"db-0-east 10.96.0.10 ready", "db-1-east 10.96.0.11 not-ready"}; !slices.Equal(got, want) || s.Held() != 1 {
		t.Errorf("held, relisted: %q (%d held), want %q", got, s.Held(), want)
	}

	// The next remote Endpoints event: Linkerd writes the pods it has now.
	repaired := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "db-0", "10.96.0.10")
	repaired.ResourceVersion = "14"
	mirrorSink.Upsert(repaired)
	if got, want := hosts(s, "db"), []string{"db-0-east 10.96.0.10 ready"}; !slices.Equal(got, want) || s.Held() != 0 {
		t.Errorf("written again: %q (%d held), want %q, nothing held", got, s.Held(), want)
	}

	// An index that never saw the pods named holds nothing: the gateway
	// is dropped, never answered as a member.
	cold := indexOf(db, deadGateway, em0)
	if got := hosts(cold, "db"); len(got) != 0 || cold.Held() != 0 {
		t.Errorf("started during a rewrite: %q (%d held), want nothing", got, cold.Held())
	}
	// Nor does a ClusterIP mirror's gateway, whose service was never named.
	if s.holdBefore("ns", "api-east", s.intern.stripSlice(gateway, "api-east", "-global")); s.Held() != 0 {
		t.Error("a slice never named was held")
	}
	// The rewrite's slice was the only one: its deletion ends the hold too.
	gateway.ResourceVersion = "15"
	mirrorSink.Upsert(gateway)
	if s.Held() != 1 {
		t.Fatalf("rewritten again: %d held", s.Held())
	}
	mirrorSink.Delete(gateway)
	if got := hosts(s, "db"); len(got) != 0 || s.Held() != 0 {
		t.Errorf("the slice deleted: %q (%d held), want nothing", got, s.Held())
	}
}

// A process that starts while Linkerd's gateway is in a headless mirror
// never saw its pods named: it rebuilds them from the endpoint mirrors.
func TestGatewayRewriteSeenColdIsRebuiltFromTheEndpointMirrors(t *testing.T) {
	emLabels := fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east")
	db := fixture.HeadlessMirror("ns", "db", "east")
	db.Spec.Ports = []corev1.ServicePort{
		{Name: "db", Port: 5432, TargetPort: intstr.FromInt32(15432), Protocol: corev1.ProtocolTCP},
		{Name: "metrics", Port: 9187, Protocol: corev1.ProtocolTCP},
	}
	src, client, _ := start(t,
		db,
		epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "", "192.0.2.254"),
		service("db-0-east", emLabels, "10.96.0.10"),
		service("db-1-east", emLabels, "10.96.0.11"),
		service("db-0-west", fixture.MirrorLabels("west", aggregate.LabelHeadlessMirrorName, "db-west"), "10.96.0.12"),
		epSlice("db-0-east-x", "db-0-east", emLabels, true, "", "192.0.2.254"),
		epSlice("db-1-east-x", "db-1-east", emLabels, false, "", "192.0.2.254"),
	)
	want := []string{"db-0-east 10.96.0.10 ready", "db-1-east 10.96.0.11 not-ready"}
	eventually(t, "db rebuilt from its endpoint mirrors", func() bool { return slices.Equal(hosts(src, "db"), want) })
	if src.Held() != 1 {
		t.Errorf("%d held, want db-east", src.Held())
	}
	// The pods' ports: a target port that names a number, else the Service's.
	var ports []string
	for _, p := range aggregate.Aggregate(src.Input(Key{"ns", "db"})).Endpoints[0].Ports {
		ports = append(ports, fmt.Sprintf("%s/%d", *p.Name, *p.Port))
	}
	if want := []string{"db/15432", "metrics/9187"}; !slices.Equal(ports, want) {
		t.Errorf("rebuilt ports %v, want %v", ports, want)
	}
	// Meanwhile the remote pods change, and Linkerd's gateway stays (the
	// mirroring controller mirrored its last write alone): db-1's endpoint
	// mirror goes, and it leaves at once; db-2's comes, and the view is
	// rebuilt with it.
	if err := client.CoreV1().Services("ns").Delete(t.Context(), "db-1-east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.DiscoveryV1().EndpointSlices("ns").Delete(t.Context(), "db-1-east-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "db-1-east gone with its endpoint mirror", func() bool {
		return slices.Equal(hosts(src, "db"), []string{"db-0-east 10.96.0.10 ready"})
	})
	create(t, client, service("db-2-east", emLabels, "10.96.0.12"))
	create(t, client, epSlice("db-2-east-x", "db-2-east", emLabels, true, "", "192.0.2.254"))
	eventually(t, "db-2-east with its endpoint mirror", func() bool {
		return slices.Equal(hosts(src, "db"), []string{"db-0-east 10.96.0.10 ready", "db-2-east 10.96.0.12 ready"})
	})

	// Linkerd writes the pods again: the live slices answer.
	repaired := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "db-0", "10.96.0.10")
	repaired.ResourceVersion = "99"
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(t.Context(), repaired, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "db written again", func() bool {
		return slices.Equal(hosts(src, "db"), []string{"db-0-east 10.96.0.10 ready"}) && src.Held() == 0
	})
}

// A pod Linkerd wrote while its exported Service was updated, whose named
// slice the mirroring controller skipped (it mirrored the gateway that
// followed alone), is not in the held view; its endpoint mirror, which came
// before the hold, makes the index rebuild the view at once.
func TestAHoldMissingAnEndpointMirrorIsRebuilt(t *testing.T) {
	emLabels := fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east")
	src, client, _ := start(t,
		fixture.HeadlessMirror("ns", "db", "east"),
		epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "db-0", "10.96.0.10"),
		service("db-0-east", emLabels, "10.96.0.10"),
		epSlice("db-0-east-x", "db-0-east", emLabels, true, "", "192.0.2.254"),
	)
	eventually(t, "db-0-east", func() bool { return slices.Equal(hosts(src, "db"), []string{"db-0-east 10.96.0.10 ready"}) })
	create(t, client, service("db-1-east", emLabels, "10.96.0.11"))
	create(t, client, epSlice("db-1-east-x", "db-1-east", emLabels, true, "", "192.0.2.254"))
	gateway := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "", "192.0.2.254")
	gateway.ResourceVersion = "99"
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(t.Context(), gateway, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "db-1-east rebuilt into the held view", func() bool {
		return slices.Equal(hosts(src, "db"), []string{"db-0-east 10.96.0.10 ready", "db-1-east 10.96.0.11 ready"}) && src.Held() == 1
	})
}

// A headless mirror with an endpoint without a hostname and no endpoint
// mirror (what Linkerd never writes: a hand-made or hostile mirror) answers
// its named endpoints, whichever order its slices come in: nothing held
// stands for a pod.
func TestAMirrorWithoutEndpointMirrorsAnswersItsNamedEndpoints(t *testing.T) {
	db := fixture.HeadlessMirror("ns", "db", "east")
	named := epSlice("db-east-a", "db-east", fixture.MirrorLabels("east"), true, "db-0", "10.96.0.10")
	mixed := epSlice("db-east-b", "db-east", fixture.MirrorLabels("east"), true, "db-1", "10.96.0.11")
	mixed.Endpoints = append(mixed.Endpoints, epSlice("x", "db-east", nil, true, "", "10.96.0.12").Endpoints...)
	want := []string{"db-0-east 10.96.0.10 ready", "db-1-east 10.96.0.11 ready"}
	for _, order := range [][]runtime.Object{{db, named, mixed}, {db, mixed, named}} {
		s := indexOf(order...) // its API server holds no endpoint mirror
		if s.rebuilds.Len() != 1 {
			t.Fatalf("%d rebuilds queued, want db-east's", s.rebuilds.Len())
		}
		if err := s.rebuild(t.Context(), nsName{"ns", "db-east"}); err != nil {
			t.Fatal(err)
		}
		if got := hosts(s, "db"); !slices.Equal(got, want) {
			t.Errorf("slices %s then %s: %q, want %q", order[1].(*discoveryv1.EndpointSlice).Name, order[2].(*discoveryv1.EndpointSlice).Name, got, want)
		}
	}
}

// While a headless mirror is held, its endpoint mirror Services say which
// pods Linkerd mirrors: one deleted (its slices not yet collected) takes
// its pod out, one created (its slices not yet mirrored) brings its pod in.
func TestAHeldMirrorFollowsItsEndpointMirrorServices(t *testing.T) {
	emLabels := fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east")
	src, client, _ := start(t,
		fixture.HeadlessMirror("ns", "db", "east"),
		epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "db-0", "10.96.0.10", "db-1", "10.96.0.11"),
		service("db-0-east", emLabels, "10.96.0.10"),
		service("db-1-east", emLabels, "10.96.0.11"),
		epSlice("db-0-east-x", "db-0-east", emLabels, true, "", "192.0.2.254"),
		epSlice("db-1-east-x", "db-1-east", emLabels, true, "", "192.0.2.254"),
	)
	both := []string{"db-0-east 10.96.0.10 ready", "db-1-east 10.96.0.11 ready"}
	eventually(t, "both pods", func() bool { return slices.Equal(hosts(src, "db"), both) })
	gateway := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "", "192.0.2.254")
	gateway.ResourceVersion = "99"
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(t.Context(), gateway, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "held", func() bool { return src.Held() == 1 && slices.Equal(hosts(src, "db"), both) })

	if err := client.CoreV1().Services("ns").Delete(t.Context(), "db-1-east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "db-1-east gone with its endpoint mirror Service, its slice still there", func() bool {
		return slices.Equal(hosts(src, "db"), []string{"db-0-east 10.96.0.10 ready"})
	})
	create(t, client, service("db-2-east", emLabels, "10.96.0.12"))
	eventually(t, "db-2-east in with its endpoint mirror Service, no slice of it yet", func() bool {
		return slices.Equal(hosts(src, "db"), []string{"db-0-east 10.96.0.10 ready", "db-2-east 10.96.0.12 ready"})
	})
}
