package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/controller/options"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/mirrorsim"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// testDrain: east, mirrored by the simulator with its Link, drained at
// each level and undrained, its gateway failing and recovering while it is
// drained at the shared level. The shared name loses east's pods and gets
// them back; their own names answer throughout but while the gateway is
// dead (a drained pod is a pod not ready: gateway readiness holds); the
// controller's slices follow (globalmirror status in sync), and the stock
// plugin over them agrees on the shared name.
func testDrain(t *testing.T, env *localkube.Env) {
	// Links first: the simulator, started by the first link, installs
	// Linkerd's Link CRD and writes east's Link.
	w := newWorldIn(t, env.Cluster("source"), "drain")
	w.east, w.Links = env.Cluster("east"), true
	w.Link(w.east)
	ctx := t.Context()
	local := w.Workload(w.Source, "db", 1, "192.0.2.96/27")
	remote := w.Workload(w.east, "db", 2, "198.51.100.192/26")
	w.startController()
	w.startCoreDNS(linkerdCorefile)
	db, pod0 := w.FQDN("db-global"), "db-0-east."+w.FQDN("db-global")
	everyone := dnsq.NoError(w.PodIP(local, 0), w.ClusterIP("db-0-east"), w.ClusterIP("db-1-east"))
	localOnly := dnsq.NoError(w.PodIP(local, 0))
	w.await("db-global", w.global, db, dns.TypeA, everyone)
	w.await("db-global from the controller's objects", w.kube, db, dns.TypeA, everyone)

	drain := func(level aggregate.Drain) time.Time {
		t.Helper()
		d, err := cli.Drain(ctx, w.Source.Client, w.Source.Config, cli.DrainTarget{Cluster: "east", LinkNamespace: cli.DefaultLinkNamespace}, level)
		if err != nil || !d.Written {
			t.Fatalf("drain %v: %+v, %v", level, d, err)
		}
		return time.Now()
	}
	// Shared: out of the shared name, in by its own.
	at := drain(aggregate.DrainShared)
	w.await("db-global, east drained (shared)", w.global, db, dns.TypeA, localOnly)
	t.Logf("drain shared: the plugin answered without east %v after the write", time.Since(at).Round(time.Millisecond))
	w.await("db-global from the controller's objects, east drained (shared)", w.kube, db, dns.TypeA, localOnly)
	t.Logf("drain shared: the controller's slices without east %v after the write", time.Since(at).Round(time.Millisecond))
	w.await("db-0-east, drained (shared)", w.global, pod0, dns.TypeA, dnsq.NoError(w.ClusterIP("db-0-east")))
	w.expectStatus(map[string]string{"db-0": "ready", "db-0-east": "drained (shared)", "db-1-east": "drained (shared)"})

	// The gateway fails and recovers while east is drained: its pods' own
	// names go and come back, the shared name stays without them.
	if err := w.Sim.SetGatewayAlive("east", false); err != nil {
		t.Fatal(err)
	}
	w.await("db-0-east, drained, gateway down", w.global, pod0, dns.TypeA, "NXDOMAIN +soa")
	w.expectStatus(map[string]string{"db-0": "ready", "db-0-east": "gateway of east", "db-1-east": "gateway of east"})
	if err := w.Sim.SetGatewayAlive("east", true); err != nil {
		t.Fatal(err)
	}
	w.await("db-0-east, drained, gateway back", w.global, pod0, dns.TypeA, dnsq.NoError(w.ClusterIP("db-0-east")))
	if got := dnsq.Answer("udp", w.global, db, dns.TypeA); got != localOnly {
		t.Errorf("db-global, drained, gateway back: %q, want %q", got, localOnly)
	}

	// All: out of every name; nothing deleted.
	drain(aggregate.DrainAll)
	w.await("db-0-east, drained (all)", w.global, pod0, dns.TypeA, "NXDOMAIN +soa")
	w.expectStatus(map[string]string{"db-0": "ready", "db-0-east": "drained (all)", "db-1-east": "drained (all)"})
	w.await("db-east, Linkerd's own mirror, drained (all)", w.global, w.FQDN("db-east"), dns.TypeA,
		dnsq.NoError(w.ClusterIP("db-0-east"), w.ClusterIP("db-1-east")))

	// A typo on the Link (true) keeps the drain it had, in both halves: a
	// maintenance is not ended by a wrong value.
	links := dynamic.NewForConfigOrDie(w.Source.Config).Resource(mirrorsim.LinkResource).Namespace(mirrorsim.LinkNamespace)
	if _, err := links.Patch(ctx, "east", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+aggregate.AnnotationDrain+`":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // what the halves would need to undrain, were they to
	for _, server := range []string{w.global, w.kube} {
		if got := dnsq.Answer("udp", server, db, dns.TypeA); got != localOnly {
			t.Errorf("db-global after a typo on east's Link, from %s: %q, want %q (east still drained)", server, got, localOnly)
		}
	}
	// An index read afresh (check's) cannot know the drain before the
	// typo: it names the Link, for check to say so.
	idxCtx, stop := context.WithCancel(ctx)
	idx, err := cli.Index(idxCtx, &cli.Cluster{Client: w.Source.Client, Config: w.Source.Config, Controller: &cli.Controller{Options: options.Default()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := idx.Drains().InvalidLinks; !slices.Equal(got, []string{`linkerd-multicluster/east: "true"`}) {
		t.Errorf("a fresh index's invalid Links: %q", got)
	}
	stop()

	// Undrained: back in every name, in both halves.
	at = drain(aggregate.NotDrained)
	w.await("db-global, undrained", w.global, db, dns.TypeA, everyone)
	t.Logf("undrain: the plugin answered with east %v after the write", time.Since(at).Round(time.Millisecond))
	w.await("db-global from the controller's objects, undrained", w.kube, db, dns.TypeA, everyone)
	w.expectStatus(map[string]string{"db-0": "ready", "db-0-east": "ready by its endpoint mirror", "db-1-east": "ready by its endpoint mirror"})
	qs := w.questions("db-global", "db-0", "db-0-east", "db-1-east")
	if diff := mapDiff(w.answers(w.kube, qs), w.answers(w.global, qs)); diff != "" {
		t.Errorf("undrained, the stock plugin over the controller's slices (-) and the global plugin (+) differ:\n%s", diff)
	}

	// Linkerd's gateway in db-east (east's Service annotated, as Argo CD
	// does), and a CoreDNS started while it is there: it never saw east's
	// pods named and answers them from their endpoint mirrors. A drain
	// takes them out of the shared names of both views and an undrain puts
	// them back, as for pods Linkerd wrote.
	if err := remote.Annotate(ctx, "argocd.argoproj.io/tracking-id", "drain:/Service:drain/db"); err != nil {
		t.Fatal(err)
	}
	w.Eventually("Linkerd's gateway alone in db-east", func(ctx context.Context) string {
		return scenario.GatewayAlone(ctx, w.Source.Client, w.NS, "db-east")
	})
	w.dns.Stop()
	w.startCoreDNS(clustersetCorefile)
	cs, cs0 := "db."+w.NS+".svc.clusterset.local.", "db-0.east.db."+w.NS+".svc.clusterset.local."
	eastPod0 := dnsq.NoError(w.ClusterIP("db-0-east"))
	for _, step := range []struct {
		what  string
		level *aggregate.Drain // nil: as it is
		want  string
	}{
		{"started during Linkerd's rewrite", nil, everyone},
		{"drained (shared)", new(aggregate.DrainShared), localOnly},
		{"undrained", new(aggregate.NotDrained), everyone},
	} {
		if step.level != nil {
			drain(*step.level)
		}
		w.await("db-global, "+step.what, w.global, db, dns.TypeA, step.want)
		w.await("the clusterset name, "+step.what, w.global, cs, dns.TypeA, step.want)
		w.await("db-0-east, "+step.what, w.global, pod0, dns.TypeA, eastPod0)
		w.await("db-0.east in the clusterset, "+step.what, w.global, cs0, dns.TypeA, eastPod0)
	}
}

// clustersetCorefile is linkerdCorefile with the clusterset view.
var clustersetCorefile = strings.Replace(linkerdCorefile, "        ttl 1\n", "        ttl 1\n        clusterset home\n", 1)
