package integration

import (
	"testing"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/scenario"
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
	s := scenario.New(t, env.Cluster("source"))
	source, east, west := s.Source, env.Cluster("east"), env.Cluster("west")
	ctx := t.Context()

	local := s.Workload(source, "db", 1, "192.0.2.0/25")
	eastDB := s.Workload(east, "db", 3, "198.51.100.0/24")
	westDB := s.Workload(west, "db", 2, "203.0.113.0/24")
	s.Link(east)
	dnsSrv := s.StartCoreDNS(corefile)

	global := s.FQDN("db-global")
	pod := func(host string) string { return host + "." + global }
	cip := s.ClusterIP
	nxdomain := "NXDOMAIN +soa"

	// East is linked: the local pod and east's pods, under their global names,
	// with the addresses of Linkerd's endpoint mirrors.
	localIP := s.PodIP(local, 0)
	e0, e1, e2 := cip("db-0-east"), cip("db-1-east"), cip("db-2-east")
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(localIP, e0, e1, e2))
	s.AnswerBoth(dnsSrv.Addr, pod("db-0"), dns.TypeA, dnsq.NoError(localIP))
	s.AnswerBoth(dnsSrv.Addr, pod("db-1-east"), dns.TypeA, dnsq.NoError(e1))
	// The same address as Linkerd's endpoint mirror, answered by the kubernetes plugin.
	s.AnswerBoth(dnsSrv.Addr, s.FQDN("db-1-east"), dns.TypeA, dnsq.NoError(e1))
	srv := func(hosts ...string) string {
		var recs []string
		for _, h := range hosts {
			recs = append(recs, "5432 "+pod(h))
		}
		return dnsq.NoError(recs...)
	}
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeSRV, srv("db-0", "db-0-east", "db-1-east", "db-2-east"))
	s.AnswerBoth(dnsSrv.Addr, "_db._tcp."+global, dns.TypeSRV, srv("db-0", "db-0-east", "db-1-east", "db-2-east"))
	s.AnswerBoth(dnsSrv.Addr, pod("db-0-west"), dns.TypeA, nxdomain)
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeAAAA, "NOERROR +soa") // NODATA
	// Other names go to the kubernetes plugin: the local headless service.
	s.AnswerBoth(dnsSrv.Addr, s.FQDN("db"), dns.TypeA, dnsq.NoError(localIP))

	// West is linked while CoreDNS runs: its pods answer without a restart.
	s.Link(west)
	w0, w1 := cip("db-0-west"), cip("db-1-west")
	s.AnswerBoth(dnsSrv.Addr, pod("db-1-west"), dns.TypeA, dnsq.NoError(w1))
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(localIP, e0, e1, e2, w0, w1))

	// East scales down: db-2-east is gone.
	if err := eastDB.Scale(ctx, 2); err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, pod("db-2-east"), dns.TypeA, nxdomain)
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(localIP, e0, e1, w0, w1))

	// A west pod turns not ready: Linkerd drops it, so do we.
	if err := westDB.SetReady(ctx, "db-1", false); err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, pod("db-1-west"), dns.TypeA, nxdomain)
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(localIP, e0, e1, w0))
	// ... and comes back with a new endpoint mirror (a new ClusterIP).
	if err := westDB.SetReady(ctx, "db-1", true); err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, pod("db-1-west"), dns.TypeA, dnsq.NoError(cip("db-1-west", w1)))

	// West's gateway fails: its pods leave, though its headless mirror stays ready.
	if err := s.Sim.SetGatewayAlive("west", false); err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, pod("db-0-west"), dns.TypeA, nxdomain)
	s.AnswerBoth(dnsSrv.Addr, pod("db-1-west"), dns.TypeA, nxdomain)
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(localIP, e0, e1))
	if err := s.Sim.SetGatewayAlive("west", true); err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, pod("db-0-west"), dns.TypeA, dnsq.NoError(w0))

	// West is unlinked: gone.
	if err := s.Sim.Unlink(ctx, "west"); err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, pod("db-0-west"), dns.TypeA, nxdomain)
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(localIP, e0, e1))

	// East is unlinked too: the local service alone makes no global, the
	// name is no longer ours and the kubernetes plugin has no such service.
	if err := s.Sim.Unlink(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, nxdomain)
	s.AnswerBoth(dnsSrv.Addr, pod("db-0"), dns.TypeA, nxdomain)
	noGlobalService(t, s, "db-global")
}

// TestUserOwnedName: a Service a user created under a global's name is
// theirs; the plugin steps aside and the kubernetes plugin answers it.
func TestUserOwnedName(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := scenario.New(t, env.Cluster("source"))
	source, east, ns := s.Source, env.Cluster("east"), s.NS
	ctx := t.Context()
	s.Workload(east, "cache", 1, "198.51.100.0/24")
	s.Link(east)
	dnsSrv := s.StartCoreDNS(corefileKubernetesFirst)
	global := s.FQDN("cache-global")
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(s.ClusterIP("cache-0-east")))

	user := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "cache-global", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "x", Port: 80}}},
	}
	created, err := source.Client.CoreV1().Services(ns).Create(ctx, user, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(created.Spec.ClusterIP))
	s.AnswerBoth(dnsSrv.Addr, "cache-0-east."+global, dns.TypeA, "NXDOMAIN +soa")
	if err := source.Client.CoreV1().Services(ns).Delete(ctx, "cache-global", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError(s.ClusterIP("cache-0-east")))
}
