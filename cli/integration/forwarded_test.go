package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// forwardedCorefile is the Corefile the chart renders for a forwarded zone.
const forwardedCorefile = fixture.ForwardedCorefile

// kubeadmCorefile is kubeadm's stock Corefile: no global stanza.
const kubeadmCorefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}
`

// runningCoreDNS creates a CoreDNS pod in ns loading the Corefile of
// ConfigMap configMap, and says in its status that it runs (no kubelet
// runs it here).
func runningCoreDNS(t *testing.T, c kubernetes.Interface, ns, name, image, configMap string, labels map[string]string) {
	t.Helper()
	pod, err := c.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "coredns", Image: image, Args: []string{"-conf", "/etc/coredns/Corefile"},
				Ports:        []corev1.ContainerPort{{Name: "udp-53", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {Name: "metrics", ContainerPort: 9153}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns"}}}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: configMap}, Items: []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}}}}}},
		}}, metav1.CreateOptions{})
	must(t, err)
	pod.Status.Phase = corev1.PodRunning
	_, err = c.CoreV1().Pods(ns).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{})
	must(t, err)
}

// A cluster whose DNS is kubeadm's stock CoreDNS and the chart's CoreDNS
// in forwarded mode beside it, as the chart lays them out: check finds
// the chart's CoreDNS by its labels, judges it where it would judge the
// cluster DNS, and judges the cluster DNS's forwarding of the zone to the
// address the API server gave the chart's Service: ✘ before the server
// block is added, with that block as its hint; ✔ once the hint's block is
// in the Corefile; ✘ again, naming the address, where it forwards
// elsewhere.
func TestTheForwardingToTheChartsCoreDNSIsJudged(t *testing.T) {
	needsControlPlane(t)
	admin := env.Cluster("cli").Client
	ctx := t.Context()
	const dnsNS, chartNS = "forwarding-dns", "forwarding-chart"
	namespace(t, admin, dnsNS)
	namespace(t, admin, chartNS)

	// The cluster DNS: kubeadm's.
	kubeDNS := map[string]string{"k8s-app": "kube-dns"}
	_, err := admin.CoreV1().Services(dnsNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: dnsNS},
		Spec: corev1.ServiceSpec{Selector: kubeDNS, Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}, metav1.CreateOptions{})
	must(t, err)
	coredns, err := admin.CoreV1().ConfigMaps(dnsNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: dnsNS},
		Data: map[string]string{"Corefile": kubeadmCorefile}}, metav1.CreateOptions{})
	must(t, err)
	runningCoreDNS(t, admin, dnsNS, "coredns-0", "registry.k8s.io/coredns/coredns:v1.12.0", "coredns", kubeDNS)

	// The chart's CoreDNS in forwarded mode, release gm: its Service for
	// DNS (a ClusterIP the API server gives it), its metrics Service,
	// labelled alike, its Corefile, its pod.
	const name = "gm-globalmirror-coredns"
	selector := map[string]string{"app.kubernetes.io/name": "globalmirror", "app.kubernetes.io/instance": "gm", "app.kubernetes.io/component": "coredns"}
	labels := map[string]string{"app.kubernetes.io/part-of": "globalmirror", "app.kubernetes.io/managed-by": "Helm"}
	for k, v := range selector {
		labels[k] = v
	}
	svc, err := admin.CoreV1().Services(chartNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: chartNS, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{
			{Name: "udp-53", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "tcp-53", Port: 53, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	must(t, err)
	_, err = admin.CoreV1().Services(chartNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics", Namespace: chartNS, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	must(t, err)
	// The other tests look for the chart's CoreDNS in every namespace.
	t.Cleanup(func() {
		for _, s := range []string{name, name + "-metrics"} {
			must(t, admin.CoreV1().Services(chartNS).Delete(context.Background(), s, metav1.DeleteOptions{}))
		}
	})
	_, err = admin.CoreV1().ConfigMaps(chartNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: chartNS},
		Data: map[string]string{"Corefile": forwardedCorefile}}, metav1.CreateOptions{})
	must(t, err)
	runningCoreDNS(t, admin, chartNS, name+"-0", "ghcr.io/globalmirror/globalmirror-coredns:test", name, selector)
	ip := svc.Spec.ClusterIP
	if ip == "" || ip == corev1.ClusterIPNone {
		t.Fatalf("the chart's Service has no ClusterIP: %q", ip)
	}

	opts := cli.DefaultOptions()
	opts.DNSService = dnsNS + "/kube-dns"
	opts.ControllerSelector += ",test=" + strings.ToLower(t.Name())
	chart := "the chart's DNS " + chartNS + "/" + name + " (" + ip + ")"

	rs := checkAs(t, opts)
	r := rs["zone forwarded"]
	if r.ID != "dns-forwarding" || r.Result != cli.Error ||
		r.Detail != dnsNS+"/coredns: server block .:53 forwards clusterset.local to /etc/resolv.conf, not to "+chart ||
		!strings.HasSuffix(r.Hint, ":\nclusterset.local:53 {\n    errors\n    forward . "+ip+" {\n        force_tcp\n    }\n}") {
		t.Fatalf("not forwarded: %s %s: %s\n    hint: %s", r.ID, r.Result, r.Detail, r.Hint)
	}
	// The checks of the plugin's DNS judge the chart's CoreDNS, not the
	// stock one; no kubelet serves its metrics here.
	judged := "the chart's forwarded DNS " + chartNS + "/" + name + ": "
	if r := rs["cluster DNS image"]; r.Result != cli.Warning || !strings.HasPrefix(r.Detail, judged+"could not read the metrics of "+name+"-0") {
		t.Errorf("the image of the chart's CoreDNS: %+v", r)
	}
	if r := rs["global stanza"]; r.Result != cli.Warning ||
		!strings.HasPrefix(r.Detail, judged+"could not read whether the pods loaded it: "+chartNS+"/"+name+": the clusterset view in clusterset.local.") {
		t.Errorf("the stanza of the chart's CoreDNS: %+v", r)
	}

	// The hint's server block, added to the Corefile.
	_, block, _ := strings.Cut(r.Hint, "\n")
	coredns.Data["Corefile"] = kubeadmCorefile + block + "\n"
	coredns, err = admin.CoreV1().ConfigMaps(dnsNS).Update(ctx, coredns, metav1.UpdateOptions{})
	must(t, err)
	if r := checkAs(t, opts)["zone forwarded"]; r.Result != cli.OK || r.Detail != dnsNS+"/coredns: server block clusterset.local:53 forwards clusterset.local to "+chart {
		t.Errorf("forwarded by the hint's block: %+v", r)
	}

	// Forwarded elsewhere.
	coredns.Data["Corefile"] = strings.Replace(coredns.Data["Corefile"], "forward . "+ip, "forward . 10.96.0.99", 1)
	_, err = admin.CoreV1().ConfigMaps(dnsNS).Update(ctx, coredns, metav1.UpdateOptions{})
	must(t, err)
	if r := checkAs(t, opts)["zone forwarded"]; r.Result != cli.Error || !strings.Contains(r.Detail, "server block clusterset.local:53 forwards clusterset.local to 10.96.0.99, not to "+chart) ||
		!strings.Contains(r.Hint, "make server block clusterset.local:53 of "+dnsNS+"/coredns forward to the chart's DNS") {
		t.Errorf("forwarded elsewhere: %+v", r)
	}
}
