// Package integration runs the built CoreDNS (bin/coredns, with the global
// plugin) against real control planes: a source cluster where the mirror
// simulator writes what Linkerd's service mirror writes, and target clusters
// east and west whose StatefulSet-like workloads get real EndpointSlices from
// their kube-controller-managers. Answers are checked with a real DNS client
// over UDP and TCP. The globalmirror controller never runs here: the plugin
// answers on its own.
package integration

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var env *localkube.Env

func TestMain(m *testing.M) { os.Exit(localkube.Main(m, &env, "source", "east", "west")) }

var nonDNS = regexp.MustCompile(`[^a-z0-9]+`)

// namespaceFor is a namespace name from the test's name.
func namespaceFor(t *testing.T) string {
	ns := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-")
	return ns[:min(len(ns), 50)]
}

// corefile serves the global plugin for one namespace of the source cluster,
// with the stock kubernetes plugin behind it for every other name.
const corefile = `.:{$DNS_PORT} {
    bind 127.0.0.1
    ready 127.0.0.1:{$READY_PORT}
    prometheus 127.0.0.1:{$METRICS_PORT}
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
    kubernetes cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
}
`

// corefileKubernetesFirst lists kubernetes first: the plugin order is
// CoreDNS's directive order (global right before kubernetes), not the file's.
const corefileKubernetesFirst = `.:{$DNS_PORT} {
    bind 127.0.0.1
    ready 127.0.0.1:{$READY_PORT}
    prometheus 127.0.0.1:{$METRICS_PORT}
    kubernetes cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
}
`

// startCoreDNS runs bin/coredns against source for namespace ns and waits
// until it is ready (informers synced).
func startCoreDNS(t *testing.T, source *localkube.Cluster, ns, conf string) *run.CoreDNS {
	t.Helper()
	c, err := run.StartCoreDNS(t.Context(), run.CoreDNSOptions{
		Corefile:  conf,
		Dir:       t.TempDir(),
		Env:       []string{"SOURCE_KUBECONFIG=" + source.Kubeconfig, "NS=" + ns},
		WaitReady: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coredns log tail:\n%s", c.Log(8000))
		}
		c.Stop()
	})
	return c
}

// startSim runs a mirror simulator for ns writing into source.
func startSim(t *testing.T, source *localkube.Cluster, ns string) *mirrorsim.Simulator {
	t.Helper()
	sim, err := mirrorsim.Start(context.Background(), source.Config, mirrorsim.Options{
		Namespace: ns,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Stop)
	return sim
}

func exported() map[string]string { return map[string]string{workload.ExportedLabel: "true"} }

func newWorkload(t *testing.T, c *localkube.Cluster, ns, name string, replicas int, prefix string) *workload.Workload {
	t.Helper()
	w, err := workload.Create(t.Context(), c.Client, ns, name, replicas, workload.Options{
		Labels: exported(),
		IPv4:   netip.MustParsePrefix(prefix),
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// ---- DNS ----

// expect waits until name/qtype answers want over both UDP and TCP.
func expect(t *testing.T, c *run.CoreDNS, name string, qtype uint16, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, net := range []string{"udp", "tcp"} {
		for {
			got := dnsq.Summary(dnsq.Ask(net, c.Addr, name, qtype, 0))
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s over %s: got %q, want %q", name, dns.TypeToString[qtype], net, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func a(ips ...string) string {
	slices.Sort(ips)
	return "NOERROR " + strings.Join(ips, ",")
}

// clusterIP is the ClusterIP of a Service in the source cluster (for
// Linkerd's endpoint mirrors, the address a mirrored pod answers with).
func clusterIP(t *testing.T, source *localkube.Cluster, ns, name string) string {
	t.Helper()
	var ip string
	deadline := time.Now().Add(60 * time.Second)
	for {
		svc, err := source.Client.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			ip = svc.Spec.ClusterIP
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service %s/%s: %v", ns, name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ip
}

func podIP(t *testing.T, w *workload.Workload, ord int) string {
	t.Helper()
	ips, err := w.PodIPs(ord)
	if err != nil {
		t.Fatal(err)
	}
	return ips[0]
}

// noGlobalService checks that nothing wrote a global Service: the controller
// does not run, the plugin answered on its own.
func noGlobalService(t *testing.T, source *localkube.Cluster, ns, name string) {
	t.Helper()
	_, err := source.Client.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("service %s/%s: %v; want NotFound (no controller runs in these tests)", ns, name, err)
	}
	sl, err := source.Client.DiscoveryV1().EndpointSlices(ns).List(t.Context(), metav1.ListOptions{
		LabelSelector: aggregate.LabelManagedBy + "=" + aggregate.ManagedBy})
	if err != nil || len(sl.Items) > 0 {
		t.Errorf("managed EndpointSlices in %s: %v %v; want none", ns, len(sl.Items), err)
	}
}
