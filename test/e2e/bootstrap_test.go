package e2e

import (
	"context"
	"testing"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// testBootstrapBeforeReady: members of a StatefulSet must find each other
// before they are ready (etcd's, Postgres's and Elasticsearch's charts set
// publishNotReadyAddresses on their headless service). With it set on the
// local service and on east's, a pod not ready, here and in east, is in
// db-global and answers its own name, from the plugin and from the
// controller's slices alike: Kubernetes writes such pods ready in the local
// slices and in east's Endpoints, which Linkerd mirrors as any ready pod.
func testBootstrapBeforeReady(t *testing.T, env *localkube.Env) {
	w := newWorld(t, env, "boot")
	ctx := t.Context()
	local := w.Workload(w.Source, "db", 2, "192.0.2.128/27")
	east := w.Workload(w.east, "db", 2, "198.51.100.224/27")
	for _, c := range []*localkube.Cluster{w.Source, w.east} {
		svcs := c.Client.CoreV1().Services(w.NS)
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := svcs.Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				return err
			}
			svc.Spec.PublishNotReadyAddresses = true
			_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	w.startController()
	w.startCoreDNS(linkerdCorefile)
	db := w.FQDN("db-global")
	everyone := dnsq.NoError(w.PodIP(local, 0), w.PodIP(local, 1), w.ClusterIP("db-0-east"), w.ClusterIP("db-1-east"))
	w.await("db-global", w.global, db, dns.TypeA, everyone)

	if err := local.SetReady(ctx, "db-1", false); err != nil {
		t.Fatal(err)
	}
	if err := east.SetReady(ctx, "db-1", false); err != nil {
		t.Fatal(err)
	}
	// Once both clusters' slices say db-1 is not serving (and published
	// ready), and the mirror has taken east's change in: the answers are
	// as before, the two pods not ready in them.
	w.Eventually("db-1 not serving in both clusters, the mirror idle", func(ctx context.Context) string {
		for _, c := range []*localkube.Cluster{w.Source, w.east} {
			slices, err := c.Client.DiscoveryV1().EndpointSlices(w.NS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db"})
			if err != nil {
				return err.Error()
			}
			seen := false
			for _, s := range slices.Items {
				for _, e := range s.Endpoints {
					if e.Hostname != nil && *e.Hostname == "db-1" && e.Conditions.Serving != nil && !*e.Conditions.Serving {
						seen = true
					}
				}
			}
			if !seen {
				return c.Name + ": db-1 still serving"
			}
		}
		idle, cancel := context.WithTimeout(ctx, w.Timeout)
		defer cancel()
		if err := w.Sim.WaitIdle(idle); err != nil {
			return err.Error()
		}
		return ""
	})
	for _, server := range []string{w.global, w.kube} {
		for _, q := range []struct{ name, want string }{
			{db, everyone},
			{"db-1." + db, dnsq.NoError(w.PodIP(local, 1))},
			{"db-1-east." + db, dnsq.NoError(w.ClusterIP("db-1-east"))},
		} {
			for _, network := range []string{"udp", "tcp"} {
				if got := dnsq.Answer(network, server, q.name, dns.TypeA); got != q.want {
					t.Errorf("%s, not ready but published, from %s over %s: %q, want %q", q.name, server, network, got, q.want)
				}
			}
		}
	}
}
