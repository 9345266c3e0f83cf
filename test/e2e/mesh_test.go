package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/workload"
	"github.com/miekg/dns"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
	link := func(from, to string) {
		t.Helper()
		mesh[from].w.Link(env.Cluster(to))
	}
	for _, from := range names {
		for _, to := range names {
			if from != to {
				link(from, to)
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
		link(other, "south")
		link("south", other)
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
	var addrsWant []string
	for _, a := range want {
		addrsWant = append(addrsWant, a)
	}
	all := dnsq.NoError(addrsWant...)
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
