package node_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/node"
	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// NodeLocal DNSCache as Kubernetes' addon manifest
// (cluster/addons/dns/nodelocaldns/nodelocaldns.yaml) runs it, with stock
// CoreDNS in place of its node-cache binary: the manifest's Corefile, its
// kube-dns-upstream Service, a DaemonSet on the host's network; what
// node-cache adds around CoreDNS, the test does: the link-local address on
// an interface of its own. It binds the link-local address alone, as the
// manifest's IPVS variant does, so the cluster DNS Service's address keeps
// reaching the cluster DNS for every other pod. The nodelocal asker's
// resolv.conf is the kubelet's with --cluster-dns at that address.

const (
	nodeLocalIP    = "169.254.20.10"
	nodeLocalName  = "node-local-dns"
	nodeLocalAsker = "asker-nodelocal"
)

// nodeLocalLag is how much longer than the cluster DNS's own answers an
// answer to query may last behind NodeLocal DNSCache: as long as its TTL,
// which its cache keeps it for once fetched, and at least CoreDNS's
// cache's minimum TTL (5 s), for which it keeps an answer arriving with
// less of its TTL left. Of the answers the test changes, the kubernetes
// plugin's PTR records have its TTL (the chart's stanza's 30 s) until
// global's reverse names replace them; every other (global's, TTL 5 or 6
// s, and its NXDOMAIN, whose SOA's minimum is that TTL and the cache's
// denial limit 5 s) the minimum.
func nodeLocalLag(query string) time.Duration {
	if _, q, _ := strings.Cut(query, "/"); strings.HasPrefix(q, "PTR/") {
		return kubernetesTTL
	}
	return dnsutil.MinimalDefaultTTL
}

// kubernetesTTL is the TTL of the chart's kubernetes stanza.
const kubernetesTTL = 30 * time.Second

// nodeLocalCorefile is the manifest's Corefile, its __PILLAR__ variables
// as its documentation and node-cache fill them in: the cluster's domain,
// the link-local address (bound alone), kube-dns-upstream's ClusterIP,
// and the node's resolv.conf.
func nodeLocalCorefile(upstream string) string {
	block := func(zone, cache, forward string) string {
		return zone + `:53 {
    errors
` + cache + `
    reload
    loop
    bind ` + nodeLocalIP + `
    forward . ` + forward + `
    prometheus :9253
}
`
	}
	tcp := upstream + " {\n        force_tcp\n    }"
	return strings.Replace(block(node.ClusterDomain, "    cache {\n        success 9984 30\n        denial 9984 5\n    }", tcp),
		"    prometheus :9253\n", "    prometheus :9253\n    health "+nodeLocalIP+":8080\n", 1) +
		block("in-addr.arpa", "    cache 30", tcp) +
		block("ip6.arpa", "    cache 30", tcp) +
		block(".", "    cache 30", "/etc/resolv.conf")
}

// startNodeLocalDNS runs NodeLocal DNSCache on the node and waits until it
// answers at its link-local address.
func (s *install) startNodeLocalDNS() {
	s.t.Helper()
	ctx, sys, o := s.ctx, metav1.NamespaceSystem, metav1.CreateOptions{}
	for _, args := range [][]string{
		// A veth with nothing at its far end: this kernel may have no
		// dummy driver, and the address is all node-cache's interface is for.
		{"link", "add", "nodelocaldns", "type", "veth", "peer", "name", "nodelocaldns-p"},
		{"addr", "add", nodeLocalIP + "/32", "dev", "nodelocaldns"},
		{"link", "set", "nodelocaldns", "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			s.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	s.t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "nodelocaldns").Run() })
	upstream, err := s.c.CoreV1().Services(sys).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-upstream", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "kube-dns"}, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
		}},
	}, o)
	if err != nil {
		s.t.Fatal(err)
	}
	s.must(s.c.CoreV1().ConfigMaps(sys).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: nodeLocalName},
		Data: map[string]string{"Corefile": nodeLocalCorefile(upstream.Spec.ClusterIP)}}, o))
	labels := map[string]string{"k8s-app": nodeLocalName}
	s.must(s.c.AppsV1().DaemonSets(sys).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: nodeLocalName, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				HostNetwork: true, DNSPolicy: corev1.DNSDefault, TerminationGracePeriodSeconds: ptr.To[int64](30),
				Containers: []corev1.Container{{
					Name: "node-cache", Image: s.node.Images["coredns-stock"], ImagePullPolicy: corev1.PullNever,
					Args: []string{"-conf", "/etc/coredns/Corefile"},
					SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
						Add: []corev1.Capability{"NET_BIND_SERVICE"}}},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns"}},
				}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: nodeLocalName}}}}},
			},
		}},
	}, o))
	s.eventually("NodeLocal DNSCache answering", func(ctx context.Context) string {
		r, err := dnsq.Ask("udp", net.JoinHostPort(nodeLocalIP, "53"), "kubernetes.default.svc."+node.ClusterDomain+".", dns.TypeA, 0)
		if err != nil {
			return err.Error()
		}
		if len(r.Answer) != 1 {
			return dnsq.Summary(r, nil)
		}
		return ""
	})
}

// stopNodeLocalDNS deletes what startNodeLocalDNS made, its interface
// last, once its pod is gone.
func (s *install) stopNodeLocalDNS() {
	s.t.Helper()
	ctx, sys := s.ctx, metav1.NamespaceSystem
	s.must(s.c.AppsV1().DaemonSets(sys).Delete(ctx, nodeLocalName, metav1.DeleteOptions{}))
	s.must(s.c.CoreV1().ConfigMaps(sys).Delete(ctx, nodeLocalName, metav1.DeleteOptions{}))
	s.must(s.c.CoreV1().Services(sys).Delete(ctx, "kube-dns-upstream", metav1.DeleteOptions{}))
	s.eventually("NodeLocal DNSCache's pod gone", func(ctx context.Context) string {
		if pods := s.podsBySelector(sys, "k8s-app="+nodeLocalName); len(pods) > 0 {
			return fmt.Sprintf("%d left", len(pods))
		}
		return ""
	})
	if out, err := exec.CommandContext(ctx, "ip", "link", "del", "nodelocaldns").CombinedOutput(); err != nil {
		s.t.Errorf("ip link del nodelocaldns: %v: %s", err, out)
	}
}

// nodeLocalAskerSpec is an asker whose resolv.conf is what the kubelet
// writes with --cluster-dns at NodeLocal DNSCache's address.
func (s *install) nodeLocalAskerSpec(queries []string) *corev1.Pod {
	pod := s.askerSpec(nodeLocalAsker, queries)
	pod.Spec.DNSPolicy = corev1.DNSNone
	pod.Spec.DNSConfig = &corev1.PodDNSConfig{
		Nameservers: []string{nodeLocalIP},
		Searches:    []string{ns + ".svc." + node.ClusterDomain, "svc." + node.ClusterDomain, node.ClusterDomain},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("5")}},
	}
	return pod
}

// startNodeLocalAsker runs the nodelocal asker on queries, judged against
// tr with nodeLocalLag.
func (s *install) startNodeLocalAsker(tr *truth, queries []string, endpoints *endpointHistory) *timeline {
	s.t.Helper()
	tl := s.startTimeline(s.nodeLocalAskerSpec(queries), tr, queries, endpoints, netip.MustParseAddr(nodeLocalIP))
	tl.lag = nodeLocalLag
	return tl
}
