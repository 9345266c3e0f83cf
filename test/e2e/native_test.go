package e2e

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// testNativeNames: the local db opts into native names. Its own name then
// answers every pod, local and mirrored, with the global per-pod names, from
// the plugin at once and, once the controller added the mirrors' endpoints
// as slices of db, from the stock plugin alike; Kubernetes' own slices of db
// are never touched. A local pod named like a mirrored pod's global name
// keeps the name. Opting out gives db back its local answers.
func testNativeNames(t *testing.T, env *localkube.Env) {
	w := newWorld(t, env, "native")
	ctx := t.Context()
	local := w.Workload(w.Source, "db", 2, "192.0.2.160/27")
	w.Workload(w.east, "db", 2, "198.51.100.32/27")
	// A local pod whose hostname is east's db-1's global name: it wins the name.
	collidingPod(ctx, t, w.Source, w.NS, "db-0", "db-1-east", "192.0.2.190")
	w.startController()
	w.startCoreDNS(linkerdCorefile)

	db := w.FQDN("db")
	localOnly := dnsq.NoError(w.PodIP(local, 0), w.PodIP(local, 1), "192.0.2.190")
	w.await("db before opting in, plugin", w.global, db, dns.TypeA, localOnly)
	w.await("db before opting in, stock", w.kube, db, dns.TypeA, localOnly)
	kubeSlices := w.kubernetesSlices(ctx, "db")

	// setAnnotation sets the opt-in annotation to value (JSON; null removes it).
	setAnnotation := func(value string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, aggregate.AnnotationIncludeMirrors, value)
		if _, err := w.Source.Client.CoreV1().Services(w.NS).Patch(ctx, "db", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Opted in while the controller is down: the plugin answers from its
	// index alone, the stock plugin still has db's local pods only.
	w.ctrl.Stop()
	setAnnotation(`"true"`)
	everyone := dnsq.NoError(w.PodIP(local, 0), w.PodIP(local, 1), "192.0.2.190", w.ClusterIP("db-0-east"), w.ClusterIP("db-1-east"))
	pluginTook := w.await("db opted in, plugin", w.global, db, dns.TypeA, everyone)
	if got := dnsq.Answer("udp", w.kube, db, dns.TypeA); got != localOnly {
		t.Errorf("the stock plugin answers %q without the controller, want db's local pods %q", got, localOnly)
	}
	w.startController()
	stockTook := w.await("db opted in, stock over the controller's slices", w.kube, db, dns.TypeA, everyone)
	t.Logf("opted in: the plugin answered after %v; the stock plugin %v after the controller started",
		pluginTook.Round(time.Millisecond), stockTook.Round(time.Millisecond))
	for name, want := range map[string]string{
		"db-0.":      dnsq.NoError(w.PodIP(local, 0)),
		"db-0-east.": dnsq.NoError(w.ClusterIP("db-0-east")),
		"db-1-east.": dnsq.NoError("192.0.2.190"), // the local pod keeps the name
	} {
		w.await("native per-pod name "+name, w.global, name+db, dns.TypeA, want)
		w.await("native per-pod name "+name+", stock", w.kube, name+db, dns.TypeA, want)
	}
	qs := w.questions("db", "db-0", "db-1", "db-0-east", "db-1-east", "db-9", "198-51-100-33")
	// East's db-1, named by its address.
	qs = append(qs, question{name: dashed(w.ClusterIP("db-1-east")) + "." + db, qtype: dns.TypeA})
	if diff := mapDiff(w.answers(w.kube, qs), w.answers(w.global, qs)); diff != "" {
		t.Errorf("native names: the stock plugin (-) and the global plugin (+) differ:\n%s", diff)
	}
	if got := w.kubernetesSlices(ctx, "db"); !maps.Equal(got, kubeSlices) {
		t.Errorf("Kubernetes' own slices of db changed: %v, were %v", got, kubeSlices)
	}

	// Opting out: db answers its local pods again, from both servers, and
	// globalmirror's slices of db are gone.
	setAnnotation("null")
	took := w.await("db opted out, stock", w.kube, db, dns.TypeA, localOnly)
	w.await("db opted out, plugin", w.global, db, dns.TypeA, localOnly)
	t.Logf("opted out: the extra slices were gone after %v", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("opting out took %v, want under a second", took)
	}
	list, err := w.Source.Client.DiscoveryV1().EndpointSlices(w.NS).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=db," + discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("globalmirror's slices of db after opting out: %d (%v)", len(list.Items), err)
	}
	if got := w.kubernetesSlices(ctx, "db"); !maps.Equal(got, kubeSlices) {
		t.Errorf("Kubernetes' own slices of db changed: %v, were %v", got, kubeSlices)
	}
}

// kubernetesSlices are the slices Kubernetes' EndpointSlice controller wrote
// for service, by name, with their resourceVersions.
func (w *world) kubernetesSlices(ctx context.Context, service string) map[string]string {
	w.t.Helper()
	list, err := w.Source.Client.DiscoveryV1().EndpointSlices(w.NS).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + service + "," + discoveryv1.LabelManagedBy + "=endpointslice-controller.k8s.io"})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Name] = s.ResourceVersion
	}
	if len(out) == 0 {
		w.t.Fatalf("no slices of %s from the EndpointSlice controller", service)
	}
	return out
}
