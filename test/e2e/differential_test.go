// Package e2e holds end-to-end tests of both halves together: real control
// planes, the Linkerd mirror simulator, the controller binary and the CoreDNS
// binary queried over UDP and TCP.
package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/workload"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// diffCorefile serves the same zone twice: the production order (global, then
// kubernetes) and the stock kubernetes plugin alone, which answers the global
// names from the controller's EndpointSlices.
var diffCorefile = run.Corefile(`
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
    }
`+diffKubernetes) + run.Server("KUBE_PORT", diffKubernetes)

const diffKubernetes = `    kubernetes cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
    }
`

// TestDifferential checks the design's correctness contract: for every name
// and type, the global plugin answers what the stock kubernetes plugin answers
// from the controller's converged EndpointSlices. The topology has a local
// dual-stack member, mirrors, a hostname collision, not-ready pods, a dead
// gateway, a multi-port service, a user-owned global name, and a link and an
// unlink along the way. Any difference is a bug in one half.
func TestDifferential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := localkube.StartT(t, "source", "east", "west", "north")
	w := newWorldIn(t, env.Cluster("source"), "diff")
	exported := map[string]string{aggregate.LabelExported: "true"}

	// Slice endpoint counts below: a dual-stack pod is two endpoints, a
	// not-ready one stays (written not ready), a pod Linkerd stops mirroring goes.
	// db: local (dual-stack) + east + west; kv: east only, two ports;
	// taken: mirrored, but a user owns taken-global; lonely: local only.
	create := func(cluster, name string, replicas int, v4, v6 string, ports ...corev1.ServicePort) *workload.Workload {
		t.Helper()
		opts := workload.Options{Labels: exported, IPv4: netip.MustParsePrefix(v4), Ports: ports}
		if v6 != "" {
			opts.IPv6 = netip.MustParsePrefix(v6)
		}
		wl, err := workload.Create(ctx, env.Cluster(cluster).Client, w.NS, name, replicas, opts)
		if err != nil {
			t.Fatalf("%s/%s: %v", cluster, name, err)
		}
		return wl
	}
	localDB := create("source", "db", 3, "192.0.2.0/27", "2001:db8:1::/64")
	create("source", "lonely", 1, "192.0.2.64/27", "")
	eastDB := create("east", "db", 3, "198.51.100.0/26", "")
	create("east", "kv", 2, "198.51.100.64/26", "",
		corev1.ServicePort{Name: "client", Port: 2379, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "peer", Port: 2380, Protocol: corev1.ProtocolTCP})
	create("east", "taken", 1, "198.51.100.128/26", "")
	westDB := create("west", "db", 3, "203.0.113.0/26", "")
	create("north", "db", 2, "203.0.113.64/26", "")
	userOwnedGlobal(ctx, t, w.Source, w.NS)
	collidingPod(ctx, t, w.Source, w.NS, "db-0", "db-0-east", "192.0.2.30")

	w.Links = true // Linkerd's Links, for east's drain
	w.Link(env.Cluster("east"))
	w.Link(env.Cluster("west"))
	w.startController()
	w.startCoreDNS(diffCorefile)

	// The globals' endpoint counts; taken-global stays the user's.
	globals := func(db, kv int) map[string]int {
		return map[string]int{"db-global": db, "kv-global": kv, "taken-global": -1}
	}
	w.converge(ctx, "initial: local + east + west, a collision", globals(3+3+1+3+3, 2))

	if err := localDB.SetReady(ctx, "db-2", false); err != nil {
		t.Fatal(err)
	}
	if err := westDB.SetReady(ctx, "db-1", false); err != nil {
		t.Fatal(err)
	}
	w.converge(ctx, "not-ready local and remote pods", globals(12, 2))

	w.Link(env.Cluster("north"))
	w.converge(ctx, "north linked", globals(14, 2))

	// An annotation on east's exported db, as Helm and Argo CD write on
	// every sync: Linkerd writes its gateway into db-east, without a
	// hostname, until east's pods next change. East's pods stay in the
	// controller's slices (the counts) and in the plugin's answers, also
	// from both halves started anew meanwhile; east's next change (a pod
	// not ready) is followed as ever.
	if err := eastDB.Annotate(ctx, "argocd.argoproj.io/tracking-id", "diff:/Service:diff/db"); err != nil {
		t.Fatal(err)
	}
	w.await("the stock plugin's db-east: Linkerd's gateway", w.kube, w.FQDN("db-east"), dns.TypeA, dnsq.NoError("192.0.2.254"))
	w.converge(ctx, "east's db annotated: Linkerd's gateway in db-east", globals(14, 2))
	w.ctrl.Stop()
	w.dns.Stop()
	w.startController()
	w.startCoreDNS(diffCorefile)
	w.converge(ctx, "both halves started while the gateway is in db-east", globals(14, 2))
	if err := eastDB.SetReady(ctx, "db-2", false); err != nil {
		t.Fatal(err)
	}
	w.converge(ctx, "east's next change writes its pods again", globals(13, 2))
	if err := eastDB.SetReady(ctx, "db-2", true); err != nil {
		t.Fatal(err)
	}
	w.converge(ctx, "east's db-2 ready again", globals(14, 2))

	// east drained: at shared, its ready pods' own names answer from the
	// plugin alone (the stock plugin answers no name of a pod written not
	// ready), and kv-global, east's only, is NODATA there (its per-pod
	// names exist below it) where the stock plugin has NXDOMAIN; every
	// other answer is the same. At all, every answer is.
	drain := func(level aggregate.Drain) {
		t.Helper()
		target := cli.DrainTarget{Cluster: "east", LinkNamespace: cli.DefaultLinkNamespace}
		if _, err := cli.Drain(ctx, w.Source.Client, w.Source.Config, target, level); err != nil {
			t.Fatal(err)
		}
	}
	drain(aggregate.DrainShared)
	w.drainedShared = "east"
	w.converge(ctx, "east drained (shared)", globals(14, 2))
	drain(aggregate.DrainAll)
	w.drainedShared = ""
	w.converge(ctx, "east drained (all)", globals(14, 2))
	drain(aggregate.NotDrained)
	w.converge(ctx, "east undrained", globals(14, 2))

	// The same drains, written once in east itself on its exported db
	// (globalmirror drain --service there): Linkerd copies the annotation
	// onto db-east here (and writes its gateway there, which the halves
	// hold through), and both halves honour it as the Link's.
	drainInEast := func(level aggregate.Drain) {
		t.Helper()
		east := env.Cluster("east")
		if _, err := cli.Drain(ctx, east.Client, east.Config, cli.DrainTarget{Service: w.NS + "/db"}, level); err != nil {
			t.Fatal(err)
		}
		want := level.String()
		w.Eventually("db-east carries east's drain "+want, func(ctx context.Context) string {
			svc, err := w.Source.Client.CoreV1().Services(w.NS).Get(ctx, "db-east", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if got := svc.Annotations[aggregate.AnnotationDrain]; got != want {
				return fmt.Sprintf("db-east's drain %q", got)
			}
			return ""
		})
	}
	drainInEast(aggregate.DrainShared)
	w.drainedShared = "east"
	w.converge(ctx, "east drained (shared) in east", globals(14, 2))
	drainInEast(aggregate.DrainAll)
	w.drainedShared = ""
	w.converge(ctx, "east drained (all) in east", globals(14, 2))
	for _, server := range []string{w.global, w.kube} {
		w.await("east's db-1 out of every name, drained (all) in east", server, "db-1-east."+w.FQDN("db-global"), dns.TypeA, "NXDOMAIN +soa")
	}
	drainInEast(aggregate.NotDrained)
	w.converge(ctx, "east undrained in east", globals(14, 2))

	if err := w.Sim.SetGatewayAlive("east", false); err != nil {
		t.Fatal(err)
	}
	w.converge(ctx, "east's gateway down", globals(14, 2))

	if err := w.Sim.Unlink(ctx, "west"); err != nil {
		t.Fatal(err)
	}
	w.converge(ctx, "west unlinked", globals(12, 2))

	if err := w.Sim.Unlink(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	w.converge(ctx, "east unlinked: kv-global and taken's mirror gone", globals(9, 0))
}

// converge waits until both servers agree on every question about the globals
// the controller wrote, then checks that the global plugin answered all of the
// ones it owns. want maps every global Service of the namespace to its
// endpoint count in the controller's slices (-1: must not be ours; 0: must
// not exist).
func (w *world) converge(ctx context.Context, phase string, want map[string]int) {
	w.t.Helper()
	err := await.Poll(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) string {
		questions, owned, err := w.everyQuestion(ctx, want)
		if err != nil {
			return err.Error()
		}
		before := w.answered()
		kube, global := w.answers(w.kube, questions), w.answers(w.global, questions)
		drained := w.drainedDifferences(kube, global)
		if diff := mapDiff(kube, global); diff != "" {
			return "the stock plugin (-) and the global plugin (+) still differ:\n" + diff
		}
		if w.drainedShared != "" && drained == 0 {
			return "no drained pod's own name answered by the global plugin alone"
		}
		// The plugin counts a query once its answer is written, so the last
		// counts may trail the answers by a moment; and the questions come
		// from one listing, which a change may overtake before they are
		// asked (then all is asked again). A wrong owner persists.
		var got float64
		counted := await.Poll(ctx, time.Second, 10*time.Millisecond, func(context.Context) string {
			if got = w.answered() - before; got != float64(owned) {
				return "counting"
			}
			return ""
		})
		if counted != nil {
			return fmt.Sprintf("the global plugin answered %v queries, want the %d about names it owns", got, owned)
		}
		if drained > 0 {
			w.t.Logf("%s: %d questions, identical answers but %d of a drained pod's own names or of a global of drained pods only, answered by global alone (%d answered by global)",
				phase, len(questions), drained, owned)
			return ""
		}
		w.t.Logf("%s: %d questions, identical answers (%d answered by global)", phase, len(questions), owned)
		return ""
	})
	if err != nil {
		w.t.Fatalf("%s: %v", phase, err)
	}
}

type question struct {
	name  string
	qtype uint16
}

// drainedDifferences drops from both answer sets the questions where the
// global plugin may differ from the stock plugin while a cluster is
// drained at the shared level, and does: the stock plugin's NXDOMAIN, the
// global plugin's NOERROR, for a drained pod's own names and for a global
// all of whose answered pods are drained (w.mayDiffer). It returns how many.
func (w *world) drainedDifferences(kube, global map[string]string) int {
	n := 0
	for k, a := range kube {
		_, name, _ := strings.Cut(k[strings.IndexByte(k, ' ')+1:], " ")
		if b := global[k]; a != b && w.mayDiffer[strings.ToLower(name)] && strings.HasPrefix(a, "NXDOMAIN ") && strings.HasPrefix(b, "NOERROR ") {
			delete(kube, k)
			delete(global, k)
			n++
		}
	}
	return n
}

// everyQuestion is derived from the controller's objects: every global, every
// per-pod name (hostnames and dashed IPs), SRV on every port, and wrong names.
// owned counts the answers (UDP and TCP) due from the global plugin.
func (w *world) everyQuestion(ctx context.Context, want map[string]int) (qs []question, owned int, err error) {
	svcs, err := w.Source.Client.CoreV1().Services(w.NS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	// A drained cluster's endpoints are its endpoint mirrors' cluster IPs.
	w.mayDiffer = map[string]bool{}
	drainedIPs := map[string]bool{}
	for _, svc := range svcs.Items {
		if w.drainedShared != "" && svc.Labels[aggregate.LabelClusterName] == w.drainedShared && svc.Labels[aggregate.LabelHeadlessMirrorName] != "" {
			drainedIPs[svc.Spec.ClusterIP] = true
		}
	}
	isDrained := func(addrs []string) bool {
		return slices.ContainsFunc(addrs, func(a string) bool { return drainedIPs[a] })
	}
	// own: under a global the plugin answers for.
	add := func(name string, own bool, types ...uint16) {
		for _, qt := range types {
			qs = append(qs, question{name, qt})
			if own {
				owned += 2 // asked over UDP and TCP
			}
		}
	}
	all := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT}
	seen := map[string]bool{}
	for _, svc := range svcs.Items {
		if !strings.HasSuffix(svc.Name, aggregate.DefaultSuffix) {
			continue
		}
		seen[svc.Name] = true
		managed := aggregate.WrittenByGlobalmirror(svc.Labels)
		n, expected := want[svc.Name]
		switch {
		case !expected:
			return nil, 0, fmt.Errorf("%s exists, want only %v", svc.Name, want)
		case n == -1 && managed:
			return nil, 0, fmt.Errorf("%s should be user-owned", svc.Name)
		case n > 0 && !managed:
			return nil, 0, fmt.Errorf("%s is not globalmirror's", svc.Name)
		case n == 0:
			return nil, 0, fmt.Errorf("%s still exists", svc.Name)
		}
		g := w.FQDN(svc.Name)
		add(g, managed, all...)
		add(strings.ToUpper(g), managed, dns.TypeA)
		add("nope."+g, managed, dns.TypeA, dns.TypeSRV)
		add("a.b.c."+g, managed, dns.TypeA)
		add("_nope._tcp."+g, managed, dns.TypeSRV)
		if !managed {
			continue
		}
		slices, err := w.Source.Client.DiscoveryV1().EndpointSlices(w.NS).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name,
		})
		if err != nil {
			return nil, 0, err
		}
		count, ready, drained := 0, 0, 0
		ports := map[string]bool{}
		for _, s := range slices.Items {
			for _, p := range s.Ports {
				if p.Name != nil && p.Protocol != nil {
					ports["_"+*p.Name+"._"+strings.ToLower(string(*p.Protocol))] = true
				}
			}
			for _, e := range s.Endpoints {
				count++
				if aggregate.EndpointReady(&e) {
					ready++
				}
				d := isDrained(e.Addresses)
				if d {
					drained++
				}
				for _, a := range e.Addresses {
					add(dashed(a)+"."+g, true, dns.TypeA, dns.TypeAAAA)
					w.mayDiffer[dashed(a)+"."+g] = d
				}
				if e.Hostname != nil {
					add(*e.Hostname+"."+g, true, all...)
					w.mayDiffer[*e.Hostname+"."+g] = d
				}
			}
		}
		w.mayDiffer[g] = ready == 0 && drained > 0
		if count != n {
			return nil, 0, fmt.Errorf("%s has %d endpoints in its slices, want %d", svc.Name, count, n)
		}
		for p := range ports {
			add(p+"."+g, true, dns.TypeSRV, dns.TypeA)
		}
	}
	for name, n := range want {
		if n != 0 && !seen[name] {
			return nil, 0, fmt.Errorf("%s does not exist yet", name)
		}
	}
	// Global names no Service holds (a local-only base, an unknown global):
	// NXDOMAIN from the global plugin itself. Other names: not its own.
	add(w.FQDN("lonely-global"), true, dns.TypeA)
	add(w.FQDN("nothing-global"), true, dns.TypeA, dns.TypeSRV)
	add(w.FQDN("db-east"), false, dns.TypeA)
	add(w.FQDN("zz9"), false, dns.TypeA)
	return qs, owned, nil
}

// normalize renders what matters of a response: rcode, the authoritative and
// truncated flags, and each section as a sorted set with TTLs and the SOA
// serial zeroed. A truncated response's records depend on their order, so only
// its flags are compared.
func normalize(m *dns.Msg) string {
	head := fmt.Sprintf("%s aa=%v tc=%v", dns.RcodeToString[m.Rcode], m.Authoritative, m.Truncated)
	if m.Truncated {
		return head
	}
	section := func(rrs []dns.RR) string {
		var out []string
		for _, rr := range rrs {
			rr = dns.Copy(rr)
			rr.Header().Ttl = 0
			rr.Header().Name = strings.ToLower(rr.Header().Name)
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = 0
			}
			if srv, ok := rr.(*dns.SRV); ok {
				srv.Target = strings.ToLower(srv.Target)
			}
			out = append(out, rr.String())
		}
		sort.Strings(out)
		return "[" + strings.Join(out, " | ") + "]"
	}
	return head + " answer=" + section(m.Answer) + " ns=" + section(m.Ns) + " extra=" + section(m.Extra)
}

// answered is the global plugin's count of queries it answered.
func (w *world) answered() float64 {
	n, err := run.MetricSum(w.dns.MetricsURL, "coredns_global_requests_total")
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

func dashed(ip string) string {
	if strings.Contains(ip, ".") {
		return strings.ReplaceAll(ip, ".", "-")
	}
	h := strings.ReplaceAll(ip, ":", "-")
	if strings.HasSuffix(h, "-") {
		h += "0"
	}
	return h
}

// userOwnedGlobal is a Service a user created under the name the global of
// `taken` would have: both halves must leave it alone.
func userOwnedGlobal(ctx context.Context, t *testing.T, c *localkube.Cluster, ns string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-global", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// collidingPod adds to the local service a pod whose hostname a mirrored pod's
// global name also has: the local pod must keep the name.
func collidingPod(ctx context.Context, t *testing.T, c *localkube.Cluster, namespace, like, name, ip string) {
	t.Helper()
	pods := c.Client.CoreV1().Pods(namespace)
	tmpl, err := pods.Get(ctx, like, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: tmpl.Labels},
		Spec:       *tmpl.Spec.DeepCopy(),
	}
	pod.Spec.Hostname = name
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = *tmpl.Status.DeepCopy()
	created.Status.PodIP = ip
	created.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(run.BinEnv) == "" {
		fmt.Fprintf(os.Stderr, "e2e: $%s is not set; run `make test`\n", run.BinEnv)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestMesh runs a symmetric mesh: four clusters, each linked to the other
// three, each with its own controller and CoreDNS, db (3 pods) exported in
// all four. Every cluster has exactly one db-global of 12 ready endpoints,
// names its own pods db-N and the others' db-N-<cluster>, and its plugin
// answers what its stock plugin answers from its controller's slices. One
// cluster leaves the mesh and comes back; a pod leaves its home cluster. The
// convergence times are logged.
func TestMesh(t *testing.T) {
	names := []string{"east", "west", "north", "south"}
	prefixes := map[string]string{"east": "198.51.100.0/26", "west": "203.0.113.0/26", "north": "192.0.2.0/26", "south": "192.0.2.64/26"}
	env := localkube.StartT(t, names...)
	ctx := t.Context()
	// mesh holds each cluster's world (the others linked into it, its
	// controller and its CoreDNS), dbs its workload.
	mesh, dbs := map[string]*world{}, map[string]*workload.Workload{}
	for _, name := range names {
		c := env.Cluster(name)
		mesh[name] = newWorldIn(t, c, "mesh")
		dbs[name] = mesh[name].Workload(c, "db", 3, prefixes[name])
	}
	for _, from := range names {
		for _, to := range names {
			if from != to {
				mesh[from].Link(env.Cluster(to))
			}
		}
	}
	for _, name := range names {
		mesh[name].startController()
		mesh[name].startCoreDNS(linkerdCorefile)
	}

	// want is what cluster home's db-global holds when the given clusters
	// are linked into it: its own pods by pod IP, the others' by their
	// endpoint mirrors' ClusterIPs, as "hostname=address".
	want := func(home string, linked []string, pods map[string]int) map[string]string {
		w := mesh[home]
		out := map[string]string{}
		for i := range pods[home] {
			out[fmt.Sprintf("db-%d", i)] = w.PodIP(dbs[home], i)
		}
		for _, other := range linked {
			if other == home {
				continue
			}
			for i := range pods[other] {
				host := fmt.Sprintf("db-%d-%s", i, other)
				out[host] = w.ClusterIP(host)
			}
		}
		return out
	}
	pods := map[string]int{"east": 3, "west": 3, "north": 3, "south": 3}
	// converge waits for every cluster in turn: they converge at once, so
	// the total is the slowest one's time, give or take the checks.
	converge := func(phase string, clusters, linked []string) time.Duration {
		t.Helper()
		start := time.Now()
		for _, home := range clusters {
			mesh[home].expectGlobal(phase, want(home, linked, pods))
		}
		return time.Since(start)
	}
	took := converge("full mesh", names, names)
	t.Logf("full mesh: every cluster converged (plugin and controller) %v after the last CoreDNS started", took.Round(time.Millisecond))
	for _, name := range names {
		mesh[name].converge(ctx, "full mesh in "+name, map[string]int{"db-global": 12})
	}

	// south leaves the mesh: the others unlink it, it unlinks them.
	left := time.Now()
	for _, other := range names[:3] {
		for _, err := range []error{mesh[other].Sim.Unlink(ctx, "south"), mesh["south"].Sim.Unlink(ctx, other)} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	converge("south unlinked", names[:3], names[:3])
	south := mesh["south"]
	south.await("south without links: no global", south.global, south.FQDN("db-global"), dns.TypeA, "NXDOMAIN +soa")
	t.Logf("south left the mesh: every cluster converged %v after the unlinks started", time.Since(left).Round(time.Millisecond))

	back := time.Now()
	for _, other := range names[:3] {
		mesh[other].Link(env.Cluster("south"))
		south.Link(env.Cluster(other))
	}
	converge("south linked back", names, names)
	t.Logf("south rejoined the mesh: every cluster converged %v after the links started", time.Since(back).Round(time.Millisecond))
	for _, name := range names {
		mesh[name].converge(ctx, "south linked back in "+name, map[string]int{"db-global": 12})
	}

	// A pod leaves east: no cluster answers for it longer than its mirror
	// takes to go. Every few milliseconds each other cluster's API and DNS
	// (the plugin's per-pod answer) are asked whether db-2-east is gone.
	gone := time.Now()
	if err := dbs["east"].Scale(ctx, 2); err != nil {
		t.Fatal(err)
	}
	mirrorGone, dnsGone := map[string]time.Duration{}, map[string]time.Duration{}
	err := await.Poll(ctx, 60*time.Second, 3*time.Millisecond, func(ctx context.Context) string {
		for _, other := range names[1:] {
			w := mesh[other]
			if _, ok := mirrorGone[other]; !ok {
				if _, err := w.Source.Client.CoreV1().Services(w.NS).Get(ctx, "db-2-east", metav1.GetOptions{}); apierrors.IsNotFound(err) {
					mirrorGone[other] = time.Since(gone)
				}
			}
			if _, ok := dnsGone[other]; !ok && dnsq.Answer("udp", w.global, "db-2-east."+w.FQDN("db-global"), dns.TypeA) == "NXDOMAIN +soa" {
				dnsGone[other] = time.Since(gone)
			}
		}
		if len(mirrorGone) < len(names)-1 || len(dnsGone) < len(names)-1 {
			return fmt.Sprintf("mirror gone after %v, DNS after %v", mirrorGone, dnsGone)
		}
		return ""
	})
	if err != nil {
		t.Fatalf("db-2-east still there: %v", err)
	}
	for _, other := range names[1:] {
		t.Logf("east's db-2 gone: %s's mirror removed after %v, its DNS stopped answering it after %v",
			other, mirrorGone[other].Round(time.Millisecond), dnsGone[other].Round(time.Millisecond))
		if dnsGone[other] > mirrorGone[other]+time.Second {
			t.Errorf("%s answered for a pod gone from east %v after its mirror was removed", other, dnsGone[other]-mirrorGone[other])
		}
	}
	pods["east"] = 2
	converge("east scaled to 2", names, names)
}

// expectGlobal waits until db-global holds exactly want ("hostname=address")
// in the plugin's per-pod answers and its A answer, and the same from the
// stock plugin over the controller's slices.
func (w *world) expectGlobal(phase string, want map[string]string) {
	all := dnsq.NoError(slices.Collect(maps.Values(want))...)
	for _, server := range []string{w.global, w.kube} {
		w.await(phase+" in "+w.Source.Name, server, w.FQDN("db-global"), dns.TypeA, all)
		for host, a := range want {
			w.await(phase+" in "+w.Source.Name, server, host+"."+w.FQDN("db-global"), dns.TypeA, dnsq.NoError(a))
		}
	}
}
