package chart

import (
	"strings"
	"testing"

	"github.com/coredns/caddy/caddyfile"
	"github.com/globalmirror/globalmirror/plugin/global"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/globalmirror/globalmirror/test/helmtest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestTemplateForwarded: coredns.forwarded renders one server block of the
// clusterset zone, answered by global alone (no kubernetes, no forward, no
// cache), with the local cluster's id; a DNS of its own, not the cluster's.
func TestTemplateForwarded(t *testing.T) {
	m := helmtest.Template(t, "gm", "--set", "controller.enabled=false", "--set", "coredns.enabled=true",
		"--set", "coredns.forwarded.enabled=true", "--set", "coredns.forwarded.clusterID=east")
	var cm corev1.ConfigMap
	helmtest.Typed(t, m.MustGet(t, "ConfigMap", helmtest.Namespace, helmtest.CoreDNS), &cm)
	corefile := cm.Data["Corefile"]
	want := fixture.ForwardedCorefile
	if corefile != want {
		t.Fatalf("Corefile:\n%s\nwant:\n%s", corefile, want)
	}
	// The stanza is one the plugin takes, naming the zone it serves.
	blocks, err := caddyfile.Parse("Corefile", strings.NewReader(corefile), nil)
	if err != nil || len(blocks) != 1 {
		t.Fatalf("parse: %v, %d blocks", err, len(blocks))
	}
	st, err := global.ParseStanza(blocks[0].Keys, blocks[0].Tokens["global"])
	if err != nil {
		t.Fatalf("global stanza: %v", err)
	}
	if st.ClusterID != "east" || st.ClustersetZone != "clusterset.local." {
		t.Errorf("stanza's clusterset view: %+v", st)
	}

	var d appsv1.Deployment
	helmtest.Typed(t, m.MustGet(t, "Deployment", helmtest.Namespace, helmtest.CoreDNS), &d)
	if d.Spec.Template.Spec.DNSPolicy != "" || d.Spec.Template.Labels["k8s-app"] != "" {
		t.Errorf("a forwarded zone's DNS carries the cluster DNS's dnsPolicy %q or label %q", d.Spec.Template.Spec.DNSPolicy, d.Spec.Template.Labels["k8s-app"])
	}
	var svc corev1.Service
	helmtest.Typed(t, m.MustGet(t, "Service", helmtest.Namespace, helmtest.CoreDNS), &svc)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Port != 53 || svc.Spec.Ports[1].Port != 53 {
		t.Errorf("Service %+v", svc.Spec)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "coredns.forwarded.enabled=true"}, "coredns.forwarded.clusterID is required"},
		{[]string{"--set", "coredns.forwarded.enabled=true", "--set", "coredns.forwarded.clusterID=east", "--set", "coredns.isClusterService=true"},
			"exclude each other"},
		{[]string{"--set", "coredns.forwarded.clusterID=East_1"}, "/coredns/forwarded/clusterID"},
	} {
		out, err := helmtest.Run(t, append([]string{"template", "gm", helmtest.ChartDir, "--set", "coredns.enabled=true"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: %v, want an error naming %q\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestTemplateTokenExpiration: serviceAccount.tokenExpirationSeconds gives
// each component the kubelet's token volume with that expiry in place of
// the automounted one, at the path client-go's in-cluster configuration
// reads; the schema refuses lifetimes the API server would.
func TestTemplateTokenExpiration(t *testing.T) {
	m := helmtest.Template(t, "gm", "--set", "coredns.enabled=true",
		"--set", "coredns.serviceAccount.tokenExpirationSeconds=600", "--set", "controller.serviceAccount.tokenExpirationSeconds=900")
	for name, want := range map[string]int64{helmtest.CoreDNS: 600, helmtest.Controller: 900} {
		var d appsv1.Deployment
		helmtest.Typed(t, m.MustGet(t, "Deployment", helmtest.Namespace, name), &d)
		pod := d.Spec.Template.Spec
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("%s: the default token is still mounted", name)
		}
		var got *int64
		for _, v := range pod.Volumes {
			if v.Name == "kube-api-access" && v.Projected != nil {
				for _, src := range v.Projected.Sources {
					if src.ServiceAccountToken != nil && src.ServiceAccountToken.Path == "token" {
						got = src.ServiceAccountToken.ExpirationSeconds
					}
				}
			}
		}
		mounted := false
		for _, vm := range pod.Containers[0].VolumeMounts {
			mounted = mounted || vm.Name == "kube-api-access" && vm.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" && vm.ReadOnly
		}
		if got == nil || *got != want || !mounted {
			t.Errorf("%s: token expiry %v, mounted %v; want %d", name, got, mounted, want)
		}
	}
	// 0, the default: the kubelet's own token.
	var d appsv1.Deployment
	helmtest.Typed(t, helmtest.Template(t, "gm").MustGet(t, "Deployment", helmtest.Namespace, helmtest.Controller), &d)
	if d.Spec.Template.Spec.AutomountServiceAccountToken != nil || len(d.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("default: automount %v, volumes %v", d.Spec.Template.Spec.AutomountServiceAccountToken, d.Spec.Template.Spec.Volumes)
	}
	out, err := helmtest.Run(t, "template", "gm", helmtest.ChartDir, "--set", "coredns.serviceAccount.tokenExpirationSeconds=300")
	if err == nil || !strings.Contains(err.Error(), "/coredns/serviceAccount/tokenExpirationSeconds") {
		t.Errorf("300 s: %v\n%s", err, out)
	}
}
