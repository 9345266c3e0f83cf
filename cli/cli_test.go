package cli

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/build"
	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
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
	_, st, _, err := clusterBlock(other+corefile, nil)
	if err != nil || st == nil {
		t.Fatalf("stanza %v, err %v", st, err)
	}
	if st.Suffix != aggregate.DefaultSuffix || len(st.Namespaces) != 0 || strings.Join(st.Zones, " ") != "cluster.local." {
		t.Errorf("stanza %+v: want the cluster block's, with the plugin's defaults", st)
	}
	if _, st, _, err := clusterBlock(strings.Replace(corefile, "global cluster.local {\n        ttl 5\n    }\n", "", 1), nil); err != nil || st != nil {
		t.Errorf("without the stanza: %v, %v", st, err)
	}
	if _, _, _, err := clusterBlock(strings.Replace(corefile, "ttl 5", "ttl five", 1), nil); err == nil {
		t.Error("a stanza CoreDNS refuses is no error")
	}
	if _, _, _, err := clusterBlock("example.org:53 {\n    forward . 1.1.1.1\n}\n", nil); err == nil {
		t.Error("no kubernetes server block is no error")
	}
}

// The stanza check fails where global answers in a zone the kubernetes
// plugin does not serve (a custom cluster domain), and where a pod's
// running instance has not loaded the stanza its ConfigMap holds.
func TestStanzaCheckComparesZonesAndWhatEachPodLoaded(t *testing.T) {
	dns := func(corefile string, metrics map[string]string) *Cluster {
		return &Cluster{DNS: &DNS{Corefiles: map[string]string{"kube-system/coredns": corefile}, metrics: metrics}}
	}
	loaded := map[string]string{"coredns-a": "coredns_global_globals 3\n" + `coredns_plugin_enabled{name="global",server="dns://:53",view="",zone="."} 1` + "\n"}
	if r := run(t, "global stanza", dns(corefile, loaded)); r.Result != OK {
		t.Errorf("the stanza loaded, in the cluster's zone: %+v", r)
	}
	custom := strings.Replace(corefile, "kubernetes cluster.local", "kubernetes corp.example", 1)
	if r := run(t, "global stanza", dns(custom, loaded)); r.Result != Error || !strings.Contains(r.Detail, "global answers in cluster.local.") ||
		!strings.Contains(r.Detail, "serves corp.example.") {
		t.Errorf("a custom cluster domain: %+v", r)
	}
	// No zones on the kubernetes line: the block's keys are its zones.
	keys := strings.Replace(strings.Replace(corefile, ".:53 {", "cluster.local:53 {", 1), "kubernetes cluster.local in-addr.arpa ip6.arpa {", "kubernetes {", 1)
	if r := run(t, "global stanza", dns(keys, loaded)); r.Result != OK {
		t.Errorf("the kubernetes plugin's zones from the block's keys: %+v", r)
	}
	stale := map[string]string{"coredns-a": loaded["coredns-a"], "coredns-b": "coredns_global_globals 0\n" + `coredns_plugin_enabled{name="kubernetes",server="dns://:53",view="",zone="."} 1` + "\n"}
	if r := run(t, "global stanza", dns(corefile, stale)); r.Result != Error || !strings.Contains(r.Detail, "not loaded by coredns-b") || strings.Contains(r.Detail, "coredns-a") {
		t.Errorf("a pod that has not loaded the stanza: %+v", r)
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

// The default selector finds the chart's controller whatever its release
// name and nameOverride; two releases watching a namespace both watch are
// ✘, both named; two with namespaces of their own, ‼: one is judged.
func TestControllerReleasesAreFoundByTheChartsLabels(t *testing.T) {
	release := func(ns, name, appName string) *appsv1.Deployment {
		d := controllerDeployment()
		d.Namespace, d.Name = ns, name
		d.Labels = map[string]string{"app.kubernetes.io/name": appName, "app.kubernetes.io/instance": name,
			"app.kubernetes.io/component": "controller", "app.kubernetes.io/part-of": "globalmirror"}
		d.Status.ReadyReplicas = 1
		return d
	}
	c := fake.NewClientset(release("mesh", "dns-discovery", "discovery"))
	ctl, err := findController(t.Context(), c, "", DefaultOptions().ControllerSelector)
	if err != nil || ctl == nil || ctl.Deployment.Name != "dns-discovery" {
		t.Fatalf("a release with a nameOverride: %+v, %v", ctl, err)
	}
	if r := run(t, "controller running", &Cluster{Controller: ctl}); r.Result != OK {
		t.Errorf("one release: %+v", r)
	}
	c = fake.NewClientset(release("mesh", "dns-discovery", "discovery"), release("globalmirror", "gm", "globalmirror"))
	ctl, err = findController(t.Context(), c, "", DefaultOptions().ControllerSelector)
	if err != nil || ctl == nil {
		t.Fatalf("two releases: %+v, %v", ctl, err)
	}
	if r := run(t, "controller running", &Cluster{Controller: ctl}); r.Result != Error || !strings.Contains(r.Detail, "2 controller releases watch the same namespaces") ||
		!strings.Contains(r.Detail, "mesh/dns-discovery") || !strings.Contains(r.Detail, "globalmirror/gm") {
		t.Errorf("two releases: %+v", r)
	}
	// Each with namespaces of its own: one judged, the other named.
	a, b := release("mesh", "dns-discovery", "discovery"), release("globalmirror", "gm", "globalmirror")
	a.Spec.Template.Spec.Containers[0].Args = []string{"--namespaces=team-a"}
	b.Spec.Template.Spec.Containers[0].Args = []string{"--namespaces=team-b,team-c"}
	ctl, err = findController(t.Context(), fake.NewClientset(a, b), "", DefaultOptions().ControllerSelector)
	if err != nil || ctl == nil {
		t.Fatalf("two releases of their own namespaces: %+v, %v", ctl, err)
	}
	if r := run(t, "controller running", &Cluster{Controller: ctl}); r.Result != Warning || !strings.Contains(r.Detail, "1 more releases, each watching namespaces of its own") ||
		!strings.Contains(r.Hint, "app.kubernetes.io/instance=RELEASE") {
		t.Errorf("two releases of their own namespaces: %+v", r)
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
	if r := run(t, "plugin and controller agree", cl); r.Result != OK {
		t.Errorf("defaults on both sides: %+v", r)
	}
	cl.DNS.Corefiles["kube-system/coredns"] = strings.Replace(corefile, "ttl 5", "ttl 5\n        suffix -all\n        namespaces app", 1)
	r := run(t, "plugin and controller agree", cl)
	if r.Result != Error || !strings.Contains(r.Detail, `suffix "-all"`) || !strings.Contains(r.Detail, "namespaces [app]") || r.Hint == "" {
		t.Errorf("suffix and namespaces differ: %+v", r)
	}
}

// A release in the matrix passes, one between or after its releases is
// unproven (a warning), one older than the chart allows fails.
func TestVersionAgainstTheMatrix(t *testing.T) {
	proven := build.KubernetesMinors()
	cases := map[string]Level{"30": Error, "36+": OK, "38": Warning}
	for _, m := range proven {
		cases[strconv.Itoa(m)] = OK
	}
	for m := proven[0]; m < proven[len(proven)-1]; m++ {
		if !slices.Contains(proven, m) {
			cases[strconv.Itoa(m)] = Warning
		}
	}
	for minor, want := range cases {
		r := run(t, "Kubernetes API", &Cluster{Version: &version.Info{Major: "1", Minor: minor, GitVersion: "v1." + minor}})
		if r.Result != want || (want != OK && r.Hint == "") {
			t.Errorf("1.%s: %+v; want %s with a hint", minor, r, want)
		}
	}
	if !slices.Contains(slices.Collect(maps.Values(cases)), Warning) {
		t.Error("no minor between the proven ones was tried")
	}
}

func TestResultsAreWrittenByCategoryWithMarksHintsAndLinks(t *testing.T) {
	var out strings.Builder
	rs := []Result{result("a", "one", OK, "fine", "unused"), result("a", "two", Warning, "unproven", "know it"), result("b", "three", Error, "broken", "fix it"),
		result("b", "four", Skipped, "not judged", "")}
	WriteResults(&out, NewReport(rs, "the timeout"))
	see := "    see: https://github.com/globalmirror/globalmirror/blob/main/README.md#check-"
	want := "a\n-\n✔ one: fine\n‼ two: unproven\n    hint: know it\n" + see + "two\n\nb\n-\n✘ three: broken\n    hint: fix it\n" + see + "three\n– four: not judged\n" + see + "four\n\n" +
		"✘ 4 checks: 1 ✔, 1 ‼, 1 ✘, 1 –\ncould not check everything: the timeout\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	// Nothing found broken, but not everything checked: not ✔.
	out.Reset()
	WriteResults(&out, NewReport(rs[3:], "the API server did not answer"))
	if !strings.HasSuffix(out.String(), "\n‼ 1 checks: 0 ✔, 0 ‼, 0 ✘, 1 –\ncould not check everything: the API server did not answer\n") {
		t.Errorf("every check skipped, the API server unanswering:\n%s", out.String())
	}
	// The exit code: broken (an error) before could not check (a run that
	// ended early), which is before passed (warnings allowed).
	for _, tc := range []struct {
		rs   []Result
		why  string
		code int
	}{{rs, "", ExitBroken}, {rs, "the timeout", ExitBroken}, {rs[:2], "the timeout", ExitCouldNotCheck}, {rs[:2], "", 0}} {
		r := NewReport(tc.rs, tc.why)
		if r.ExitCode() != tc.code || r.Success != (tc.code == 0) || r.SchemaVersion != SchemaVersion {
			t.Errorf("%d results, %q: exit %d, success %v; want %d", len(tc.rs), tc.why, r.ExitCode(), r.Success, tc.code)
		}
	}
}

// A Lease no replica ever renewed (no renewTime) is a failed check, not a
// crash; one renewed by a running replica passes.
func TestLeaderCheckReadsAnyLease(t *testing.T) {
	ctl, err := controllerOf(controllerDeployment("--leader-elect-id=gm"))
	if err != nil {
		t.Fatal(err)
	}
	ctl.Deployment.Status.ReadyReplicas = 1
	ctl.Deployment.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gm"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "globalmirror", Name: "gm-1", Labels: map[string]string{"app": "gm"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "globalmirror", Name: "gm"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new("gm-1_4b1e")}}
	c := fake.NewClientset(pod, lease)
	r := run(t, "controller leader", &Cluster{Client: c, Controller: ctl})
	if r.Result != Error || !strings.Contains(r.Detail, "renewed never") {
		t.Errorf("a Lease never renewed: %+v", r)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := c.CoordinationV1().Leases("globalmirror").Update(t.Context(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "controller leader", &Cluster{Client: c, Controller: ctl}); r.Result != OK || !strings.Contains(r.Detail, "gm-1 holds") {
		t.Errorf("renewed by a running replica: %+v", r)
	}
}

// Leader election off is right for one replica and wrong for more: they
// would all write.
func TestLeaderElectionOffWithReplicasFails(t *testing.T) {
	ctl, err := controllerOf(controllerDeployment("--leader-elect=false"))
	if err != nil {
		t.Fatal(err)
	}
	ctl.Deployment.Status.ReadyReplicas = 1
	cl := &Cluster{Client: fake.NewClientset(), Controller: ctl}
	if r := run(t, "controller leader", cl); r.Result != OK {
		t.Errorf("one replica, no election: %+v", r)
	}
	ctl.Deployment.Spec.Replicas = new(int32(2))
	if r := run(t, "controller leader", cl); r.Result != Error || !strings.Contains(r.Detail, "2 replicas") || r.Hint == "" {
		t.Errorf("two replicas, no election: %+v", r)
	}
}

// An API error leaves the check it stopped unjudged: ‼ "could not read",
// saying whether it was a refusal, never a finding; the run then could
// not check everything, and says which.
func TestAPIErrorsAreWhatCouldNotBeRead(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no RBAC"))
	})
	c.PrependReactor("list", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection reset")
	})
	var rs []Result
	r := run(t, "Linkerd's headless mirrors", &Cluster{Client: c})
	rs = append(rs, r)
	if r.Result != Warning || !strings.Contains(r.Detail, "could not read: listing Linkerd's mirrors: forbidden") || !strings.Contains(r.Hint, "reads as you") {
		t.Errorf("a refused list: %+v", r)
	}
	ctl, err := findController(t.Context(), c, "", "app=gm")
	if err == nil || ctl != nil {
		t.Fatalf("a failed list of Deployments: %v, %v", ctl, err)
	}
	if r := run(t, "controller running", &Cluster{ControllerErr: err}); r.Result != Warning || !strings.Contains(r.Detail, "could not read") || !strings.Contains(r.Detail, "connection reset") {
		t.Errorf("the controller could not be looked for: %+v", r)
	} else {
		rs = append(rs, r)
	}
	dns := &DNS{CorefileErrs: map[string]error{"kube-system/coredns": apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "coredns", errors.New("no RBAC"))},
		Corefiles: map[string]string{}, Service: &corev1.Service{}}
	if r := run(t, "global stanza", &Cluster{DNS: dns}); r.Result != Warning || !strings.Contains(r.Detail, "kube-system/coredns: forbidden") {
		t.Errorf("a Corefile that could not be read: %+v", r)
	}
	report := NewReport(rs, "")
	if report.Success || report.ExitCode() != ExitCouldNotCheck || report.Error != "could not read what these checks need: linkerd-headless-mirrors, controller-running" {
		t.Errorf("a run with checks that could not read: success %v, exit %d, error %q; want false, %d, naming both", report.Success, report.ExitCode(), report.Error, ExitCouldNotCheck)
	}
	if ok := NewReport([]Result{{ID: "x", Result: Warning}}, ""); !ok.Success || ok.ExitCode() != 0 {
		t.Errorf("a warning that is a finding: success %v, exit %d; want true, 0", ok.Success, ok.ExitCode())
	}
}

// The permissions check asks for exactly what the halves' rules say.
func TestNeedsAreTheRulesInEachNamespace(t *testing.T) {
	ctl, err := controllerOf(controllerDeployment("--namespaces=a,b", "--leader-elect-id=gm"))
	if err != nil {
		t.Fatal(err)
	}
	needs := controllerNeeds(&Cluster{Controller: ctl})
	has := func(n need) bool { return slices.Contains(needs, n) }
	for _, n := range []need{{"get", "", "services", "a", ""}, {"delete", "discovery.k8s.io", "endpointslices", "b", ""},
		{"update", "coordination.k8s.io", "leases", "globalmirror", "gm"}, {"create", "coordination.k8s.io", "leases", "globalmirror", ""}} {
		if !has(n) {
			t.Errorf("the controller's needs lack %+v", n)
		}
	}
	if has(need{"get", "", "services", "", ""}) {
		t.Error("a controller of two namespaces asks cluster-wide")
	}
	cl := &Cluster{DNS: &DNS{Corefiles: map[string]string{
		"kube-system/a": strings.Replace(corefile, "ttl 5", "ttl 5\n        namespaces app", 1),
		"kube-system/b": strings.Replace(corefile, "ttl 5", "ttl 5\n        namespaces db", 1),
	}}}
	cl.DNS.Pods = []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system"}, Spec: corev1.PodSpec{ServiceAccountName: "coredns"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system"}, Spec: corev1.PodSpec{ServiceAccountName: "gm-dns"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system"}, Spec: corev1.PodSpec{ServiceAccountName: "coredns"}},
	}
	if got := dnsAccounts(cl); !slices.Equal(got, []string{"kube-system/coredns", "kube-system/gm-dns"}) {
		t.Errorf("the DNS pods' ServiceAccounts mid-rollout: %v", got)
	}
	got := dnsNeeds(cl)
	if len(got) != 8 || !slices.Contains(got, need{"watch", "discovery.k8s.io", "endpointslices", "db", ""}) || !slices.Contains(got, need{"list", "", "services", "app", ""}) {
		t.Errorf("two stanzas' namespaces: %+v", got)
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
			r := run(t, "Linkerd's headless mirrors", &Cluster{Client: fake.NewClientset(tc.objs...)})
			if (r.Result == OK) != tc.ok || !strings.Contains(r.Detail, tc.detail) || (r.Result != OK && r.Hint == "") {
				t.Errorf("%+v; want ok %v, detail with %q, a hint where it fails", r, tc.ok, tc.detail)
			}
			if strings.Contains(r.Detail, "west") && !tc.ok {
				t.Errorf("west mirrors headless services, yet it is named: %s", r.Detail)
			}
		})
	}
	// Mirrors where the controller does not watch: a warning naming where.
	ctl, err := controllerOf(controllerDeployment("--namespaces=db"))
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, "Linkerd's headless mirrors", &Cluster{Client: fake.NewClientset(headless, mirror("east", "-enable-headless-services")), Controller: ctl})
	if r.Result != Warning || !strings.Contains(r.Detail, "does not watch, so without a global: app: 1") || r.Hint == "" {
		t.Errorf("mirrors outside the watched namespaces: %+v", r)
	}
}

// Every check the command runs has its row in the README's table of what
// each check reads, under the name it prints.
func TestEveryCheckIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "What each check reads:")
	if !ok {
		t.Fatal("README.md has no table of what each check reads")
	}
	table, _, _ = strings.Cut(table, "\n\n\n")
	rows := map[string]string{} // by each check it names: its first cell, anchors and all
	anchor := regexp.MustCompile(`^(?:<a id="[^"]+"></a>)*`)
	for _, line := range strings.Split(table, "\n") {
		if cell, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |"); ok && strings.HasPrefix(line, "| ") {
			for _, name := range strings.Split(anchor.ReplaceAllString(cell, ""), ", ") {
				rows[name] = cell
			}
		}
	}
	var results []Result
	Check(t.Context(), &Cluster{Client: fake.NewClientset(), Version: &version.Info{Major: "1", Minor: "36"}, DNSErr: errors.New("none")},
		func(r Result) { results = append(results, r) })
	if len(results) != len(checks) {
		t.Fatalf("%d checks ran, want the %d of the table", len(results), len(checks))
	}
	ids := map[string]bool{}
	for i, r := range results {
		if r.Category != checks[i].category || r.Check != checks[i].name || r.ID != checks[i].id {
			t.Errorf("result %d is %s %q (%s), want the table's %s %q (%s)", i, r.Category, r.Check, r.ID, checks[i].category, checks[i].name, checks[i].id)
		}
		if ids[r.ID] || !strings.Contains(string(readme), "`"+r.ID+"`") {
			t.Errorf("check %q: its id %q is used twice, or README.md does not name it", r.Check, r.ID)
		}
		ids[r.ID] = true
	}
	for _, r := range results {
		cell, ok := rows[r.Check]
		if !ok {
			t.Errorf("check %q has no row in README.md's table (rows: %q)", r.Check, slices.Sorted(maps.Keys(rows)))
			continue
		}
		_, fragment, _ := strings.Cut(r.Doc, "#")
		if !strings.HasPrefix(r.Doc, "https://github.com/globalmirror/globalmirror/blob/main/README.md#") || !strings.Contains(cell, `<a id="`+fragment+`"></a>`) {
			t.Errorf("check %q links to %q, which its row %q does not anchor", r.Check, r.Doc, cell)
		}
		if r.Result != OK && r.Result != Skipped && r.Hint == "" {
			t.Errorf("check %q: %s with no hint: %s", r.Check, r.Result, r.Detail)
		}
	}
}

// A half of another release than the command's: a minor apart is ‼, more
// is ✘, one that does not say is ‼; the same minor leaves the result as
// it was.
func TestVersionSkewOfTheHalves(t *testing.T) {
	defer func(v string) { build.Version = v }(build.Version)
	build.Version = "0.2.1"
	ok := result(CategoryDNS, "cluster DNS image", OK, "2 pods run an image with the global plugin", "")
	info := func(v string) string {
		return `coredns_global_build_info{goversion="go1.26.8",version="` + v + `"} 1` + "\n"
	}
	for _, tc := range []struct {
		metrics map[string]string
		want    Level
		names   string
	}{
		{map[string]string{"a": info("0.2.0"), "b": info("0.2.3")}, OK, ""},
		{map[string]string{"a": info("0.2.0"), "b": info("0.1.9")}, Warning, "b 0.1.9"},
		{map[string]string{"a": info("0.4.0"), "b": info("0.1.9")}, Error, "a 0.4.0, b 0.1.9"},
		{map[string]string{"a": "coredns_global_globals 3\n"}, Warning, "a (its release unsaid"},
	} {
		r := versionSkew(ok, "coredns_global_build_info", tc.metrics)
		if r.Result != tc.want || !strings.Contains(r.Detail, tc.names) || (tc.want == OK) != (r == ok) || (tc.want != OK && r.Hint == "") {
			t.Errorf("%v: %+v; want %s naming %q", tc.metrics, r, tc.want, tc.names)
		}
	}
}

// Bounded says whether fn ended by the deadline and grace, and what it
// panicked with; RunCheck turns a panic into one ✘ of the report.
func TestBoundedEndsByTheDeadlineAndKeepsAPanic(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	block := make(chan struct{})
	defer close(block)
	if ended, p := Bounded(ctx, 10*time.Millisecond, func() { <-block }); ended || p != nil {
		t.Errorf("a fn that does not end: ended %v, panicked %v", ended, p)
	}
	if ended, p := Bounded(t.Context(), time.Second, func() { panic("boom") }); !ended || p != "boom" {
		t.Errorf("a fn that panics: ended %v, panicked %v", ended, p)
	}
	r := RunCheck(t.Context(), time.Second, func(context.Context) (*Cluster, error) { panic("boom") })
	if len(r.Checks) != len(checks) || r.Checks[0].Result != Skipped || !strings.Contains(r.Checks[0].Detail, "internal error: boom") ||
		!strings.Contains(r.Error, "internal error: boom") || r.ExitCode() != ExitCouldNotCheck {
		t.Errorf("a panicking check: %+v", r)
	}
}

// Each half's gauge against what should exist: every DNS pod's, and the
// controller's leader's (the largest); a pod without the gauge differs,
// a controller not read is not judged.
func TestServedDifferences(t *testing.T) {
	dns := func(n string) string {
		return "# TYPE coredns_global_globals gauge\ncoredns_global_globals " + n + "\n"
	}
	ctrl := func(n string) string { return "globalmirror_globals " + n + "\nglobalmirror_globals_other 9\n" }
	for _, tc := range []struct {
		dns, ctrl map[string]string
		want      []string
	}{
		{map[string]string{"a": dns("3"), "b": dns("3")}, map[string]string{"l": ctrl("3"), "s": ctrl("0")}, nil},
		{map[string]string{"a": dns("3")}, nil, nil},
		{map[string]string{"a": dns("3"), "b": dns("2")}, map[string]string{"l": ctrl("3")}, []string{"DNS pod b answers for 2"}},
		{map[string]string{"a": "coredns_global_endpoints 3\n"}, map[string]string{"l": ctrl("4"), "s": ctrl("0")},
			[]string{"a exports no coredns_global_globals", "the controller writes 4"}},
		{map[string]string{"a": dns("3")}, map[string]string{"l": "other 3\n"}, []string{"no controller pod exports globalmirror_globals"}},
	} {
		if got := servedDifferences(3, tc.dns, tc.ctrl); !slices.Equal(got, tc.want) {
			t.Errorf("%v %v: %q, want %q", tc.dns, tc.ctrl, got, tc.want)
		}
	}
}

// A Corefile's imports are read as the pod reads them, from its ConfigMap
// volumes (AKS's relative custom/*.override, k3s's absolute one, its
// coredns-custom optional and absent), never from the operator's own
// files; one from another kind of volume is said plainly.
func TestImportsAreReadFromThePodsConfigMaps(t *testing.T) {
	withoutStanza := strings.Replace(corefile, "global cluster.local {\n        ttl 5\n    }\n", "", 1)
	// The operator's own files: a stanza the pod cannot see.
	local := filepath.Join(t.TempDir(), "global.override")
	if err := os.WriteFile(local, []byte("global cluster.local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(local))
	custom := func(source corev1.VolumeSource) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-1", Labels: map[string]string{"k8s-app": "kube-dns"}},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Args: []string{"-conf", "/etc/coredns/Corefile"}, VolumeMounts: []corev1.VolumeMount{
					{Name: "config-volume", MountPath: "/etc/coredns"}, {Name: "custom", MountPath: "/etc/coredns/custom"}}}},
				Volumes: []corev1.Volume{
					{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}},
					{Name: "custom", VolumeSource: source},
				},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	customConfigMap := corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "coredns-custom"}, Optional: ptr.To(true)}}
	withStanza := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-custom"},
		Data: map[string]string{"global.override": "global cluster.local {\n    suffix -imported\n}\n"}}
	for _, tc := range []struct {
		name, imports string
		pod           *corev1.Pod
		custom        *corev1.ConfigMap
		found         bool
		problem       string
	}{
		{"AKS: relative, in the block and after it", "    import custom/*.override\n", custom(customConfigMap), withStanza, true, ""},
		{"k3s: absolute", "    import /etc/coredns/custom/*.override\n", custom(customConfigMap), withStanza, true, ""},
		{"k3s: its optional ConfigMap absent", "    import /etc/coredns/custom/*.override\n", custom(customConfigMap), nil, false, "no global stanza in the server block of the kubernetes plugin"},
		{"a Secret", "    import custom/*.override\n", custom(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}), withStanza, false,
			"/etc/coredns/Corefile: import custom/*.override reads a volume that is no ConfigMap (custom)"},
		{"the operator's file, by its absolute path", "    import " + local + "\n", custom(customConfigMap), nil, false, "reads the image's own filesystem"},
		{"the operator's file, by a relative path", "    import ../../../../../../../../" + local + "\n", custom(customConfigMap), nil, false, "reads the image's own filesystem"},
		{"the operator's file, from the working directory", "    import global.override\n", custom(customConfigMap), nil, false, "File to import not found: /etc/coredns/global.override"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(withoutStanza, "    kubernetes cluster.local", tc.imports+"    kubernetes cluster.local", 1) + "import custom/*.server\n"
			objs := []runtime.Object{
				&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "kube-dns"}}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"}, Data: map[string]string{"Corefile": text}},
				tc.pod,
			}
			if tc.custom != nil {
				objs = append(objs, tc.custom)
			}
			dns, err := findDNS(t.Context(), fake.NewClientset(objs...), "kube-system/kube-dns")
			if err != nil {
				t.Fatal(err)
			}
			found, problems, _ := stanzas(&Cluster{DNS: dns})
			if st := found["kube-system/coredns"]; (st != nil) != tc.found || (st != nil && st.Suffix != "-imported") {
				t.Errorf("stanza %+v, problems %q", st, problems)
			}
			if got := strings.Join(problems, "; "); (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
				t.Errorf("problems %q, want %q", got, tc.problem)
			}
		})
	}
}

// run runs the check named name on cl as Check does, with no globals read.
func run(t *testing.T, name string, cl *Cluster) Result {
	t.Helper()
	i := slices.IndexFunc(checks, func(c check) bool { return c.name == name })
	if i < 0 {
		t.Fatalf("no check %q", name)
	}
	return checks[i].run(t.Context(), checks[i], cl, globals{})
}

// The DNS probe's verdict: exactly the ready addresses, in any order;
// another set, none, or another rcode says how it differs.
func TestTheProbeComparesAnswersExactly(t *testing.T) {
	a := func(rcode int, ips ...string) *dns.Msg {
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: rcode}}
		for _, ip := range ips {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: "g.", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.ParseIP(ip)})
		}
		return m
	}
	want := []string{"10.0.0.1", "10.0.0.2"}
	for _, tc := range []struct {
		r    *dns.Msg
		says string
	}{
		{a(dns.RcodeSuccess, "10.0.0.2", "10.0.0.1"), ""},
		{a(dns.RcodeSuccess, "10.0.0.1"), "g.: 10.0.0.1, want 10.0.0.1 10.0.0.2"},
		{a(dns.RcodeSuccess), "g.: no address, want 10.0.0.1 10.0.0.2"},
		{a(dns.RcodeSuccess, "10.0.0.1", "10.0.0.2", "10.0.0.3"), "g.: 10.0.0.1 10.0.0.2 10.0.0.3, want 10.0.0.1 10.0.0.2"},
		{a(dns.RcodeNameError), "g.: NXDOMAIN, want 10.0.0.1 10.0.0.2"},
	} {
		if got := answerDiffers("g.", tc.r, want); got != tc.says {
			t.Errorf("%v: %q, want %q", tc.r.Answer, got, tc.says)
		}
	}
}
