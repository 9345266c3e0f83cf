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
	"sync"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/globalmirror/globalmirror/test/workload"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const zone = scenario.Zone

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
	s := scenario.NewIn(t, env.Cluster("source"), "diff")
	source, ns := s.Source, s.NS
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
		w, err := workload.Create(ctx, env.Cluster(cluster).Client, ns, name, replicas, opts)
		if err != nil {
			t.Fatalf("%s/%s: %v", cluster, name, err)
		}
		return w
	}
	localDB := create("source", "db", 3, "192.0.2.0/27", "2001:db8:1::/64")
	create("source", "lonely", 1, "192.0.2.64/27", "")
	create("east", "db", 3, "198.51.100.0/26", "")
	create("east", "kv", 2, "198.51.100.64/26", "",
		corev1.ServicePort{Name: "client", Port: 2379, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "peer", Port: 2380, Protocol: corev1.ProtocolTCP})
	create("east", "taken", 1, "198.51.100.128/26", "")
	westDB := create("west", "db", 3, "203.0.113.0/26", "")
	create("north", "db", 2, "203.0.113.64/26", "")
	userOwnedGlobal(ctx, t, source, ns)
	collidingPod(ctx, t, source, ns, "db-0", "db-0-east", "192.0.2.30")

	s.Link(env.Cluster("east"))
	s.Link(env.Cluster("west"))
	s.StartController("--leader-elect=false")
	coredns := s.StartCoreDNS(diffCorefile, "KUBE_PORT")
	d := &differ{t: t, source: source, ns: ns, global: coredns.Addr, kube: coredns.PortAddr("KUBE_PORT"), metrics: coredns.MetricsURL}

	d.converge(ctx, "initial: local + east + west, a collision", map[string]int{"db-global": 3 + 3 + 1 + 3 + 3, "kv-global": 2, "taken-global": -1})

	if err := localDB.SetReady(ctx, "db-2", false); err != nil {
		t.Fatal(err)
	}
	if err := westDB.SetReady(ctx, "db-1", false); err != nil {
		t.Fatal(err)
	}
	d.converge(ctx, "not-ready local and remote pods", map[string]int{"db-global": 12})

	s.Link(env.Cluster("north"))
	d.converge(ctx, "north linked", map[string]int{"db-global": 14})

	if err := s.Sim.SetGatewayAlive("east", false); err != nil {
		t.Fatal(err)
	}
	d.converge(ctx, "east's gateway down", map[string]int{"db-global": 14, "kv-global": 2})

	if err := s.Sim.Unlink(ctx, "west"); err != nil {
		t.Fatal(err)
	}
	d.converge(ctx, "west unlinked", map[string]int{"db-global": 12})

	if err := s.Sim.Unlink(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	d.converge(ctx, "east unlinked: kv-global and taken's mirror gone", map[string]int{"db-global": 9, "kv-global": 0})
}

// differ asks two servers the same questions.
type differ struct {
	t                         *testing.T
	source                    *localkube.Cluster
	ns, global, kube, metrics string
}

// converge waits until both servers agree on every question about the globals
// the controller wrote, then checks that the global plugin answered all of the
// ones it owns. want maps a global to its endpoint count in the controller's
// slices (-1: must not be ours; 0: must not exist).
func (d *differ) converge(ctx context.Context, phase string, want map[string]int) {
	d.t.Helper()
	err := await.Poll(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) string {
		questions, owned, err := d.questions(ctx, want)
		if err != nil {
			return err.Error()
		}
		before := d.answered()
		if diffs := d.compare(questions); len(diffs) > 0 {
			return "the answers still differ:\n" + strings.Join(first(diffs, 40), "\n")
		}
		// The plugin counts a query once its answer is written, so the last
		// counts may trail the answers by a moment; and the questions come
		// from one listing, which a change may overtake before they are
		// asked (then all is asked again). A wrong owner persists.
		var got float64
		counted := await.Poll(ctx, time.Second, 10*time.Millisecond, func(context.Context) string {
			if got = d.answered() - before; got != float64(owned) {
				return "counting"
			}
			return ""
		})
		if counted != nil {
			return fmt.Sprintf("the global plugin answered %v queries, want the %d about names it owns", got, owned)
		}
		d.t.Logf("%s: %d questions, identical answers (%d answered by global)", phase, len(questions), owned)
		return ""
	})
	if err != nil {
		d.t.Fatalf("%s: %v", phase, err)
	}
}

type question struct {
	name  string
	qtype uint16
}

// questions are derived from the controller's objects: every global, every
// per-pod name (hostnames and dashed IPs), SRV on every port, and wrong names.
func (d *differ) questions(ctx context.Context, want map[string]int) ([]question, int, error) {
	svcs, err := d.source.Client.CoreV1().Services(d.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	var qs []question
	owned := 0
	// own: under a global the plugin answers for.
	add := func(name string, own bool, types ...uint16) {
		for _, qt := range types {
			qs = append(qs, question{name, qt})
			if own {
				owned++
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
		case expected && n == -1 && managed:
			return nil, 0, fmt.Errorf("%s should be user-owned", svc.Name)
		case expected && n == 0:
			return nil, 0, fmt.Errorf("%s still exists", svc.Name)
		}
		g := svc.Name + "." + d.ns + ".svc." + zone
		add(g, managed, all...)
		add(strings.ToUpper(g), managed, dns.TypeA)
		add("nope."+g, managed, dns.TypeA, dns.TypeSRV)
		add("a.b.c."+g, managed, dns.TypeA)
		add("_nope._tcp."+g, managed, dns.TypeSRV)
		if !managed {
			continue
		}
		slices, err := d.source.Client.DiscoveryV1().EndpointSlices(d.ns).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name,
		})
		if err != nil {
			return nil, 0, err
		}
		count := 0
		ports := map[string]bool{}
		for _, s := range slices.Items {
			for _, p := range s.Ports {
				if p.Name != nil && p.Protocol != nil {
					ports["_"+*p.Name+"._"+strings.ToLower(string(*p.Protocol))] = true
				}
			}
			for _, e := range s.Endpoints {
				count++
				for _, a := range e.Addresses {
					add(dashed(a)+"."+g, true, dns.TypeA, dns.TypeAAAA)
				}
				if e.Hostname != nil {
					add(*e.Hostname+"."+g, true, all...)
				}
			}
		}
		if n, ok := want[svc.Name]; ok && count != n {
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
	add("lonely-global."+d.ns+".svc."+zone, true, dns.TypeA)
	add("nothing-global."+d.ns+".svc."+zone, true, dns.TypeA, dns.TypeSRV)
	add("db-east."+d.ns+".svc."+zone, false, dns.TypeA)
	add("zz9."+d.ns+".svc."+zone, false, dns.TypeA)
	return qs, owned * 2, nil // asked over UDP and TCP
}

// compare asks every question of both servers over UDP and TCP.
func (d *differ) compare(qs []question) []string {
	var diffs []string
	for _, q := range qs {
		for _, network := range []string{"udp", "tcp"} {
			a, errA := dnsq.Ask(network, d.global, q.name, q.qtype, 0)
			b, errB := dnsq.Ask(network, d.kube, q.name, q.qtype, 0)
			if errA != nil || errB != nil {
				diffs = append(diffs, fmt.Sprintf("%s %s %s: errors %v / %v", network, dns.TypeToString[q.qtype], q.name, errA, errB))
				continue
			}
			if x, y := normalize(a), normalize(b); x != y {
				diffs = append(diffs, fmt.Sprintf("%s %s %s:\n  global:     %s\n  kubernetes: %s", network, dns.TypeToString[q.qtype], q.name, x, y))
			}
		}
	}
	return diffs
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
func (d *differ) answered() float64 {
	n, err := run.MetricSum(d.metrics, "coredns_global_requests_total")
	if err != nil {
		d.t.Fatal(err)
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

func first(s []string, n int) []string {
	if len(s) > n {
		return append(slices.Clone(s[:n]), fmt.Sprintf("… and %d more", len(s)-n))
	}
	return s
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

// meshMember is one cluster of the mesh: its world (the others linked into
// it, its controller and its CoreDNS) and its workload.
type meshMember struct {
	w  *world
	db *workload.Workload
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
	mesh := map[string]*meshMember{}
	for _, name := range names {
		c := env.Cluster(name)
		w := newWorldIn(t, c, "mesh")
		mesh[name] = &meshMember{w: w, db: w.Workload(c, "db", 3, prefixes[name])}
	}
	for _, from := range names {
		for _, to := range names {
			if from != to {
				mesh[from].w.Link(env.Cluster(to))
			}
		}
	}
	for _, name := range names {
		mesh[name].w.startController()
		mesh[name].w.startCoreDNS()
	}

	// want is what cluster home's db-global holds when the given clusters
	// are linked into it: its own pods by pod IP, the others' by their
	// endpoint mirrors' ClusterIPs, as "hostname=address".
	want := func(home string, linked []string, pods map[string]int) map[string]string {
		m := mesh[home]
		out := map[string]string{}
		for i := range pods[home] {
			out[fmt.Sprintf("db-%d", i)] = m.w.PodIP(m.db, i)
		}
		for _, other := range linked {
			if other == home {
				continue
			}
			for i := range pods[other] {
				host := fmt.Sprintf("db-%d-%s", i, other)
				out[host] = m.w.ClusterIP(host)
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
		mesh[name].checkOneGlobal()
		mesh[name].differential("full mesh")
	}

	// south leaves the mesh: the others unlink it, it unlinks them.
	left := time.Now()
	for _, other := range names[:3] {
		for _, err := range []error{mesh[other].w.Sim.Unlink(ctx, "south"), mesh["south"].w.Sim.Unlink(ctx, other)} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	converge("south unlinked", names[:3], names[:3])
	mesh["south"].w.await("south without links: no global", mesh["south"].w.global, mesh["south"].w.FQDN("db-global"), dns.TypeA, "NXDOMAIN +soa")
	t.Logf("south left the mesh: every cluster converged %v after the unlinks started", time.Since(left).Round(time.Millisecond))

	back := time.Now()
	for _, other := range names[:3] {
		mesh[other].w.Link(env.Cluster("south"))
		mesh["south"].w.Link(env.Cluster(other))
	}
	converge("south linked back", names, names)
	t.Logf("south rejoined the mesh: every cluster converged %v after the links started", time.Since(back).Round(time.Millisecond))
	for _, name := range names {
		mesh[name].differential("south linked back")
	}

	// A pod leaves east: no cluster answers for it longer than its mirror
	// takes to go.
	var wg sync.WaitGroup
	lag := map[string][2]time.Duration{}
	var mu sync.Mutex
	gone := time.Now()
	for _, other := range names[1:] {
		wg.Go(func() {
			mirror, dnsGone, err := mesh[other].waitGone("db-2-east", gone)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
			}
			lag[other] = [2]time.Duration{mirror, dnsGone}
		})
	}
	if err := mesh["east"].db.Scale(ctx, 2); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for other, l := range lag {
		t.Logf("east's db-2 gone: %s's mirror removed after %v, its DNS stopped answering it after %v",
			other, l[0].Round(time.Millisecond), l[1].Round(time.Millisecond))
		if l[1] > l[0]+time.Second {
			t.Errorf("%s answered for a pod gone from east %v after its mirror was removed", other, l[1]-l[0])
		}
	}
	pods["east"] = 2
	converge("east scaled to 2", names, names)
}

// expectGlobal waits until db-global holds exactly want ("hostname=address")
// in the plugin's per-pod answers and its A answer, and the same from the
// stock plugin over the controller's slices.
func (m *meshMember) expectGlobal(phase string, want map[string]string) {
	w := m.w
	all := dnsq.NoError(slices.Collect(maps.Values(want))...)
	for _, server := range []string{w.global, w.kube} {
		w.await(phase+" in "+w.Source.Name, server, w.FQDN("db-global"), dns.TypeA, all)
		for host, a := range want {
			w.await(phase+" in "+w.Source.Name, server, host+"."+w.FQDN("db-global"), dns.TypeA, dnsq.NoError(a))
		}
	}
}

// checkOneGlobal: exactly one global Service in the cluster, globalmirror's.
func (m *meshMember) checkOneGlobal() {
	w := m.w
	list, err := w.Source.Client.CoreV1().Services(w.NS).List(w.t.Context(), metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var globals []string
	for _, s := range list.Items {
		if strings.HasSuffix(s.Name, aggregate.DefaultSuffix) {
			globals = append(globals, s.Name)
			if !aggregate.WrittenByGlobalmirror(s.Labels) {
				w.t.Errorf("%s: %s is not globalmirror's", w.Source.Name, s.Name)
			}
		}
	}
	if !slices.Equal(globals, []string{"db-global"}) {
		w.t.Errorf("%s: global Services %v, want exactly db-global", w.Source.Name, globals)
	}
}

// differential compares the plugin with the stock plugin over the
// controller's slices for every name of db-global, over UDP and TCP.
func (m *meshMember) differential(phase string) {
	w := m.w
	hosts := []string{"db-9", "nope"}
	list, err := w.Source.Client.DiscoveryV1().EndpointSlices(w.NS).List(w.t.Context(), metav1.ListOptions{
		LabelSelector: "kubernetes.io/service-name=db-global"})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Hostname != nil {
				hosts = append(hosts, *e.Hostname)
			}
		}
	}
	qs := w.questions("db-global", hosts...)
	if diff := mapDiff(w.answers(w.kube, qs), w.answers(w.global, qs)); diff != "" {
		w.t.Errorf("%s, %s: the stock plugin (-) and the global plugin (+) differ:\n%s", phase, w.Source.Name, diff)
	}
}

// waitGone waits until the endpoint mirror host is gone from the cluster's
// API and from its DNS (the plugin's per-pod answer), polling both every few
// milliseconds, and returns when each went, measured from since.
func (m *meshMember) waitGone(host string, since time.Time) (mirror, dnsGone time.Duration, err error) {
	w := m.w
	name := host + "." + w.FQDN("db-global")
	err = await.Poll(context.Background(), 60*time.Second, 3*time.Millisecond, func(ctx context.Context) string {
		if mirror == 0 {
			_, err := w.Source.Client.CoreV1().Services(w.NS).Get(ctx, host, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				mirror = time.Since(since)
			}
		}
		if dnsGone == 0 && dnsq.Answer("udp", w.global, name, dns.TypeA) == "NXDOMAIN +soa" {
			dnsGone = time.Since(since)
		}
		if mirror == 0 || dnsGone == 0 {
			return fmt.Sprintf("mirror gone after %v, DNS after %v", mirror, dnsGone)
		}
		return ""
	})
	if err != nil {
		err = fmt.Errorf("%s: %s still there: %w", w.Source.Name, host, err)
	}
	return mirror, dnsGone, err
}
