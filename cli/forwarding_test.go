package cli

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/build"
	"github.com/globalmirror/globalmirror/test/fixture"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// chartIP is the ClusterIP of the chart's forwarded CoreDNS Service.
const chartIP = "10.96.123.45"

// forwardedCorefile is the Corefile the chart renders for a forwarded zone.
const forwardedCorefile = fixture.ForwardedCorefile

// stockCorefile is kubeadm's Corefile, with no global stanza.
var stockCorefile = strings.Replace(corefile, "    global cluster.local {\n        ttl 5\n    }\n", "", 1)

// forwardBlock is the server block the chart's NOTES print for CoreDNS.
const forwardBlock = "clusterset.local:53 {\n    errors\n    forward . " + chartIP + " {\n        force_tcp\n    }\n}\n"

// configMap is a ConfigMap of ns with data (key, value, ...).
func configMap(ns, name string, data ...string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{}}
	for i := 0; i+1 < len(data); i += 2 {
		cm.Data[data[i]] = data[i+1]
	}
	return cm
}

// coreDNSPod is a running CoreDNS pod loading its Corefile from ConfigMap
// cm, with AKS's optional coredns-custom mounted beside it where custom.
func coreDNSPod(ns, name, image, account, cm string, labels map[string]string, custom bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			ServiceAccountName: account,
			Containers: []corev1.Container{{Name: "coredns", Image: image, Args: []string{"-conf", "/etc/coredns/Corefile"},
				Ports:        []corev1.ContainerPort{{ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {Name: "metrics", ContainerPort: 9153}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns"}}}},
			Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Items: []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}}}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if custom {
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "custom-config-volume", MountPath: "/etc/coredns/custom"})
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "custom-config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "coredns-custom"}, Optional: ptr.To(true)}}})
	}
	return p
}

// kubeDNSPod is a running pod of kube-dns (GKE's): dnsmasq on port 53,
// kubedns reading its ConfigMap; no Corefile.
func kubeDNSPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns-1", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "kubedns", Image: "gke.gcr.io/k8s-dns-kube-dns:1.26.4", Args: []string{"--domain=cluster.local.", "--config-dir=/kube-dns-config"},
					VolumeMounts: []corev1.VolumeMount{{Name: "kube-dns-config", MountPath: "/kube-dns-config"}}},
				{Name: "dnsmasq", Image: "gke.gcr.io/k8s-dns-dnsmasq-nanny:1.26.4", Ports: []corev1.ContainerPort{{ContainerPort: 53, Protocol: corev1.ProtocolUDP}},
					VolumeMounts: []corev1.VolumeMount{{Name: "kube-dns-config", MountPath: "/etc/k8s/dns/dnsmasq-nanny"}}},
			},
			Volumes: []corev1.Volume{{Name: "kube-dns-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-dns"}, Optional: ptr.To(true)}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// clusterDNS is kube-system/kube-dns with pods, and the ConfigMaps they
// read.
func clusterDNS(pods ...runtime.Object) []runtime.Object {
	return append([]runtime.Object{&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "kube-dns"}, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}}, pods...)
}

func kubeadmPod(custom bool) *corev1.Pod {
	return coreDNSPod("kube-system", "coredns-1", "registry.k8s.io/coredns/coredns:v1.12.0", "coredns", "coredns", map[string]string{"k8s-app": "kube-dns"}, custom)
}

// chartDNS are the objects of the chart's CoreDNS in forwarded mode, of
// release in ns: its DNS Service, its metrics Service (labelled alike),
// its Corefile's ConfigMap and a running pod.
func chartDNS(ns, release, ip, corefile string) []runtime.Object {
	name := release + "-globalmirror-coredns"
	selector := map[string]string{"app.kubernetes.io/name": "globalmirror", "app.kubernetes.io/instance": release, "app.kubernetes.io/component": "coredns"}
	labels := map[string]string{"app.kubernetes.io/part-of": "globalmirror"}
	for k, v := range selector {
		labels[k] = v
	}
	return []runtime.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.ServiceSpec{Selector: selector, ClusterIP: ip, ClusterIPs: []string{ip}, Ports: []corev1.ServicePort{
				{Name: "udp-53", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "tcp-53", Port: 53, Protocol: corev1.ProtocolTCP}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-metrics", Labels: labels},
			Spec: corev1.ServiceSpec{Selector: selector, ClusterIP: "10.96.200.1", Ports: []corev1.ServicePort{{Name: "metrics", Port: 9153}}}},
		configMap(ns, name, "Corefile", corefile),
		coreDNSPod(ns, name+"-1", "ghcr.io/globalmirror/globalmirror-coredns:test", name, name, selector, false),
	}
}

// discovered is the cluster of objs as Discover finds it (the cluster DNS
// kube-system/kube-dns), with setup's reactors on its client.
func discovered(t *testing.T, setup func(*fake.Clientset), objs ...runtime.Object) *Cluster {
	t.Helper()
	c := fake.NewClientset(objs...)
	if setup != nil {
		setup(c)
	}
	cl := &Cluster{Client: c}
	cl.DNS, cl.DNSErr = findDNS(t.Context(), c, "kube-system/kube-dns")
	if cl.DNSErr != nil {
		t.Fatal(cl.DNSErr)
	}
	discoverForwarded(t.Context(), c, cl, "")
	return cl
}

// forbidden refuses getting the ConfigMap ns/name.
func forbidden(ns, name string) func(*fake.Clientset) {
	return func(c *fake.Clientset) {
		c.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetNamespace() != ns || a.(k8stesting.GetAction).GetName() != name {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, name, errors.New("no RBAC"))
		})
	}
}

// The chart's CoreDNS of a forwarded zone is found by its labels, its DNS
// Service and not its metrics one, the controller's release first; only
// where the cluster DNS's Corefiles hold no global stanza.
func TestTheForwardedDNSIsFoundWhereTheClusterDNSHasNoStanza(t *testing.T) {
	kubeadm := func(corefile string) []runtime.Object {
		return append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", corefile))
	}
	cl := discovered(t, nil, append(kubeadm(stockCorefile), chartDNS("globalmirror", "gm", chartIP, forwardedCorefile)...)...)
	if cl.ForwardedErr != nil || cl.Forwarded == nil || serviceName(cl.Forwarded.Service) != "globalmirror/gm-globalmirror-coredns" ||
		len(cl.Forwarded.Pods) != 1 || cl.Forwarded.Corefiles["globalmirror/gm-globalmirror-coredns"] != forwardedCorefile {
		t.Fatalf("forwarded DNS %+v, %v; want globalmirror/gm-globalmirror-coredns with its pod and Corefile", cl.Forwarded, cl.ForwardedErr)
	}
	if cl.judged() != cl.Forwarded || forwardedZone(cl) != "clusterset.local." {
		t.Errorf("judged %v, zone %q; want the forwarded DNS, clusterset.local.", cl.judged().Service.Name, forwardedZone(cl))
	}
	cl = discovered(t, nil, append(kubeadm(corefile), chartDNS("globalmirror", "gm", chartIP, forwardedCorefile)...)...)
	if cl.Forwarded != nil || cl.judged() != cl.DNS {
		t.Errorf("a cluster DNS with the stanza: forwarded DNS %v; want none, the cluster DNS judged", cl.Forwarded)
	}
	if r := run(t, "zone forwarded", cl); r.Result != OK || !strings.Contains(r.Detail, "the cluster DNS serves the global names itself") {
		t.Errorf("a cluster DNS with the stanza: %+v", r)
	}
	// Two releases: the controller's first, though the other sorts before.
	c := fake.NewClientset(append(append(kubeadm(stockCorefile), chartDNS("aaa", "zone", "10.96.1.1", forwardedCorefile)...),
		chartDNS("globalmirror", "gm", chartIP, forwardedCorefile)...)...)
	ctl := &Controller{Deployment: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "globalmirror", Name: "gm-globalmirror-controller",
		Labels: map[string]string{instanceLabel: "gm"}}}}
	cl = &Cluster{Client: c, Controller: ctl}
	cl.DNS, _ = findDNS(t.Context(), c, "kube-system/kube-dns")
	discoverForwarded(t.Context(), c, cl, "")
	if cl.Forwarded == nil || serviceName(cl.Forwarded.Service) != "globalmirror/gm-globalmirror-coredns" {
		t.Errorf("two releases: %v; want the controller's", cl.Forwarded)
	}
	// None: the cluster DNS is judged, and nothing is to forward.
	cl = discovered(t, nil, kubeadm(stockCorefile)...)
	if cl.Forwarded != nil || cl.ForwardedErr != nil {
		t.Errorf("no chart CoreDNS: %v, %v", cl.Forwarded, cl.ForwardedErr)
	}
	if r := run(t, "zone forwarded", cl); r.Result != OK || r.Detail != "none needed: no chart CoreDNS of a forwarded zone (coredns.forwarded) found" {
		t.Errorf("no chart CoreDNS: %+v", r)
	}
}

// The forwarding is judged as the cluster DNS routes the zone: a server
// block in its Corefile, one imported from AKS's coredns-custom, kube-dns's
// stubDomains; a wrong address, a wrong port, none; each hint, applied, is
// what passes; and what could not be read is ‼ "could not read".
func TestTheForwardingIsJudgedAsTheClusterDNSRoutesTheZone(t *testing.T) {
	chart := chartDNS("globalmirror", "gm", chartIP, forwardedCorefile)
	const to = "to the chart's DNS globalmirror/gm-globalmirror-coredns (" + chartIP + ")"
	wrongBlock := strings.Replace(forwardBlock, chartIP, "10.96.0.99", 1)
	for _, tc := range []struct {
		name  string
		objs  []runtime.Object
		setup func(*fake.Clientset)
		level Level
		says  string
		hint  string
		// apply returns the objects with the hint's snippet applied; nil:
		// none to apply.
		apply func(snippet string) []runtime.Object
	}{
		{name: "a server block in the Corefile", level: OK,
			objs: append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", stockCorefile+forwardBlock)),
			says: "kube-system/coredns: server block clusterset.local:53 forwards clusterset.local " + to},
		{name: "a server block without forward's options", level: OK,
			objs: append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile",
				stockCorefile+"clusterset.local:53 {\n    forward . "+chartIP+"\n}\n")),
			says: "server block clusterset.local:53 forwards clusterset.local " + to},
		{name: "its forward's address by scheme and port", level: OK,
			objs: append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile",
				stockCorefile+strings.Replace(forwardBlock, "forward . "+chartIP, "forward clusterset.local dns://"+chartIP+":53", 1))),
			says: "server block clusterset.local:53 forwards clusterset.local " + to},
		{name: "AKS: imported from coredns-custom's *.server", level: OK,
			objs: append(clusterDNS(kubeadmPod(true)), configMap("kube-system", "coredns", "Corefile", stockCorefile+"import custom/*.server\n"),
				configMap("kube-system", "coredns-custom", "globalmirror.server", forwardBlock)),
			says: "server block clusterset.local:53 (imported from /etc/coredns/custom/globalmirror.server) forwards clusterset.local " + to},
		{name: "GKE: kube-dns's stubDomains", level: OK,
			objs: append(clusterDNS(kubeDNSPod()), configMap("kube-system", "kube-dns", "stubDomains", `{"acme.example": ["10.0.0.53"], "clusterset.local": ["`+chartIP+`"]}`)),
			says: "kube-system/kube-dns: stubDomains clusterset.local forwards clusterset.local " + to},
		{name: "not forwarded", level: Error,
			objs: append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", stockCorefile)),
			says: "kube-system/coredns: server block .:53 forwards clusterset.local to /etc/resolv.conf, not " + to,
			hint: "add to the Corefile of kube-system/coredns (kubectl -n kube-system edit configmap coredns); the reload plugin applies it:\n" + strings.TrimSuffix(forwardBlock, "\n"),
			apply: func(snippet string) []runtime.Object {
				return append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", stockCorefile+snippet))
			}},
		{name: "forwarded elsewhere", level: Error,
			objs: append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", stockCorefile+wrongBlock)),
			says: "server block clusterset.local:53 forwards clusterset.local to 10.96.0.99, not " + to,
			hint: "make server block clusterset.local:53 of kube-system/coredns forward to the chart's DNS:\n" + strings.TrimSuffix(forwardBlock, "\n"),
			apply: func(snippet string) []runtime.Object {
				return append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", stockCorefile+snippet))
			}},
		{name: "forwarded on a port the Service does not ask", level: Error,
			objs: append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", stockCorefile+strings.Replace(forwardBlock, ":53 {", ":5353 {", 1))),
			says: "server block .:53 forwards clusterset.local to /etc/resolv.conf, not " + to},
		{name: "AKS: not forwarded", level: Error,
			objs: append(clusterDNS(kubeadmPod(true)), configMap("kube-system", "coredns", "Corefile", stockCorefile+"import custom/*.server\n")),
			says: "server block .:53 forwards clusterset.local to /etc/resolv.conf",
			hint: "add a key globalmirror.server to ConfigMap kube-system/coredns-custom, whose *.server keys the cluster DNS imports",
			apply: func(snippet string) []runtime.Object {
				return append(clusterDNS(kubeadmPod(true)), configMap("kube-system", "coredns", "Corefile", stockCorefile+"import custom/*.server\n"),
					configMap("kube-system", "coredns-custom", "globalmirror.server", snippet))
			}},
		{name: "GKE: no stub domain", level: Error,
			objs: clusterDNS(kubeDNSPod()),
			says: "kube-system/kube-dns: no stub domain holds clusterset.local, which kube-dns sends upstream: not forwarded " + to,
			hint: "set stubDomains of ConfigMap kube-system/kube-dns (kubectl -n kube-system edit configmap kube-dns) to:\n" + `{"clusterset.local":["` + chartIP + `"]}`,
			apply: func(snippet string) []runtime.Object {
				return append(clusterDNS(kubeDNSPod()), configMap("kube-system", "kube-dns", "stubDomains", snippet))
			}},
		{name: "GKE: a stub domain elsewhere, beside others", level: Error,
			objs: append(clusterDNS(kubeDNSPod()), configMap("kube-system", "kube-dns", "stubDomains", `{"acme.example": ["10.0.0.53"], "clusterset.local.": ["10.96.0.99"]}`)),
			says: "stubDomains clusterset.local. forwards clusterset.local to 10.96.0.99, not " + to,
			hint: `{"acme.example":["10.0.0.53"],"clusterset.local":["` + chartIP + `"]}`,
			apply: func(snippet string) []runtime.Object {
				return append(clusterDNS(kubeDNSPod()), configMap("kube-system", "kube-dns", "stubDomains", snippet))
			}},
		{name: "the Corefile unreadable", level: Warning, setup: forbidden("kube-system", "coredns"),
			objs: append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", stockCorefile+forwardBlock)),
			says: "could not read how the cluster DNS forwards clusterset.local: kube-system/coredns: forbidden"},
		{name: "kube-dns's ConfigMap unreadable", level: Warning, setup: forbidden("kube-system", "kube-dns"),
			objs: append(clusterDNS(kubeDNSPod()), configMap("kube-system", "kube-dns", "stubDomains", `{"clusterset.local": ["`+chartIP+`"]}`)),
			says: "could not read how the cluster DNS forwards clusterset.local: kube-system/kube-dns: forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := discovered(t, tc.setup, append(tc.objs, chart...)...)
			if cl.Forwarded == nil {
				t.Fatal("no forwarded DNS found")
			}
			r := run(t, "zone forwarded", cl)
			if r.Result != tc.level || !strings.Contains(r.Detail, tc.says) || !strings.Contains(r.Hint, tc.hint) || (tc.level != OK) == (r.Hint == "") {
				t.Fatalf("%s: %s\n    hint: %s\nwant %s saying %q, hinting %q", r.Result, r.Detail, r.Hint, tc.level, tc.says, tc.hint)
			}
			if r.unread != (tc.level == Warning) {
				t.Errorf("unread %v: a check that could not read is ‼ could not read, nothing else is", r.unread)
			}
			if tc.apply == nil {
				return
			}
			_, snippet, _ := strings.Cut(r.Hint, "\n")
			cl = discovered(t, nil, append(tc.apply(snippet+"\n"), chart...)...)
			if r := run(t, "zone forwarded", cl); r.Result != OK || !strings.Contains(r.Detail, to) {
				t.Errorf("the hint applied: %s: %s", r.Result, r.Detail)
			}
		})
	}
}

// metricsBody is what the proxy reactor answers for a pod's metrics.
type metricsBody string

func (b metricsBody) DoRaw(context.Context) ([]byte, error) { return []byte(b), nil }
func (b metricsBody) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(b))), nil
}

// withPlugin is a CoreDNS pod's metrics with the global plugin loaded.
var withPlugin = metricsBody(`coredns_global_build_info{goversion="go1.26.8",version="` + build.Version + `"} 1
coredns_global_globals 0
coredns_plugin_enabled{name="global",server="dns://clusterset.local:53",view="",zone="clusterset.local."} 1
`)

// serving answers each pod's metrics from metrics (by pod name), and every
// access review allowed.
func serving(metrics map[string]metricsBody) func(*fake.Clientset) {
	return func(c *fake.Clientset) {
		c.PrependProxyReactor("pods", func(a k8stesting.Action) (bool, rest.ResponseWrapper, error) {
			return true, metrics[a.(k8stesting.ProxyGetAction).GetName()], nil
		})
		c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
			review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
			review.Status.Allowed = true
			return true, review, nil
		})
	}
}

// In forwarded mode the checks of the plugin's DNS judge the chart's
// CoreDNS, each naming it, not the stock cluster DNS; the DNS probe waits
// for the forwarding. Without the chart's CoreDNS, the stock one is judged
// as before.
func TestInForwardedModeTheDNSChecksJudgeTheChartsCoreDNS(t *testing.T) {
	metrics := map[string]metricsBody{"coredns-1": "coredns_dns_requests_total 1\n", "gm-globalmirror-coredns-1": withPlugin}
	kubeadm := func(corefile string) []runtime.Object {
		return append(clusterDNS(kubeadmPod(false)), configMap("kube-system", "coredns", "Corefile", corefile))
	}
	ctl, err := controllerOf(controllerDeployment())
	if err != nil {
		t.Fatal(err)
	}
	cl := discovered(t, serving(metrics), append(kubeadm(stockCorefile+forwardBlock), chartDNS("globalmirror", "gm", chartIP, forwardedCorefile)...)...)
	cl.Controller = ctl
	const judged = "the chart's forwarded DNS globalmirror/gm-globalmirror-coredns: "
	for _, tc := range []struct {
		check string
		level Level
		says  string
	}{
		// In order: the image check reads the metrics the others judge.
		{"cluster DNS image", OK, judged + "1 pods run an image with the global plugin (ghcr.io/globalmirror/globalmirror-coredns:test)"},
		{"global stanza", OK, judged + "globalmirror/gm-globalmirror-coredns: the clusterset view in clusterset.local."},
		{"plugin and controller agree", OK, judged + `suffix "-global"`},
		{"RBAC of the cluster DNS", OK, judged + "ServiceAccount globalmirror/gm-globalmirror-coredns has the"},
		{"zone forwarded", OK, "kube-system/coredns: server block clusterset.local:53 forwards clusterset.local to the chart's DNS globalmirror/gm-globalmirror-coredns"},
		// The controller's metrics are not read here: a warning.
		{"both halves serve them", Warning, judged + "0 global services answered by each of 1 DNS pods"},
	} {
		if r := run(t, tc.check, cl); r.Result != tc.level || !strings.HasPrefix(r.Detail, tc.says) {
			t.Errorf("%s: %s: %s; want %s starting %q", tc.check, r.Result, r.Detail, tc.level, tc.says)
		}
	}

	// The probe asks through the cluster DNS only where it forwards.
	cl = discovered(t, serving(metrics), append(kubeadm(stockCorefile), chartDNS("globalmirror", "gm", chartIP, forwardedCorefile)...)...)
	cl.Controller = ctl
	run(t, "cluster DNS image", cl)
	if r := run(t, "DNS answers", cl); r.Result != Skipped || !strings.Contains(r.Detail, "the zone forwarded check") {
		t.Errorf("the probe where the zone is not forwarded: %+v", r)
	}

	// The forwarded DNS's stanza must have a clusterset view its block serves.
	for corefile, says := range map[string]string{
		strings.Replace(forwardedCorefile, "        clusterset east clusterset.local\n", "", 1):                  "has no clusterset option",
		strings.Replace(forwardedCorefile, "clusterset east clusterset.local", "clusterset east mcs.example", 1): "global serves the clusterset view in mcs.example., which its server block (clusterset.local:53) does not serve",
	} {
		cl := discovered(t, serving(metrics), append(kubeadm(stockCorefile+forwardBlock), chartDNS("globalmirror", "gm", chartIP, corefile)...)...)
		if r := run(t, "global stanza", cl); r.Result != Error || !strings.HasPrefix(r.Detail, judged) || !strings.Contains(r.Detail, says) || r.Hint != forwardedStanzaHint {
			t.Errorf("%s: %+v; want an error saying %q", corefile, r, says)
		}
		if r := run(t, "zone forwarded", cl); r.Result != Skipped || !strings.Contains(r.Detail, "global stanza check") {
			t.Errorf("no clusterset zone to judge the forwarding of: %+v", r)
		}
	}

	// Without the chart's CoreDNS, the stock one is judged, as before.
	cl = discovered(t, serving(metrics), kubeadm(stockCorefile)...)
	if r := run(t, "cluster DNS image", cl); r.Result != Error || r.Detail != "without the global plugin: coredns-1 (registry.k8s.io/coredns/coredns:v1.12.0)" {
		t.Errorf("the stock cluster DNS alone: %+v", r)
	}
}

// The probe's names: the global names, or in forwarded mode the clusterset
// view's, a base under its namespace; the name that must not exist in the
// target's namespace either way.
func TestTheProbeAsksTheNamesOfItsView(t *testing.T) {
	g := globals{suffix: "-global", probe: &probeTarget{namespace: "app", name: "db-global", base: "db"}}
	global, absent := probeNames(g, g.probe, "cluster.local.", false)
	if global != "db-global.app.svc.cluster.local." || !strings.HasPrefix(absent, "globalmirror-check-") || !strings.HasSuffix(absent, "-global.app.svc.cluster.local.") {
		t.Errorf("the global names: %q, %q", global, absent)
	}
	global, absent = probeNames(g, g.probe, "clusterset.local.", true)
	if global != "db.app.svc.clusterset.local." || !strings.HasPrefix(absent, "globalmirror-check-") || !strings.HasSuffix(absent, ".app.svc.clusterset.local.") ||
		strings.Contains(absent, "-global") || strings.Count(absent, ".") != 5 {
		t.Errorf("the clusterset names: %q, %q", global, absent)
	}
	if global, _ := probeNames(globals{}, &probeTarget{namespace: "default"}, "clusterset.local.", true); global != "" {
		t.Errorf("no global to ask for: %q", global)
	}
}

// A hint's further lines, a snippet to paste, are indented under it.
func TestAHintsSnippetIsIndentedUnderIt(t *testing.T) {
	var out strings.Builder
	WriteResults(&out, NewReport([]Result{result("a", "zone forwarded", Error, "not forwarded", "add:\nzone:53 {\n    forward . 10.0.0.1\n}")}, ""))
	if want := "    hint: add:\n        zone:53 {\n            forward . 10.0.0.1\n        }\n"; !strings.Contains(out.String(), want) {
		t.Errorf("got\n%s\nwant it to hold\n%s", out.String(), want)
	}
}
