//lint:file-ignore SA1019 Linkerd's service mirror reads and writes v1 Endpoints, so the simulator does.

package mirrorsim_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/mirrorsim"
	"github.com/globalmirror/globalmirror/test/workload"
)

const ns = "shop"

// TestMirrorsim runs the simulator between three real control planes and
// checks, after each change in a target, the exact mirrors in the source,
// including the EndpointSlices the real EndpointSlice mirroring controller
// makes of them.
func TestMirrorsim(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	ctx := t.Context()
	env := localkube.StartT(t, "source", "east", "west")
	source, east, west := env.Cluster("source"), env.Cluster("east"), env.Cluster("west")
	log := localkube.StderrLogger(false)

	exported := map[string]string{workload.ExportedLabel: "true", "tier": "data"}
	dbEast, err := workload.Create(ctx, east.Client, ns, "db", 3, workload.Options{
		Labels: exported, IPv4: netip.MustParsePrefix("198.51.100.0/24"),
	})
	must(t, err)

	sim, err := mirrorsim.Start(ctx, source.Config, mirrorsim.Options{Logger: log})
	must(t, err)
	t.Cleanup(sim.Stop)
	for _, c := range []*localkube.Cluster{east, west} {
		must(t, sim.Link(ctx, c.Name, c.Config))
	}
	// expect waits until the source holds c's mirrors as mirrored describes them.
	expect := func(c *localkube.Cluster, name, hosts string, gatewayUp, headlessReady bool) {
		t.Helper()
		step(t, name, func() string { return mirrored(ctx, source.Client, c, hosts, gatewayUp, headlessReady) })
	}
	// East was exported before the link, west after.
	expect(east, "east mirrored on link", "db-0 db-1 db-2", true, true)
	dbWest, err := workload.Create(ctx, west.Client, ns, "db", 3, workload.Options{
		Labels: exported, IPv4: netip.MustParsePrefix("203.0.113.0/24"),
	})
	must(t, err)
	expect(west, "west mirrored on export", "db-0 db-1 db-2", true, true)

	must(t, dbEast.Scale(ctx, 4))
	expect(east, "east scaled to 4", "db-0 db-1 db-2 db-3", true, true)

	must(t, dbEast.SetReady(ctx, "db-1", false))
	expect(east, "east db-1 not ready", "db-0 db-2 db-3", true, true)
	must(t, dbEast.SetReady(ctx, "db-1", true))
	expect(east, "east db-1 ready again", "db-0 db-1 db-2 db-3", true, true)

	must(t, sim.SetGatewayAlive("east", false))
	expect(east, "east gateway down", "db-0 db-1 db-2 db-3", false, true)
	must(t, sim.SetGatewayAlive("east", true))
	expect(east, "east gateway up", "db-0 db-1 db-2 db-3", true, true)

	// A pod mirrored while the gateway is dead: Linkerd writes the whole
	// headless mirror not ready, and its repair when the gateway returns
	// skips headless mirrors.
	must(t, sim.SetGatewayAlive("east", false))
	expect(east, "east gateway down again", "db-0 db-1 db-2 db-3", false, true)
	must(t, dbEast.Scale(ctx, 5))
	expect(east, "east scaled to 5 with the gateway down", "db-0 db-1 db-2 db-3 db-4", false, false)
	must(t, sim.SetGatewayAlive("east", true))
	expect(east, "east gateway back: endpoint mirrors repaired, headless mirror not", "db-0 db-1 db-2 db-3 db-4", true, false)
	idle(t, sim)
	if diff := mirrored(ctx, source.Client, east, "db-0 db-1 db-2 db-3 db-4", true, false); diff != "" {
		t.Fatalf("once the simulator is idle: %s", diff)
	}
	must(t, dbEast.Scale(ctx, 4))
	expect(east, "the next remote change rewrites the headless mirror ready", "db-0 db-1 db-2 db-3", true, true)

	// An annotation on the exported Service, as Helm and Argo CD write:
	// Linkerd copies it onto the headless mirror and rewrites the mirror's
	// Endpoints to the gateway, leaving the endpoint mirrors as they were;
	// nothing puts the pods back until the next remote Endpoints event.
	must(t, dbEast.Annotate(ctx, "argocd.argoproj.io/tracking-id", "shop:/Service:shop/db"))
	step(t, "east annotated: the gateway in db-east", func() string { return rewritten(ctx, source.Client, east, "db-0 db-1 db-2 db-3") })
	idle(t, sim)
	if diff := rewritten(ctx, source.Client, east, "db-0 db-1 db-2 db-3"); diff != "" {
		t.Fatalf("once the simulator is idle: %s", diff)
	}
	must(t, dbEast.SetReady(ctx, "db-3", false))
	expect(east, "the next remote Endpoints event puts the pods back", "db-0 db-1 db-2", true, true)
	must(t, dbEast.SetReady(ctx, "db-3", true))
	expect(east, "db-3 ready again", "db-0 db-1 db-2 db-3", true, true)

	must(t, dbWest.Delete(ctx))
	step(t, "west service deleted", func() string { return gone(ctx, source.Client, "west") })
	expect(east, "east untouched", "db-0 db-1 db-2 db-3", true, true)

	// A restarted simulator converges on what changed while it was down.
	sim.Stop()
	must(t, dbEast.Scale(ctx, 2))
	sim, err = mirrorsim.Start(ctx, source.Config, mirrorsim.Options{Logger: log})
	must(t, err)
	t.Cleanup(sim.Stop)
	must(t, sim.Link(ctx, "east", east.Config))
	expect(east, "restart converges", "db-0 db-1", true, true)

	must(t, sim.Unlink(ctx, "east"))
	step(t, "east unlinked", func() string { return gone(ctx, source.Client, "east") })

	// A gateway down from the start never passed a probe: Linkerd's probe
	// reports no failure, so nothing is marked not ready.
	must(t, sim.Link(ctx, "west", west.Config, mirrorsim.GatewayDown()))
	_, err = workload.Create(ctx, west.Client, ns, "db", 2, workload.Options{
		Labels: exported, IPv4: netip.MustParsePrefix("203.0.113.0/24"),
	})
	must(t, err)
	expect(west, "west linked with its gateway down", "db-0 db-1", true, true)
	must(t, sim.SetGatewayAlive("west", false))
	idle(t, sim)
	if diff := mirrored(ctx, source.Client, west, "db-0 db-1", true, true); diff != "" {
		t.Fatalf("a gateway that never passed a probe was marked dead: %s", diff)
	}
	if l := sim.Links(); len(l) != 1 || !l[0].GatewayAlive || l[0].GatewayUp {
		t.Errorf("links %+v, want west alive to the mirrors while its probes fail", l)
	}
	// Its first success, then a failure: now the mirrors say so.
	must(t, sim.SetGatewayAlive("west", true))
	must(t, sim.SetGatewayAlive("west", false))
	expect(west, "west's gateway up once, then down", "db-0 db-1", false, true)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// idle waits until the simulator has nothing left to do.
func idle(t *testing.T, sim *mirrorsim.Simulator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := sim.WaitIdle(ctx); err != nil {
		t.Fatalf("simulator not idle: %v", err)
	}
}

// step waits up to 60 s for check to report no difference, and logs how long
// the change took to show.
func step(t *testing.T, name string, check func() string) {
	t.Helper()
	start := time.Now()
	if err := await.Poll(t.Context(), 60*time.Second, 10*time.Millisecond, func(context.Context) string { return check() }); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Logf("%s: %v", name, time.Since(start).Round(time.Millisecond))
}

// mirrored describes how the source's mirrors of db from cluster c differ
// from: endpoint mirrors <host>-<c> for exactly hosts (space separated), each
// a ClusterIP Service whose Endpoints hold the gateway, ready iff gatewayUp;
// the headless mirror db-<c> with Linkerd's labels and annotations; its
// Endpoints and its mirrored EndpointSlices mapping each host to its endpoint
// mirror's ClusterIP, all ready iff headlessReady, and no trigger times.
func mirrored(ctx context.Context, src kubernetes.Interface, c *localkube.Cluster, hosts string, gatewayUp, headlessReady bool) string {
	var diffs []string
	differ := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	sameMap := func(what string, got, want map[string]string) {
		if !maps.Equal(got, want) {
			differ("%s %v, want %v", what, got, want)
		}
	}
	mirrorName := "db-" + c.Name
	own := map[string]string{"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": c.Name}

	remote, err := c.Client.CoreV1().Services(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	svc, err := src.CoreV1().Services(ns).Get(ctx, mirrorName, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	sameMap(mirrorName+" labels", svc.Labels, merge(own, map[string]string{"tier": "data"}))
	sameMap(mirrorName+" annotations", svc.Annotations, merge(remote.Annotations, map[string]string{
		"mirror.linkerd.io/remote-svc-fq-name":      "db." + ns + ".svc.cluster.local",
		"mirror.linkerd.io/remote-resource-version": remote.ResourceVersion,
	}))
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "db" || svc.Spec.Ports[0].Port != 5432 {
		differ("%s clusterIP %q ports %+v, want headless, db 5432", mirrorName, svc.Spec.ClusterIP, svc.Spec.Ports)
	}

	// Endpoint mirrors: exactly one per wanted host.
	list, err := src.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{
		"mirror.linkerd.io/cluster-name": c.Name, "mirror.linkerd.io/headless-mirror-svc-name": mirrorName,
	}.String()})
	if err != nil {
		return err.Error()
	}
	clusterIPs := map[string]string{} // hostname → ClusterIP of its endpoint mirror
	var got []string
	for _, em := range list.Items {
		host := strings.TrimSuffix(em.Name, "-"+c.Name)
		got = append(got, host)
		clusterIPs[host] = em.Spec.ClusterIP
		sameMap(em.Name+" labels", em.Labels, merge(svc.Labels, map[string]string{"mirror.linkerd.io/headless-mirror-svc-name": mirrorName}))
		if em.Spec.Type != corev1.ServiceTypeClusterIP || em.Spec.ClusterIP == "" || em.Spec.ClusterIP == corev1.ClusterIPNone {
			differ("%s type %s clusterIP %q, want a ClusterIP", em.Name, em.Spec.Type, em.Spec.ClusterIP)
		}
		eps, err := src.CoreV1().Endpoints(ns).Get(ctx, em.Name, metav1.GetOptions{})
		if err != nil {
			differ("%s endpoints: %v", em.Name, err)
			continue
		}
		gw := []corev1.EndpointAddress{{IP: "192.0.2.254"}}
		wantSubset := corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Name: "db", Port: 4143, Protocol: corev1.ProtocolTCP}}}
		if gatewayUp {
			wantSubset.Addresses = gw
		} else {
			wantSubset.NotReadyAddresses = gw
		}
		if len(eps.Subsets) != 1 || fmt.Sprint(eps.Subsets[0]) != fmt.Sprint(wantSubset) {
			differ("%s endpoints %+v, want %+v", em.Name, eps.Subsets, wantSubset)
		}
	}
	slices.Sort(got)
	if strings.Join(got, " ") != hosts {
		differ("endpoint mirrors for %q, want %q", strings.Join(got, " "), hosts)
	}
	want := map[string]string{}
	for _, h := range strings.Fields(hosts) {
		want[h] = clusterIPs[h]
	}

	// The headless mirror's Endpoints, as the simulator writes them.
	eps, err := src.CoreV1().Endpoints(ns).Get(ctx, mirrorName, metav1.GetOptions{})
	if err != nil {
		return strings.Join(append(diffs, err.Error()), "\n")
	}
	sameMap(mirrorName+" endpoints labels", eps.Labels, svc.Labels)
	ready, notReady := map[string]string{}, map[string]string{}
	for _, s := range eps.Subsets {
		for _, a := range s.Addresses {
			ready[a.Hostname] = a.IP
		}
		for _, a := range s.NotReadyAddresses {
			notReady[a.Hostname] = a.IP
		}
		if len(s.Ports) != 1 || s.Ports[0].Name != "db" || s.Ports[0].Port != 5432 {
			differ("%s endpoints ports %+v, want db 5432", mirrorName, s.Ports)
		}
	}
	wantReady, wantNotReady := want, map[string]string{}
	if !headlessReady {
		wantReady, wantNotReady = wantNotReady, wantReady
	}
	sameMap(mirrorName+" endpoints ready", ready, wantReady)
	sameMap(mirrorName+" endpoints not ready", notReady, wantNotReady)
	if _, ok := eps.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		differ("%s endpoints carry a trigger time; Linkerd's do not", mirrorName)
	}

	// The EndpointSlices kube-controller-manager mirrors from them.
	slicesList, err := src.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + mirrorName,
	})
	if err != nil {
		return err.Error()
	}
	sliced := map[string]string{}
	for _, s := range slicesList.Items {
		if s.Labels[discoveryv1.LabelManagedBy] != "endpointslicemirroring-controller.k8s.io" ||
			s.Labels["mirror.linkerd.io/cluster-name"] != c.Name || s.Labels["mirror.linkerd.io/mirrored-service"] != "true" {
			differ("slice %s labels %v, want Linkerd's, managed by the mirroring controller", s.Name, s.Labels)
		}
		if _, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
			differ("slice %s carries a trigger time; the mirrored slices of Linkerd's Endpoints do not", s.Name)
		}
		for _, e := range s.Endpoints {
			if e.Hostname != nil && (e.Conditions.Ready == nil || *e.Conditions.Ready) == headlessReady {
				sliced[*e.Hostname] = e.Addresses[0]
			}
		}
	}
	sameMap(fmt.Sprintf("%s slices (ready %v)", mirrorName, headlessReady), sliced, want)
	return strings.Join(diffs, "\n")
}

// rewritten describes how the source's mirrors of db from cluster c differ
// from what Linkerd leaves after an update of the exported Service: the
// headless mirror's Endpoints and slices hold the gateway alone, without a
// hostname, on the gateway port, and the endpoint mirrors of hosts are still
// there.
func rewritten(ctx context.Context, src kubernetes.Interface, c *localkube.Cluster, hosts string) string {
	var diffs []string
	mirrorName := "db-" + c.Name
	remote, err := c.Client.CoreV1().Services(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	svc, err := src.CoreV1().Services(ns).Get(ctx, mirrorName, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for k, v := range remote.Annotations {
		if svc.Annotations[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s annotation %s=%q, want %q as on the exported Service", mirrorName, k, svc.Annotations[k], v))
		}
	}
	eps, err := src.CoreV1().Endpoints(ns).Get(ctx, mirrorName, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	want := []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.254"}},
		Ports: []corev1.EndpointPort{{Name: "db", Port: 4143, Protocol: corev1.ProtocolTCP}}}}
	if fmt.Sprint(eps.Subsets) != fmt.Sprint(want) || eps.Annotations[mirrorsim.AnnotationRemoteGatewayIdentity] != mirrorsim.DefaultGatewayIdentity {
		diffs = append(diffs, fmt.Sprintf("%s endpoints %+v %v, want the gateway %+v and its identity", mirrorName, eps.Subsets, eps.Annotations, want))
	}
	slicesList, err := src.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + mirrorName})
	if err != nil {
		return err.Error()
	}
	var sliced []string
	for _, s := range slicesList.Items {
		for _, e := range s.Endpoints {
			sliced = append(sliced, fmt.Sprintf("%v %v", e.Addresses, e.Hostname != nil))
		}
	}
	if fmt.Sprint(sliced) != "[[192.0.2.254] false]" {
		diffs = append(diffs, fmt.Sprintf("%s slices hold %v, want the gateway alone, no hostname", mirrorName, sliced))
	}
	list, err := src.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: "mirror.linkerd.io/headless-mirror-svc-name=" + mirrorName})
	if err != nil {
		return err.Error()
	}
	var got []string
	for _, em := range list.Items {
		got = append(got, strings.TrimSuffix(em.Name, "-"+c.Name))
	}
	slices.Sort(got)
	if strings.Join(got, " ") != hosts {
		diffs = append(diffs, fmt.Sprintf("endpoint mirrors for %q, want %q", strings.Join(got, " "), hosts))
	}
	return strings.Join(diffs, "\n")
}

// gone describes what of cluster's mirrors is left in the source.
func gone(ctx context.Context, src kubernetes.Interface, cluster string) string {
	sel := metav1.ListOptions{LabelSelector: "mirror.linkerd.io/cluster-name=" + cluster}
	svcs, err1 := src.CoreV1().Services(ns).List(ctx, sel)
	eps, err2 := src.CoreV1().Endpoints(ns).List(ctx, sel)
	sls, err3 := src.DiscoveryV1().EndpointSlices(ns).List(ctx, sel)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err.Error()
	}
	var left []string
	for _, list := range []runtime.Object{svcs, eps, sls} {
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			left = append(left, fmt.Sprintf("%T %s", o, o.(metav1.Object).GetName()))
			return nil
		})
	}
	if len(left) > 0 {
		return "left: " + strings.Join(left, ", ")
	}
	return ""
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
