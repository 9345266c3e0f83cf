//lint:file-ignore SA1019 Linkerd's service mirror writes v1 Endpoints, so the test does.

package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLargeMember: a 500-endpoint member truncates over UDP (TC set, as
// CoreDNS's server scrubs replies to the client's buffer) and comes whole
// over TCP.
func TestLargeMember(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := scenario.New(t, env.Cluster("source"))
	source, ns := s.Source, s.NS
	ctx := t.Context()
	const n = 500

	// What Linkerd's service mirror writes for a 500-pod headless service of
	// cluster "east": the headless mirror and its Endpoints; Kubernetes'
	// mirroring controller turns them into EndpointSlices.
	if _, err := source.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "east"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "big-east", Namespace: ns, Labels: labels,
			Annotations: map[string]string{aggregate.AnnotationRemoteFQName: "big." + ns + ".svc.cluster.local"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := source.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eps := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "big-east", Namespace: ns, Labels: labels},
		Subsets:    []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}}}},
	}
	var want []string
	for i := range n {
		ip := fmt.Sprintf("198.51.100.%d", i+1)
		if i >= 250 {
			ip = fmt.Sprintf("203.0.113.%d", i-250+1)
		}
		want = append(want, ip)
		eps.Subsets[0].Addresses = append(eps.Subsets[0].Addresses, corev1.EndpointAddress{IP: ip, Hostname: "big-" + strconv.Itoa(i)})
	}
	if _, err := source.Client.CoreV1().Endpoints(ns).Create(ctx, eps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dnsSrv := s.StartCoreDNS(corefile)
	global := s.FQDN("big-global")

	// TCP: all 500, no TC.
	if err := await.Poll(ctx, 60*time.Second, 100*time.Millisecond, func(context.Context) string {
		if got := dnsq.Answer("tcp", dnsSrv.Addr, global, dns.TypeA); got != dnsq.NoError(want...) {
			return fmt.Sprintf("got %.200q...", got)
		}
		return ""
	}); err != nil {
		t.Fatalf("TCP A, want all %d addresses: %v", n, err)
	}
	r, err := dnsq.Ask("tcp", dnsSrv.Addr, global, dns.TypeSRV, 0)
	if err != nil || r.Truncated || len(r.Answer) != n || len(r.Extra) != n {
		t.Fatalf("TCP SRV: err %v, TC %v, %d answers, %d additional; want %d and %d", err, r != nil && r.Truncated, lenAnswer(r), lenExtra(r), n, n)
	}
	// UDP: truncated to the client's buffer, with TC, both without EDNS (512) and with 1232.
	for _, bufsize := range []uint16{0, 1232} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeSRV} {
			r, err := dnsq.Ask("udp", dnsSrv.Addr, global, qt, bufsize)
			if err != nil {
				t.Fatalf("UDP %s bufsize %d: %v", dns.TypeToString[qt], bufsize, err)
			}
			size := max(int(bufsize), dns.MinMsgSize)
			r.Compress = true // as it came on the wire
			if !r.Truncated || len(r.Answer) >= n || r.Len() > size || r.Rcode != dns.RcodeSuccess {
				t.Errorf("UDP %s bufsize %d: TC %v, %d answers, %d bytes; want TC, fewer than %d answers, at most %d bytes",
					dns.TypeToString[qt], bufsize, r.Truncated, len(r.Answer), r.Len(), n, size)
			}
		}
	}
	// A per-pod name stays small.
	s.AnswerBoth(dnsSrv.Addr, "big-499-east."+global, dns.TypeA, dnsq.NoError("203.0.113.250"))
	noGlobalService(t, s, "big-global")
}

func lenAnswer(r *dns.Msg) int {
	if r == nil {
		return 0
	}
	return len(r.Answer)
}

func lenExtra(r *dns.Msg) int {
	if r == nil {
		return 0
	}
	return len(r.Extra)
}
