package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/controller/options"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// These tests follow behaviours of Linkerd's real service mirror (reproduced
// by mirrorsim) that once made globalmirror answer wrong: a global kept in
// DNS by the controller's leftovers while the controller was down, and a
// headless mirror Linkerd never repairs after a gateway outage.

// linkerdCorefile serves the production order (global, then kubernetes) and,
// on KUBE_PORT, the stock kubernetes plugin alone: what a cluster without the
// global plugin answers from the controller's and Linkerd's objects.
var linkerdCorefile = run.Corefile(run.GlobalStanza+run.KubernetesStanza) + run.Server("KUBE_PORT", run.KubernetesStanza)

// world is one namespace of a source cluster with other clusters linked
// into it, its controller and its CoreDNS.
type world struct {
	*scenario.T
	t            *testing.T
	east         *localkube.Cluster // nil in the mesh
	ctrl         *run.Controller
	dns          *run.CoreDNS
	global, kube string // DNS addresses: production order, stock plugin alone
	// drainedShared is a cluster drained at the shared level, and mayDiffer
	// the names (lower case) everyQuestion found the two plugins may answer
	// differently for while it is (drainedDifferences).
	drainedShared string
	mayDiffer     map[string]bool
}

// newWorld is the test's world in namespace ns of source, with east linked
// in. The namespaces are short: longer names would truncate some UDP answers.
func newWorld(t *testing.T, env *localkube.Env, ns string) *world {
	t.Helper()
	w := newWorldIn(t, env.Cluster("source"), ns, env.Cluster("east"))
	w.east = env.Cluster("east")
	return w
}

// newWorldIn is the test's world in namespace ns of source, with the
// clusters in link linked in.
func newWorldIn(t *testing.T, source *localkube.Cluster, ns string, link ...*localkube.Cluster) *world {
	t.Helper()
	w := &world{t: t, T: scenario.NewIn(t, source, ns, link...)}
	w.Interval = 5 * time.Millisecond
	return w
}

func (w *world) startController() {
	w.t.Helper()
	w.ctrl = w.StartController("--leader-elect=false")
}

// startCoreDNS runs CoreDNS with a Corefile serving the production order
// on DNS_PORT and the stock kubernetes plugin alone on KUBE_PORT.
func (w *world) startCoreDNS(corefile string) {
	w.t.Helper()
	c := w.StartCoreDNS(corefile, "KUBE_PORT")
	w.dns, w.global, w.kube = c, c.Addr, c.PortAddr("KUBE_PORT")
}

// await polls addr until name/qtype answers want over UDP, then over TCP,
// and returns how long the UDP answer took.
func (w *world) await(what, addr, name string, qtype uint16, want string) time.Duration {
	w.t.Helper()
	took, err := scenario.AwaitBoth(w.t.Context(), addr, name, qtype, want, w.Timeout, w.Interval)
	if err != nil {
		w.t.Fatalf("%s: %v", what, err)
	}
	return took
}

// questions are every name a global's clients ask: the service (every type
// the plugin answers, and one it has no records of), the named port's SRV,
// and each per-pod name.
func (w *world) questions(global string, hosts ...string) []question {
	g := w.FQDN(global)
	qs := []question{{name: g, qtype: dns.TypeA}, {name: g, qtype: dns.TypeAAAA}, {name: g, qtype: dns.TypeSRV},
		{name: g, qtype: dns.TypeTXT}, {name: "_db._tcp." + g, qtype: dns.TypeSRV}}
	for _, h := range hosts {
		qs = append(qs, question{name: h + "." + g, qtype: dns.TypeA}, question{name: h + "." + g, qtype: dns.TypeSRV})
	}
	return qs
}

// answers asks every question of addr over UDP and TCP and renders each
// answer (normalize). An error names addr, so that it never equals another
// server's answer.
func (w *world) answers(addr string, qs []question) map[string]string {
	out := map[string]string{}
	for _, q := range qs {
		for _, network := range []string{"udp", "tcp"} {
			r, err := dnsq.Ask(network, addr, q.name, q.qtype, 0)
			got := fmt.Sprintf("error from %s: %v", addr, err)
			if err == nil {
				got = normalize(r)
			}
			out[network+" "+dns.TypeToString[q.qtype]+" "+q.name] = got
		}
	}
	return out
}

// expectNXDOMAIN checks that the plugin answers every question NXDOMAIN with
// the SOA, over UDP and TCP.
func (w *world) expectNXDOMAIN(when string, qs []question) {
	w.t.Helper()
	for _, q := range qs {
		for _, network := range []string{"udp", "tcp"} {
			if got := dnsq.Answer(network, w.global, q.name, q.qtype); got != "NXDOMAIN +soa" {
				w.t.Errorf("%s, %s %s %s: %q, want NXDOMAIN with the SOA", when, network, dns.TypeToString[q.qtype], q.name, got)
			}
		}
	}
}

func TestLinkerdBehaviours(t *testing.T) {
	env := localkube.StartT(t, "source", "east", "west")
	t.Run("UnexportWhileControllerDown", func(t *testing.T) { testUnexportWhileControllerDown(t, env) })
	t.Run("GatewayOutageHeals", func(t *testing.T) { testGatewayOutageHeals(t, env) })
	t.Run("ReverseAndClustersetViews", func(t *testing.T) { testViews(t, env) })
	t.Run("NativeNames", func(t *testing.T) { testNativeNames(t, env) })
	t.Run("BootstrapBeforeReady", func(t *testing.T) { testBootstrapBeforeReady(t, env) })
	// Last: its Link to east stays in the source cluster, shared by every world.
	t.Run("Drain", func(t *testing.T) { testDrain(t, env) })
}

// testUnexportWhileControllerDown: with the controller stopped, a service is
// unexported and Linkerd deletes its mirrors. The global plugin answers
// NXDOMAIN for every name of its global at once, although the controller's
// global Service and slices are still there (the stock plugin keeps serving
// them). Deleting the controller's objects, or starting it again, changes
// no answer of the plugin.
func testUnexportWhileControllerDown(t *testing.T, env *localkube.Env) {
	w := newWorld(t, env, "unexport")
	ctx := t.Context()
	localKafka := w.Workload(w.Source, "kafka", 2, "192.0.2.0/27")
	w.Workload(w.east, "kafka", 3, "198.51.100.0/26")
	w.Workload(w.east, "db", 2, "198.51.100.64/26")
	w.startController()
	w.startCoreDNS(linkerdCorefile)

	kafka := dnsq.NoError(w.PodIP(localKafka, 0), w.PodIP(localKafka, 1),
		w.ClusterIP("kafka-0-east"), w.ClusterIP("kafka-1-east"), w.ClusterIP("kafka-2-east"))
	w.await("kafka-global from the plugin", w.global, w.FQDN("kafka-global"), dns.TypeA, kafka)
	w.await("kafka-global from the controller's objects", w.kube, w.FQDN("kafka-global"), dns.TypeA, kafka)
	db := dnsq.NoError(w.ClusterIP("db-0-east"), w.ClusterIP("db-1-east"))
	w.await("db-global from the controller's objects", w.kube, w.FQDN("db-global"), dns.TypeA, db)
	kafkaNames := w.questions("kafka-global", "kafka-0", "kafka-1", "kafka-0-east", "kafka-1-east", "kafka-2-east")
	dbNames := w.questions("db-global", "db-0-east", "db-1-east")
	if got := dnsq.Answer("udp", w.global, w.FQDN("db-global"), dns.TypeA); got != db {
		t.Fatalf("db-global: %q, want %q", got, db)
	}
	dbBefore := w.answers(w.global, dbNames)

	w.ctrl.Stop()
	svcs := w.east.Client.CoreV1().Services(w.NS)
	remote, err := svcs.Get(ctx, "kafka", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(remote.Labels, aggregate.LabelExported)
	if _, err := svcs.Update(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := w.await("kafka-global once unexported", w.global, w.FQDN("kafka-global"), dns.TypeA, "NXDOMAIN +soa")
	t.Logf("unexported with the controller down: the plugin answered NXDOMAIN after %v", took.Round(time.Millisecond))
	// The stock plugin still serves the controller's leftovers: what the
	// plugin no longer hands its names to.
	if got := dnsq.Answer("udp", w.kube, w.FQDN("kafka-global"), dns.TypeA); got != kafka {
		t.Errorf("the stock plugin answers %q from the stopped controller's objects, want the stale %q", got, kafka)
	}
	w.expectNXDOMAIN("unexported", kafkaNames)

	// Deleting the controller's objects changes nothing the plugin answers.
	if err := w.Source.Client.CoreV1().Services(w.NS).Delete(ctx, "db-global", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.await("db-global's objects gone", w.kube, w.FQDN("db-global"), dns.TypeA, "NXDOMAIN +soa")
	if diff := mapDiff(dbBefore, w.answers(w.global, dbNames)); diff != "" {
		t.Errorf("deleting the controller's db-global changed the plugin's answers:\n%s", diff)
	}

	// Nor does the controller converging again: it deletes kafka-global and
	// re-creates db-global, and both servers agree with the plugin.
	w.startController()
	w.converge(ctx, "the controller converged again", map[string]int{"db-global": 2, "kafka-global": 0})
	if diff := mapDiff(dbBefore, w.answers(w.global, dbNames)); diff != "" {
		t.Errorf("the controller's return changed the plugin's db-global answers:\n%s", diff)
	}
	w.expectNXDOMAIN("after the controller converged", kafkaNames)
	if diff := mapDiff(w.answers(w.kube, append(kafkaNames, dbNames...)), w.answers(w.global, append(kafkaNames, dbNames...))); diff != "" {
		t.Errorf("converged, the stock plugin (-) and the global plugin (+) differ:\n%s", diff)
	}
}

// testGatewayOutageHeals: a pod mirrored while east's gateway is dead makes
// Linkerd write the headless mirror not ready, and the repair when the
// gateway returns skips headless mirrors (TestMirrorsim checks the
// simulator does both). db-global recovers as soon as the endpoint mirrors
// are repaired. The plugin's programming-latency metric sees these changes,
// which carry no trigger time, and nothing from its initial sync.
func testGatewayOutageHeals(t *testing.T, env *localkube.Env) {
	w := newWorld(t, env, "gateway")
	ctx := t.Context()
	local := w.Workload(w.Source, "db", 1, "192.0.2.32/27")
	east := w.Workload(w.east, "db", 3, "198.51.100.128/26")
	w.startController()
	// CoreDNS starts over a converged world (the simulator idle, the
	// controller's slices complete) whose local slice carries an old trigger
	// time: its initial sync must observe no programming.
	want := map[string]string{"db-0": w.PodIP(local, 0),
		"db-0-east": w.ClusterIP("db-0-east"), "db-1-east": w.ClusterIP("db-1-east"), "db-2-east": w.ClusterIP("db-2-east")}
	w.Eventually("db-global converged", func(ctx context.Context) string {
		idle, cancel := context.WithTimeout(ctx, w.Timeout)
		defer cancel()
		if err := w.Sim.WaitIdle(idle); err != nil {
			return fmt.Sprintf("simulator not idle: %v", err)
		}
		return scenario.GlobalService(ctx, w.Source.Client, w.NS, "db-global", 5432, want)
	})
	all := dnsq.NoError(slices.Collect(maps.Values(want))...)
	w.startCoreDNS(linkerdCorefile)
	w.await("db-global from the controller's objects", w.kube, w.FQDN("db-global"), dns.TypeA, all)
	w.await("db-global from the plugin", w.global, w.FQDN("db-global"), dns.TypeA, all)
	if n := w.programmed(); n != 0 {
		t.Errorf("the initial sync observed %v programming durations, want 0", n)
	}

	// The gateway dies: Linkerd marks only the endpoint mirrors.
	if err := w.Sim.SetGatewayAlive("east", false); err != nil {
		t.Fatal(err)
	}
	localOnly := dnsq.NoError(w.PodIP(local, 0))
	w.await("db-global, gateway down", w.global, w.FQDN("db-global"), dns.TypeA, localOnly)
	if n := w.programmed(); n == 0 {
		t.Error("the gateway going down (slices without trigger times) observed no programming duration")
	}
	// globalmirror status says why east's pods are out: their endpoint
	// mirrors, which Linkerd's gateway probe marks.
	w.expectStatus(map[string]string{"db-0": "ready", "db-0-east": "gateway of east", "db-1-east": "gateway of east", "db-2-east": "gateway of east"})

	// A pod is mirrored meanwhile: the whole headless mirror goes not ready.
	if err := east.Scale(ctx, 4); err != nil {
		t.Fatal(err)
	}
	w.await("stock db-east, a pod mirrored while the gateway is down", w.kube, w.FQDN("db-east"), dns.TypeA, "NXDOMAIN +soa")
	w.await("db-global, gateway still down", w.global, w.FQDN("db-global"), dns.TypeA, localOnly)

	// The gateway returns: endpoint mirrors repaired, the headless mirror not.
	if err := w.Sim.SetGatewayAlive("east", true); err != nil {
		t.Fatal(err)
	}
	healed := dnsq.NoError(w.PodIP(local, 0), w.ClusterIP("db-0-east"), w.ClusterIP("db-1-east"), w.ClusterIP("db-2-east"), w.ClusterIP("db-3-east"))
	start := time.Now()
	w.await("db-global healed, from the plugin", w.global, w.FQDN("db-global"), dns.TypeA, healed)
	pluginTook := time.Since(start)
	w.await("db-global healed, from the controller's objects", w.kube, w.FQDN("db-global"), dns.TypeA, healed)
	controllerTook := time.Since(start)
	t.Logf("gateway back: db-global healed in %v (plugin) and %v (controller's slices)",
		pluginTook.Round(time.Millisecond), controllerTook.Round(time.Millisecond))
	w.await("per-pod name of the pod mirrored during the outage", w.global, "db-3-east."+w.FQDN("db-global"), dns.TypeA,
		dnsq.NoError(w.ClusterIP("db-3-east")))
	// Ready by their endpoint mirrors, whatever the unrepaired headless
	// mirror says.
	w.expectStatus(map[string]string{"db-0": "ready by its own condition", "db-0-east": "ready by its endpoint mirror",
		"db-1-east": "ready by its endpoint mirror", "db-2-east": "ready by its endpoint mirror", "db-3-east": "ready by its endpoint mirror"})
	idleCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Sim.WaitIdle(idleCtx); err != nil {
		t.Fatal(err)
	}
	qs := w.questions("db-global", "db-0", "db-0-east", "db-1-east", "db-2-east", "db-3-east")
	if diff := mapDiff(w.answers(w.kube, qs), w.answers(w.global, qs)); diff != "" {
		t.Errorf("healed, the stock plugin over the controller's slices (-) and the global plugin (+) differ:\n%s", diff)
	}
	if sum, err := run.MetricSum(w.dns.MetricsURL, "coredns_global_programming_duration_seconds_sum"); err != nil || sum/w.programmed() > 1 {
		t.Errorf("programming durations average %vs over %v changes (%v), want well under a second", sum/w.programmed(), w.programmed(), err)
	}
}

// expectStatus waits until globalmirror status of db-global, as the
// command computes it, has a row for each per-pod name of why, whose
// reason contains why's, ready where why says "ready", and the controller's
// slices in sync.
func (w *world) expectStatus(why map[string]string) {
	w.t.Helper()
	cl := &cli.Cluster{Client: w.Source.Client, Config: w.Source.Config, Controller: &cli.Controller{Options: options.Default()}}
	var last *cli.GlobalStatus
	err := await.Poll(w.t.Context(), w.Timeout, 200*time.Millisecond, func(ctx context.Context) string {
		st, err := cli.Status(ctx, cl, w.NS, "db-global")
		if err != nil {
			return err.Error()
		}
		last = st
		var wrong []string
		for _, e := range st.Endpoints {
			host, _, _ := strings.Cut(e.Name, ".")
			want, ok := why[host]
			if !ok || !strings.Contains(e.Why, want) || e.Ready != strings.HasPrefix(want, "ready") {
				wrong = append(wrong, fmt.Sprintf("%s ready %v: %s", host, e.Ready, e.Why))
			}
		}
		if len(wrong) > 0 || len(st.Endpoints) != len(why) || !st.InSync {
			return fmt.Sprintf("%d rows, want %d; in sync %v (%v); rows not as wanted: %v",
				len(st.Endpoints), len(why), st.InSync, st.Differences, wrong)
		}
		return ""
	})
	if err != nil {
		w.t.Fatalf("globalmirror status: %v", err)
	}
	var out strings.Builder
	last.Write(&out)
	w.t.Logf("globalmirror status:\n%s", out.String())
}

// programmed is how many programming durations the plugin observed.
func (w *world) programmed() float64 {
	w.t.Helper()
	n, err := run.MetricSum(w.dns.MetricsURL, "coredns_global_programming_duration_seconds_count")
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// mapDiff lists the keys whose values differ: "-" a's, "+" b's.
func mapDiff(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("%s:\n  - %s\n  + %s", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s:\n  - (none)\n  + %s", k, v))
		}
	}
	slices.Sort(out)
	if len(out) > 40 {
		out = append(out[:40], fmt.Sprintf("… and %d more", len(out)-40))
	}
	return strings.Join(out, "\n")
}
