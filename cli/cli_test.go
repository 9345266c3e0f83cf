package cli

import (
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/fake"
)

// kubeadm's Corefile with a global stanza, as the chart's README adds it.
const corefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    global cluster.local {
        ttl 5
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    reload
}
`

func TestClusterBlockFindsTheStanzaOfTheKubernetesServerBlock(t *testing.T) {
	other := "example.org:53 {\n    global example.org {\n        suffix -x\n    }\n}\n"
	_, st, err := clusterBlock(other + corefile)
	if err != nil || st == nil {
		t.Fatalf("stanza %v, err %v", st, err)
	}
	if st.Suffix != aggregate.DefaultSuffix || len(st.Namespaces) != 0 || strings.Join(st.Zones, " ") != "cluster.local." {
		t.Errorf("stanza %+v: want the cluster block's, with the plugin's defaults", st)
	}
	if _, st, err := clusterBlock(strings.Replace(corefile, "global cluster.local {\n        ttl 5\n    }\n", "", 1)); err != nil || st != nil {
		t.Errorf("without the stanza: %v, %v", st, err)
	}
	if _, _, err := clusterBlock(strings.Replace(corefile, "ttl 5", "ttl five", 1)); err == nil {
		t.Error("a stanza CoreDNS refuses is no error")
	}
	if _, _, err := clusterBlock("example.org:53 {\n    forward . 1.1.1.1\n}\n"); err == nil {
		t.Error("no kubernetes server block is no error")
	}
}

func controllerDeployment(args ...string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "globalmirror", Name: "gm"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "controller", Command: []string{"/globalmirror-controller"}, Args: args},
		}}}},
	}
}

func TestControllerOfReadsItsFlags(t *testing.T) {
	c, err := controllerOf(controllerDeployment("--suffix=-all", "--namespaces=a,b", "--leader-elect-id=gm"))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Options; o.Suffix != "-all" || strings.Join(o.Namespaces, ",") != "a,b" || o.LeaderElectID != "gm" || c.LeaseNamespace != "globalmirror" {
		t.Errorf("options %+v, lease namespace %q", o, c.LeaseNamespace)
	}
	if _, err := controllerOf(controllerDeployment("--no-such-flag")); err == nil {
		t.Error("an unknown flag is no error")
	}
}

func TestCorefileOfFollowsTheConfFlagToItsConfigMap(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Args: []string{"-conf", "/etc/coredns/Corefile"},
			VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns"}}}},
		Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"},
			Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
		}}}},
	}}
	if cm, key := corefileOf(p); cm != "coredns" || key != "Corefile" {
		t.Errorf("ConfigMap %q key %q", cm, key)
	}
}

func TestAgreementNamesEachDifference(t *testing.T) {
	ctl, err := controllerOf(controllerDeployment())
	if err != nil {
		t.Fatal(err)
	}
	cl := &Cluster{Controller: ctl, DNS: &DNS{Corefiles: map[string]string{"kube-system/coredns": corefile}}}
	if r := checkAgreement(cl); !r.OK {
		t.Errorf("defaults on both sides: %+v", r)
	}
	cl.DNS.Corefiles["kube-system/coredns"] = strings.Replace(corefile, "ttl 5", "ttl 5\n        suffix -all\n        namespaces app", 1)
	r := checkAgreement(cl)
	if r.OK || !strings.Contains(r.Detail, `suffix "-all"`) || !strings.Contains(r.Detail, "namespaces [app]") || r.Hint == "" {
		t.Errorf("suffix and namespaces differ: %+v", r)
	}
}

func TestVersionInTheProvenRange(t *testing.T) {
	for minor, ok := range map[string]bool{"30": false, "31": true, "36+": true, "37": true, "38": false} {
		r := checkVersion(&Cluster{Version: &version.Info{Major: "1", Minor: minor, GitVersion: "v1." + minor}})
		if r.OK != ok {
			t.Errorf("1.%s: %+v", minor, r)
		}
	}
}

func TestResultsAreWrittenWithMarksAndHints(t *testing.T) {
	var out strings.Builder
	rs := []Result{pass("a", "fine"), fail("b", "broken", "fix it")}
	WriteResults(&out, rs)
	if want := "✔ a: fine\n✘ b: broken\n    hint: fix it\n"; out.String() != want || !Failed(rs) || Failed(rs[:1]) {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// A Linkerd service mirror without -enable-headless-services mirrors a
// headless service as a ClusterIP one: no global has its pods.
func TestMirrorsCheckFindsAServiceMirrorWithoutHeadless(t *testing.T) {
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db-east",
		Labels: map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "east"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	mirror := func(cluster string, args ...string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "linkerd-multicluster", Name: "linkerd-service-mirror-" + cluster,
			Labels: map[string]string{"component": "linkerd-service-mirror", aggregate.LabelClusterName: cluster}},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "service-mirror", Args: append([]string{"service-mirror", "-log-level=info"}, args...)}}}}}}
	}
	for _, tc := range []struct {
		name   string
		objs   []runtime.Object
		ok     bool
		detail string
	}{
		{"headless on", []runtime.Object{headless, mirror("east", "-enable-headless-services")}, true, "east: 1"},
		{"headless off", []runtime.Object{headless, mirror("east"), mirror("west", "-enable-headless-services")}, false, "linkerd-service-mirror-east (cluster east)"},
		{"no mirror", nil, false, "no headless mirror"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkMirrors(t.Context(), &Cluster{Client: fake.NewClientset(tc.objs...)})
			if r.OK != tc.ok || !strings.Contains(r.Detail, tc.detail) || (!r.OK && r.Hint == "") {
				t.Errorf("%+v; want ok %v, detail with %q, a hint where it fails", r, tc.ok, tc.detail)
			}
			if strings.Contains(r.Detail, "west") && !tc.ok {
				t.Errorf("west mirrors headless services, yet it is named: %s", r.Detail)
			}
		})
	}
}
