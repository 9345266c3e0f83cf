package integration

import (
	"context"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// catchUp is how soon after an API server's return the answers must follow
// a change: a few QuickReconnect retries and one relist. client-go's own
// backoff, after the restarts below, waits 6 to 25 s (make faults found
// answers 15 s stale); after a 410 its relist waits as long, and so did the
// feeds' until a relist after a restart stopped waiting (make faults found
// answers 8 s stale).
const catchUp = 3 * time.Second

// corefileGlobalOnly has no kubernetes plugin: only the global plugin's
// informers talk to the API server.
var corefileGlobalOnly = run.Corefile(`
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
`)

// TestCatchesUpAfterRepeatedRestarts restarts the API server several times
// in a row, then changes a mirror's endpoints as soon as it is back: the
// plugin must answer the change within catchUp, not once client-go's grown
// backoff lets its informers reconnect.
func TestCatchesUpAfterRepeatedRestarts(t *testing.T) {
	catchesUpAfter(t, "restarts", false, func(ctx context.Context, c *localkube.Cluster) error {
		return restartAPIServer(ctx, c)
	})
}

// TestCatchesUpAfterRepeatedCompactions compacts etcd past every version
// the informers hold and restarts the API server, several times in a row:
// each resumed watch meets 410 Gone and must list again. The plugin must
// answer the next change within catchUp, not after the reflector's relist
// backoff, which grows with each 410 (make faults found answers 18 s stale).
func TestCatchesUpAfterRepeatedCompactions(t *testing.T) {
	catchesUpAfter(t, "compactions", false, func(ctx context.Context, c *localkube.Cluster) error {
		if _, err := c.CompactEtcd(ctx); err != nil {
			return err
		}
		return restartAPIServer(ctx, c)
	})
}

// TestCatchesUpThroughRollingRestarts runs three kube-apiservers on one etcd
// behind one address and restarts them one after another, ten in all, as
// upgrades of a highly available control plane do: a watch resumed on one
// just restarted meets 410 (its watch cache starts at its own revision), and
// its relist must not wait however many came before.
func TestCatchesUpThroughRollingRestarts(t *testing.T) {
	restarted := 0
	catchesUpAfter(t, "rolling", true, func(ctx context.Context, c *localkube.Cluster) error {
		i := restarted % c.APIServers()
		restarted++
		return c.RestartAPIServerAt(ctx, i, time.Second)
	})
}

func restartAPIServer(ctx context.Context, c *localkube.Cluster) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	time.Sleep(time.Second)
	return c.StartAPIServer(ctx)
}

// catchesUpAfter disrupts the API ten times in a row and, each time it is
// back, changes a mirror's endpoints: every answer must follow within
// catchUp. The mirror is written directly (no simulator, no
// kube-controller-manager in the path), so that only the plugin's own
// informers are measured.
func catchesUpAfter(t *testing.T, name string, replicated bool, disrupt func(context.Context, *localkube.Cluster) error) {
	skipShort(t)
	t.Parallel()
	opts := localkube.Options{Clusters: []string{name + "-source"}}
	if replicated {
		opts.Replicated = opts.Clusters
	}
	own := localkube.StartTWith(t, opts)
	s := scenario.New(t, own.Cluster(name+"-source"))
	source, ns := s.Source, s.NS
	ctx := t.Context()
	if _, err := source.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}
	mirror := fixture.HeadlessMirror(ns, "db", "east", port)
	slice := fixture.Slice(mirror, "db-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(port),
		fixture.Ready("db-0", "198.51.100.1"), fixture.Ready("db-1", "198.51.100.2"), fixture.Ready("db-2", "198.51.100.3"))
	all := slice.Endpoints
	for _, o := range []metav1.Object{mirror, slice} {
		o.SetUID("")
		o.SetResourceVersion("")
	}
	if _, err := source.Client.CoreV1().Services(ns).Create(ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice, err := source.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dnsSrv := s.StartCoreDNS(corefileGlobalOnly)
	global := s.FQDN("db-global")
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError("198.51.100.1", "198.51.100.2", "198.51.100.3"))

	// Each disruption ends the informers' watches; client-go's delay before
	// it lists again grows with each (0.8 s doubling, jittered up to twice),
	// and so did the feeds' before a relist until it told a restart apart.
	var took []time.Duration
	for i := range 10 {
		if err := disrupt(ctx, source); err != nil {
			t.Fatal(err)
		}
		want := dnsq.NoError("198.51.100.1", "198.51.100.2", "198.51.100.3")
		if slice.Endpoints = all; i%2 == 0 {
			slice.Endpoints, want = all[:2], dnsq.NoError("198.51.100.1", "198.51.100.2")
		}
		if slice, err = source.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		changed := time.Now()
		if err := scenario.AwaitAnswer(ctx, "udp", dnsSrv.Addr, global, dns.TypeA, want, catchUp, 20*time.Millisecond); err != nil {
			t.Fatalf("%s %d, after the change to resourceVersion %s: %v: the informers did not catch up", name, i+1, slice.ResourceVersion, err)
		}
		took = append(took, time.Since(changed).Round(time.Millisecond))
	}
	t.Logf("after each of %d %s, answered the change written next in %v", len(took), name, took)
	s.AnswerBoth(dnsSrv.Addr, "db-2-east."+global, dns.TypeA, dnsq.NoError("198.51.100.3"))

	// Every list, the first and each relist, took the path of the API server's release.
	streams, err := localkube.StreamsListsAsReleased(ctx, source.Client)
	if err != nil {
		t.Fatal(err)
	}
	for path, taken := range map[kubeclient.Path]bool{kubeclient.Streamed: streams, kubeclient.Paged: !streams} {
		if n, err := run.MetricSum(dnsSrv.MetricsURL, "coredns_global_lists_total", `path="`+string(path)+`"`); err != nil || (n > 0) != taken {
			t.Errorf("coredns_global_lists_total{path=%q} = %v (%v); the API server streams lists: %v", path, n, err, streams)
		}
	}
}
