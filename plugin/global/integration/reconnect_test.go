package integration

import (
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// catchUp is how soon after an API server's return the answers must follow
// a change: a few QuickReconnect retries. client-go's own backoff, after the
// restarts below, waits 6 to 25 s (make faults found answers 15 s stale).
const catchUp = 3 * time.Second

// corefileGlobalOnly has no kubernetes plugin: only the global plugin's
// informers talk to the API server.
const corefileGlobalOnly = `.:{$DNS_PORT} {
    bind 127.0.0.1
    ready 127.0.0.1:{$READY_PORT}
    prometheus 127.0.0.1:{$METRICS_PORT}
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
}
`

// TestCatchesUpAfterRepeatedRestarts restarts the API server several times
// in a row, then changes a mirror's endpoints as soon as it is back: the
// plugin must answer the change within catchUp, not once client-go's grown
// backoff lets its informers reconnect. The mirror is written directly (no
// simulator, no kube-controller-manager in the path), so that only the
// plugin's own reconnection is measured.
func TestCatchesUpAfterRepeatedRestarts(t *testing.T) {
	skipShort(t)
	t.Parallel()
	own := localkube.StartT(t, "restarts-source")
	s := scenario.New(t, own.Cluster("restarts-source"))
	source, ns := s.Source, s.NS
	ctx := t.Context()
	if _, err := source.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}
	mirror := fixture.HeadlessMirror(ns, "db", "east", port)
	slice := fixture.Slice(mirror, "db-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(port),
		fixture.Ready("db-0", "198.51.100.1"), fixture.Ready("db-1", "198.51.100.2"), fixture.Ready("db-2", "198.51.100.3"))
	for _, o := range []metav1.Object{mirror, slice} {
		o.SetUID("")
		o.SetResourceVersion("")
	}
	if _, err := source.Client.CoreV1().Services(ns).Create(ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := source.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dnsSrv := s.StartCoreDNS(corefileGlobalOnly)
	global := s.FQDN("db-global")
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, dnsq.NoError("198.51.100.1", "198.51.100.2", "198.51.100.3"))

	// Each restart fails the informers' watches and grows client-go's
	// backoff, which resets only after two quiet minutes.
	for i := range 4 {
		if err := source.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if err := source.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("restart %d done", i+1)
	}

	slice.Endpoints = slice.Endpoints[:2]
	updated, err := source.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	want := dnsq.NoError("198.51.100.1", "198.51.100.2")
	for {
		if got := dnsq.Answer("udp", dnsSrv.Addr, global, dns.TypeA); got == want {
			break
		} else if time.Since(changed) > catchUp {
			t.Fatalf("%s still answers %q %v after the change (resourceVersion %s), want %q: the informers did not reconnect",
				global, got, time.Since(changed).Round(time.Millisecond), updated.ResourceVersion, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("answered the change %v after it was written", time.Since(changed).Round(time.Millisecond))
	s.AnswerBoth(dnsSrv.Addr, "db-2-east."+global, dns.TypeA, "NXDOMAIN +soa")
}
