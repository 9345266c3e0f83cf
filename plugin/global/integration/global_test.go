package integration

import (
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts control planes") // `make test-unit`; `make test` runs it
	}
}

// TestLifecycle follows one global service through links, scaling, readiness,
// gateway failures and unlinks, with one CoreDNS process that is never
// restarted.
func TestLifecycle(t *testing.T) {
	skipShort(t)
	t.Parallel()
	ns := namespaceFor(t)
	source, east, west := env.Cluster("source"), env.Cluster("east"), env.Cluster("west")
	ctx := t.Context()

	local := newWorkload(t, source, ns, "db", 1, "192.0.2.0/25")
	eastDB := newWorkload(t, east, ns, "db", 3, "198.51.100.0/24")
	westDB := newWorkload(t, west, ns, "db", 2, "203.0.113.0/24")
	sim := startSim(t, source, ns)
	if err := sim.Link(ctx, "east", east.Config); err != nil {
		t.Fatal(err)
	}
	dnsSrv := startCoreDNS(t, source, ns, corefile)

	global := "db-global." + ns + ".svc.cluster.local."
	pod := func(host string) string { return host + "." + global }
	cip := func(name string) string { return clusterIP(t, source, ns, name) }
	nxdomain := "NXDOMAIN +soa"

	// East is linked: the local pod and east's pods, under their global names,
	// with the addresses of Linkerd's endpoint mirrors.
	localIP := podIP(t, local, 0)
	e0, e1, e2 := cip("db-0-east"), cip("db-1-east"), cip("db-2-east")
	expect(t, dnsSrv, global, dns.TypeA, a(localIP, e0, e1, e2))
	expect(t, dnsSrv, pod("db-0"), dns.TypeA, a(localIP))
	expect(t, dnsSrv, pod("db-1-east"), dns.TypeA, a(e1))
	// The same address as Linkerd's endpoint mirror, answered by the kubernetes plugin.
	expect(t, dnsSrv, "db-1-east."+ns+".svc.cluster.local.", dns.TypeA, a(e1))
	srv := func(hosts ...string) string {
		var recs []string
		for _, h := range hosts {
			recs = append(recs, "5432 "+pod(h))
		}
		return a(recs...)
	}
	expect(t, dnsSrv, global, dns.TypeSRV, srv("db-0", "db-0-east", "db-1-east", "db-2-east"))
	expect(t, dnsSrv, "_db._tcp."+global, dns.TypeSRV, srv("db-0", "db-0-east", "db-1-east", "db-2-east"))
	expect(t, dnsSrv, pod("db-0-west"), dns.TypeA, nxdomain)
	expect(t, dnsSrv, global, dns.TypeAAAA, "NOERROR +soa") // NODATA
	// Other names go to the kubernetes plugin: the local headless service.
	expect(t, dnsSrv, "db."+ns+".svc.cluster.local.", dns.TypeA, a(localIP))

	// West is linked while CoreDNS runs: its pods answer without a restart.
	if err := sim.Link(ctx, "west", west.Config); err != nil {
		t.Fatal(err)
	}
	w0, w1 := cip("db-0-west"), cip("db-1-west")
	expect(t, dnsSrv, pod("db-1-west"), dns.TypeA, a(w1))
	expect(t, dnsSrv, global, dns.TypeA, a(localIP, e0, e1, e2, w0, w1))

	// East scales down: db-2-east is gone.
	if err := eastDB.Scale(ctx, 2); err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, pod("db-2-east"), dns.TypeA, nxdomain)
	expect(t, dnsSrv, global, dns.TypeA, a(localIP, e0, e1, w0, w1))

	// A west pod turns not ready: Linkerd drops it, so do we.
	if err := westDB.SetReady(ctx, "db-1", false); err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, pod("db-1-west"), dns.TypeA, nxdomain)
	expect(t, dnsSrv, global, dns.TypeA, a(localIP, e0, e1, w0))
	// ... and comes back with a new endpoint mirror (a new ClusterIP).
	if err := westDB.SetReady(ctx, "db-1", true); err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, pod("db-1-west"), dns.TypeA, a(cip("db-1-west")))

	// West's gateway fails: its pods leave, though its headless mirror stays ready.
	if err := sim.SetGatewayAlive("west", false); err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, pod("db-0-west"), dns.TypeA, nxdomain)
	expect(t, dnsSrv, pod("db-1-west"), dns.TypeA, nxdomain)
	expect(t, dnsSrv, global, dns.TypeA, a(localIP, e0, e1))
	if err := sim.SetGatewayAlive("west", true); err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, pod("db-0-west"), dns.TypeA, a(w0))

	// West is unlinked: gone.
	if err := sim.Unlink(ctx, "west"); err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, pod("db-0-west"), dns.TypeA, nxdomain)
	expect(t, dnsSrv, global, dns.TypeA, a(localIP, e0, e1))

	// East is unlinked too: the local service alone makes no global, the
	// name is no longer ours and the kubernetes plugin has no such service.
	if err := sim.Unlink(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, global, dns.TypeA, nxdomain)
	expect(t, dnsSrv, pod("db-0"), dns.TypeA, nxdomain)
	noGlobalService(t, source, ns, "db-global")
}

// TestUserOwnedName: a Service a user created under a global's name is
// theirs; the plugin steps aside and the kubernetes plugin answers it.
func TestUserOwnedName(t *testing.T) {
	skipShort(t)
	t.Parallel()
	ns := namespaceFor(t)
	source, east := env.Cluster("source"), env.Cluster("east")
	ctx := t.Context()
	newWorkload(t, east, ns, "cache", 1, "198.51.100.0/24")
	sim := startSim(t, source, ns)
	if err := sim.Link(ctx, "east", east.Config); err != nil {
		t.Fatal(err)
	}
	dnsSrv := startCoreDNS(t, source, ns, corefileKubernetesFirst)
	global := "cache-global." + ns + ".svc.cluster.local."
	expect(t, dnsSrv, global, dns.TypeA, a(clusterIP(t, source, ns, "cache-0-east")))

	user := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "cache-global", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "x", Port: 80}}},
	}
	created, err := source.Client.CoreV1().Services(ns).Create(ctx, user, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, global, dns.TypeA, a(created.Spec.ClusterIP))
	expect(t, dnsSrv, "cache-0-east."+global, dns.TypeA, "NXDOMAIN +soa")
	if err := source.Client.CoreV1().Services(ns).Delete(ctx, "cache-global", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, dnsSrv, global, dns.TypeA, a(clusterIP(t, source, ns, "cache-0-east")))
}
