package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/mirrorsim"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/workload"
	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// These tests follow behaviours of Linkerd's real service mirror (reproduced
// by mirrorsim) that once made globalmirror answer wrong: a global kept in
// DNS by the controller's leftovers while the controller was down, and a
// headless mirror Linkerd never repairs after a gateway outage.

// linkerdCorefile serves the production order (global, then kubernetes) and,
// on KUBE_PORT, the stock kubernetes plugin alone: what a cluster without the
// global plugin answers from the controller's and Linkerd's objects.
const linkerdCorefile = `.:{$DNS_PORT} {
    bind 127.0.0.1
    ready 127.0.0.1:{$READY_PORT}
    prometheus 127.0.0.1:{$METRICS_PORT}
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
        ttl 1
    }
    kubernetes cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
        ttl 1
    }
}
.:{$KUBE_PORT} {
    bind 127.0.0.1
    kubernetes cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
        ttl 1
    }
}
`

// world is one namespace of a source cluster with east linked into it.
type world struct {
	t            *testing.T
	ns           string
	source, east *localkube.Cluster
	sim          *mirrorsim.Simulator
	dir          string
	ctrl         *run.Controller
	dns          *run.CoreDNS
	global, kube string // DNS addresses: production order, stock plugin alone
}

func newWorld(t *testing.T, env *localkube.Env, ns string) *world {
	t.Helper()
	w := &world{t: t, ns: ns, source: env.Cluster("source"), east: env.Cluster("east"), dir: t.TempDir()}
	sim, err := mirrorsim.Start(context.Background(), w.source.Config, mirrorsim.Options{
		Namespace: ns,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Stop)
	if err := sim.Link(t.Context(), "east", w.east.Config); err != nil {
		t.Fatal(err)
	}
	w.sim = sim
	t.Cleanup(func() {
		if t.Failed() {
			if w.ctrl != nil {
				t.Logf("controller log:\n%s", w.ctrl.Log(4000))
			}
			if w.dns != nil {
				t.Logf("coredns log:\n%s", w.dns.Log(4000))
			}
		}
	})
	return w
}

func (w *world) workload(c *localkube.Cluster, name string, replicas int, prefix string) *workload.Workload {
	w.t.Helper()
	wl, err := workload.Create(w.t.Context(), c.Client, w.ns, name, replicas, workload.Options{
		Labels: map[string]string{aggregate.LabelExported: "true"},
		IPv4:   netip.MustParsePrefix(prefix),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return wl
}

func (w *world) startController() {
	w.t.Helper()
	c, err := run.StartController(w.t.Context(), w.dir, "controller.log", w.source.Kubeconfig,
		"--leader-elect=false", "--namespaces="+w.ns)
	if err != nil {
		w.t.Fatal(err)
	}
	w.ctrl = c
	w.t.Cleanup(c.Stop)
}

func (w *world) startCoreDNS() { w.startCoreDNSWith(linkerdCorefile) }

// startCoreDNSWith runs CoreDNS with a Corefile serving the production order
// on DNS_PORT and the stock kubernetes plugin alone on KUBE_PORT.
func (w *world) startCoreDNSWith(corefile string) {
	w.t.Helper()
	c, err := run.StartCoreDNS(w.t.Context(), run.CoreDNSOptions{
		Corefile: corefile, Dir: w.dir, WaitReady: true,
		Env:        []string{"SOURCE_KUBECONFIG=" + w.source.Kubeconfig, "NS=" + w.ns},
		ExtraPorts: []string{"KUBE_PORT"},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.dns, w.global, w.kube = c, c.Addr, fmt.Sprintf("127.0.0.1:%d", c.Ports["KUBE_PORT"])
	w.t.Cleanup(c.Stop)
}

// fqdn is name.<ns>.svc.cluster.local.
func (w *world) fqdn(name string) string { return name + "." + w.ns + ".svc." + zone }

func ask(network, addr, name string, qtype uint16) string {
	return dnsq.Summary(dnsq.Ask(network, addr, name, qtype, 0))
}

// await polls addr until name/qtype answers want over UDP, then over TCP,
// and returns how long the UDP answer took.
func (w *world) await(what, addr, name string, qtype uint16, want string) time.Duration {
	w.t.Helper()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	var took time.Duration
	for _, network := range []string{"udp", "tcp"} {
		for {
			got := ask(network, addr, name, qtype)
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				w.t.Fatalf("%s: %s %s over %s: %q, want %q", what, name, dns.TypeToString[qtype], network, got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if network == "udp" {
			took = time.Since(start)
		}
	}
	return took
}

// questions are every name a global's clients ask: the service (every type
// the plugin answers, and one it has no records of), the named port's SRV,
// and each per-pod name.
func (w *world) questions(global string, hosts ...string) []question {
	g := w.fqdn(global)
	qs := []question{{name: g, qtype: dns.TypeA}, {name: g, qtype: dns.TypeAAAA}, {name: g, qtype: dns.TypeSRV},
		{name: g, qtype: dns.TypeTXT}, {name: "_db._tcp." + g, qtype: dns.TypeSRV}}
	for _, h := range hosts {
		qs = append(qs, question{name: h + "." + g, qtype: dns.TypeA}, question{name: h + "." + g, qtype: dns.TypeSRV})
	}
	return qs
}

// answers asks every question of addr over UDP and TCP.
// answers asks every question of addr over UDP and TCP. A truncated
// answer's records depend on their order, so only its rcode and flag count.
func (w *world) answers(addr string, qs []question) map[string]string {
	out := map[string]string{}
	for _, q := range qs {
		for _, network := range []string{"udp", "tcp"} {
			r, err := dnsq.Ask(network, addr, q.name, q.qtype, 0)
			got := dnsq.Summary(r, err)
			if err == nil && r.Truncated {
				got = dns.RcodeToString[r.Rcode] + " TC"
			}
			out[network+" "+dns.TypeToString[q.qtype]+" "+q.name] = got
		}
	}
	return out
}

func (w *world) clusterIP(name string) string {
	w.t.Helper()
	svc, err := w.source.Client.CoreV1().Services(w.ns).Get(w.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return svc.Spec.ClusterIP
}

// clusterIPEventually is the ClusterIP of a Service that is still being
// created (an endpoint mirror the simulator is about to write).
func (w *world) clusterIPEventually(name string) string {
	w.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		svc, err := w.source.Client.CoreV1().Services(w.ns).Get(w.t.Context(), name, metav1.GetOptions{})
		if err == nil {
			return svc.Spec.ClusterIP
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s/%s in %s: %v", w.ns, name, w.source.Name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func podIP(t *testing.T, wl *workload.Workload, ord int) string {
	t.Helper()
	ips, err := wl.PodIPs(ord)
	if err != nil {
		t.Fatal(err)
	}
	return ips[0]
}

func addrs(ips ...string) string {
	slices.Sort(ips)
	return "NOERROR " + strings.Join(ips, ",")
}

func TestLinkerdBehaviours(t *testing.T) {
	env := localkube.StartT(t, "source", "east", "west")
	t.Run("UnexportWhileControllerDown", func(t *testing.T) { testUnexportWhileControllerDown(t, env) })
	t.Run("GatewayOutageHeals", func(t *testing.T) { testGatewayOutageHeals(t, env) })
	t.Run("ReverseAndClustersetViews", func(t *testing.T) { testViews(t, env) })
	t.Run("NativeNames", func(t *testing.T) { testNativeNames(t, env) })
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
	localKafka := w.workload(w.source, "kafka", 2, "192.0.2.0/27")
	w.workload(w.east, "kafka", 3, "198.51.100.0/26")
	w.workload(w.east, "db", 2, "198.51.100.64/26")
	w.startController()
	w.startCoreDNS()

	kafka := addrs(podIP(t, localKafka, 0), podIP(t, localKafka, 1),
		w.clusterIP("kafka-0-east"), w.clusterIP("kafka-1-east"), w.clusterIP("kafka-2-east"))
	w.await("kafka-global from the plugin", w.global, w.fqdn("kafka-global"), dns.TypeA, kafka)
	w.await("kafka-global from the controller's objects", w.kube, w.fqdn("kafka-global"), dns.TypeA, kafka)
	db := addrs(w.clusterIP("db-0-east"), w.clusterIP("db-1-east"))
	w.await("db-global from the controller's objects", w.kube, w.fqdn("db-global"), dns.TypeA, db)
	kafkaNames := w.questions("kafka-global", "kafka-0", "kafka-1", "kafka-0-east", "kafka-1-east", "kafka-2-east")
	dbNames := w.questions("db-global", "db-0-east", "db-1-east")
	dbBefore := w.answers(w.global, dbNames)
	if got := dbBefore["udp A "+w.fqdn("db-global")]; got != db {
		t.Fatalf("db-global: %q, want %q", got, db)
	}

	w.ctrl.Stop()
	svcs := w.east.Client.CoreV1().Services(w.ns)
	remote, err := svcs.Get(ctx, "kafka", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(remote.Labels, aggregate.LabelExported)
	if _, err := svcs.Update(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := w.await("kafka-global once unexported", w.global, w.fqdn("kafka-global"), dns.TypeA, "NXDOMAIN +soa")
	t.Logf("unexported with the controller down: the plugin answered NXDOMAIN after %v", took.Round(time.Millisecond))
	// The stock plugin still serves the controller's leftovers: what the
	// plugin no longer hands its names to.
	if got := ask("udp", w.kube, w.fqdn("kafka-global"), dns.TypeA); got != kafka {
		t.Errorf("the stock plugin answers %q from the stopped controller's objects, want the stale %q", got, kafka)
	}
	for q, got := range w.answers(w.global, kafkaNames) {
		if got != "NXDOMAIN +soa" {
			t.Errorf("%s: %q, want NXDOMAIN with the SOA", q, got)
		}
	}

	// Deleting the controller's objects changes nothing the plugin answers.
	if err := w.source.Client.CoreV1().Services(w.ns).Delete(ctx, "db-global", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.await("db-global's objects gone", w.kube, w.fqdn("db-global"), dns.TypeA, "NXDOMAIN +soa")
	if diff := mapDiff(dbBefore, w.answers(w.global, dbNames)); diff != "" {
		t.Errorf("deleting the controller's db-global changed the plugin's answers:\n%s", diff)
	}

	// Nor does the controller converging again: it deletes kafka-global and
	// re-creates db-global, and both servers agree with the plugin.
	w.startController()
	w.await("db-global re-created", w.kube, w.fqdn("db-global"), dns.TypeA, db)
	waitGone(t, w, "kafka-global")
	if diff := mapDiff(dbBefore, w.answers(w.global, dbNames)); diff != "" {
		t.Errorf("the controller's return changed the plugin's db-global answers:\n%s", diff)
	}
	for q, got := range w.answers(w.global, kafkaNames) {
		if got != "NXDOMAIN +soa" {
			t.Errorf("after the controller converged, %s: %q, want NXDOMAIN with the SOA", q, got)
		}
	}
	if diff := mapDiff(w.answers(w.kube, append(kafkaNames, dbNames...)), w.answers(w.global, append(kafkaNames, dbNames...))); diff != "" {
		t.Errorf("converged, the stock plugin (-) and the global plugin (+) differ:\n%s", diff)
	}
}

// testGatewayOutageHeals: a pod mirrored while east's gateway is dead makes
// Linkerd write the headless mirror not ready, and the repair when the
// gateway returns skips headless mirrors. db-global recovers as soon as the
// endpoint mirrors are repaired, while the stock plugin's db-east stays
// empty. The plugin's programming-latency metric sees these changes, which
// carry no trigger time, and nothing from its initial sync.
func testGatewayOutageHeals(t *testing.T, env *localkube.Env) {
	w := newWorld(t, env, "gateway")
	ctx := t.Context()
	local := w.workload(w.source, "db", 1, "192.0.2.32/27")
	east := w.workload(w.east, "db", 3, "198.51.100.128/26")
	w.startController()
	// CoreDNS starts over a converged world whose local slice carries an
	// old trigger time: its initial sync must observe no programming.
	w.waitConverged("db-global", 4)
	all := addrs(podIP(t, local, 0), w.clusterIP("db-0-east"), w.clusterIP("db-1-east"), w.clusterIP("db-2-east"))
	w.startCoreDNS()
	w.await("db-global from the controller's objects", w.kube, w.fqdn("db-global"), dns.TypeA, all)
	w.await("db-global from the plugin", w.global, w.fqdn("db-global"), dns.TypeA, all)
	if n := w.programmed(); n != 0 {
		t.Errorf("the initial sync observed %v programming durations, want 0", n)
	}
	eastOnly := addrs(w.clusterIP("db-0-east"), w.clusterIP("db-1-east"), w.clusterIP("db-2-east"))
	w.await("db-east, stock", w.kube, w.fqdn("db-east"), dns.TypeA, eastOnly)

	// The gateway dies: Linkerd marks only the endpoint mirrors.
	if err := w.sim.SetGatewayAlive("east", false); err != nil {
		t.Fatal(err)
	}
	localOnly := addrs(podIP(t, local, 0))
	w.await("db-global, gateway down", w.global, w.fqdn("db-global"), dns.TypeA, localOnly)
	if got := ask("udp", w.kube, w.fqdn("db-east"), dns.TypeA); got != eastOnly {
		t.Errorf("stock db-east with the gateway down: %q, want Linkerd's still-ready %q", got, eastOnly)
	}
	if n := w.programmed(); n == 0 {
		t.Error("the gateway going down (slices without trigger times) observed no programming duration")
	}

	// A pod is mirrored meanwhile: the whole headless mirror goes not ready.
	if err := east.Scale(ctx, 4); err != nil {
		t.Fatal(err)
	}
	w.await("stock db-east, a pod mirrored while the gateway is down", w.kube, w.fqdn("db-east"), dns.TypeA, "NXDOMAIN +soa")
	w.await("db-global, gateway still down", w.global, w.fqdn("db-global"), dns.TypeA, localOnly)

	// The gateway returns: endpoint mirrors repaired, the headless mirror not.
	if err := w.sim.SetGatewayAlive("east", true); err != nil {
		t.Fatal(err)
	}
	healed := addrs(podIP(t, local, 0), w.clusterIP("db-0-east"), w.clusterIP("db-1-east"), w.clusterIP("db-2-east"), w.clusterIP("db-3-east"))
	start := time.Now()
	w.await("db-global healed, from the plugin", w.global, w.fqdn("db-global"), dns.TypeA, healed)
	pluginTook := time.Since(start)
	w.await("db-global healed, from the controller's objects", w.kube, w.fqdn("db-global"), dns.TypeA, healed)
	controllerTook := time.Since(start)
	t.Logf("gateway back: db-global healed in %v (plugin) and %v (controller's slices)",
		pluginTook.Round(time.Millisecond), controllerTook.Round(time.Millisecond))
	w.await("per-pod name of the pod mirrored during the outage", w.global, "db-3-east."+w.fqdn("db-global"), dns.TypeA,
		addrs(w.clusterIP("db-3-east")))
	idleCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.sim.WaitIdle(idleCtx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{w.fqdn("db-east"), "db-3-east." + w.fqdn("db-east")} {
		if got := ask("udp", w.kube, name, dns.TypeA); got != "NXDOMAIN +soa" {
			t.Errorf("stock %s after the gateway returned: %q, want Linkerd's unrepaired NXDOMAIN", name, got)
		}
	}
	qs := w.questions("db-global", "db-0", "db-0-east", "db-1-east", "db-2-east", "db-3-east")
	if diff := mapDiff(w.answers(w.kube, qs), w.answers(w.global, qs)); diff != "" {
		t.Errorf("healed, the stock plugin over the controller's slices (-) and the global plugin (+) differ:\n%s", diff)
	}
	if sum, err := run.MetricSum(w.dns.MetricsURL, "coredns_global_programming_duration_seconds_sum"); err != nil || sum/w.programmed() > 1 {
		t.Errorf("programming durations average %vs over %v changes (%v), want well under a second", sum/w.programmed(), w.programmed(), err)
	}
}

// waitConverged waits until the simulator is idle and the controller's
// slices of global hold n ready endpoints.
func (w *world) waitConverged(global string, n int) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.t.Context(), 60*time.Second)
	defer cancel()
	for {
		if err := w.sim.WaitIdle(ctx); err != nil {
			w.t.Fatalf("%s: simulator not idle: %v", global, err)
		}
		list, err := w.source.Client.DiscoveryV1().EndpointSlices(w.ns).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + global})
		ready := 0
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready++
				}
			}
		}
		if err == nil && ready == n {
			return
		}
		select {
		case <-ctx.Done():
			w.t.Fatalf("%s: %d ready endpoints in its slices (%v), want %d", global, ready, err, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
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

func waitGone(t *testing.T, w *world, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := w.source.Client.CoreV1().Services(w.ns).Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there (%v)", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	return strings.Join(out, "\n")
}
