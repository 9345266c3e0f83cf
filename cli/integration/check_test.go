// Package integration runs the globalmirror command's reads against a real
// API server: as a user with less than cluster-admin, on an install that
// watches many namespaces, with two releases, and with a Corefile as AKS
// lays it out.
package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/controller"
	"github.com/globalmirror/globalmirror/controller/options"
	"github.com/globalmirror/globalmirror/source"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/localkube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var env *localkube.Env

func TestMain(m *testing.M) { os.Exit(localkube.Main(m, &env, "cli")) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// needsControlPlane skips t under -short, where no control plane starts.
func needsControlPlane(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("needs a control plane (not -short)")
	}
}

func namespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
}

// as is a client of the cluster that acts as user (impersonated).
func as(user string) (kubernetes.Interface, *rest.Config) {
	cfg := rest.CopyConfig(env.Cluster("cli").Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return kubernetes.NewForConfigOrDie(cfg), cfg
}

// A user who may list the mirrors but not watch them (the index's lists
// stream as watches where the server can, and its feeds retry a refused
// one without end) is told which verb is missing where, at once, not after
// the timeout.
func TestAUserWhoMayListButNotWatchIsToldSo(t *testing.T) {
	needsControlPlane(t)
	admin := env.Cluster("cli").Client
	ctx := t.Context()
	const ns = "narrow"
	namespace(t, admin, ns)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list"}},
	}}
	role, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})
	must(t, err)
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "narrow"}}}, metav1.CreateOptions{})
	must(t, err)
	client, cfg := as("narrow")
	cl := &cli.Cluster{Client: client, Config: cfg, Controller: &cli.Controller{Options: options.Default()}}

	ctx30, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = cli.Status(ctx30, cl, ns, "db-global")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "watch services in narrow") ||
		!strings.Contains(err.Error(), "watch endpointslices.discovery.k8s.io in narrow") || strings.Contains(err.Error(), "list ") {
		t.Fatalf("status as a user who may not watch: %v; want forbidden, naming watch of both resources in %s and nothing else", err, ns)
	}

	// Given watch too, the same user reads the namespace: no such global.
	for i := range role.Rules {
		role.Rules[i].Verbs = append(role.Rules[i].Verbs, "watch")
	}
	_, err = admin.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{})
	must(t, err)
	// The API server's authorizer sees the Role's update moments later.
	ctx30b, cancelb := context.WithTimeout(ctx, 30*time.Second)
	defer cancelb()
	var st *cli.GlobalStatus
	if err := await.Poll(ctx30b, 20*time.Second, 100*time.Millisecond, func(ctx context.Context) string {
		if st, err = cli.Status(ctx, cl, ns, "db-global"); err != nil {
			return err.Error()
		}
		return ""
	}); err != nil || st.Exists || !st.InSync {
		t.Fatalf("status with list and watch: %+v, %v; want a global that does not exist, nothing left of it", st, err)
	}

	// The controller as the user finds it: not by a cluster-wide list of
	// Deployments, which the user may not make, but in its namespace, which
	// the user may read.
	const controllerNS = "narrow-controller"
	namespace(t, admin, controllerNS)
	controllerDeployment(t, admin, controllerNS, "--suffix=-all")
	_, err = admin.RbacV1().Roles(controllerNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: controllerNS},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{})
	must(t, err)
	_, err = admin.RbacV1().RoleBindings(controllerNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: controllerNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "narrow"}}}, metav1.CreateOptions{})
	must(t, err)
	found, err := cli.Discover(ctx, client, cfg, cli.DefaultOptions())
	if err != nil || !apierrors.IsForbidden(found.ControllerErr) || !strings.Contains(found.ControllerErr.Error(), "--controller-namespace") {
		t.Fatalf("the controller looked for in every namespace: %v, %v; want forbidden, pointing to --controller-namespace", err, found.ControllerErr)
	}
	opts := cli.DefaultOptions()
	opts.ControllerNamespace = controllerNS
	if err := await.Poll(ctx30b, 20*time.Second, 100*time.Millisecond, func(ctx context.Context) string {
		if found, err = cli.Discover(ctx, client, cfg, opts); err == nil && found.ControllerErr != nil {
			err = found.ControllerErr
		}
		if err != nil {
			return err.Error()
		}
		return ""
	}); err != nil || found.Controller == nil || found.Controller.Options.Suffix != "-all" {
		t.Fatalf("the controller looked for in its namespace: %v, %+v", err, found)
	}
	if st, err := cli.Status(ctx30b, found, ns, "db-all"); err != nil || st.Exists || st.Base != "db" {
		t.Fatalf("status with the controller's flags: %+v, %v", st, err)
	}
}

// controllerDeployment writes the chart's controller Deployment into ns,
// with args; nothing runs it. Its labels are the chart's, and "test" set
// to the test's name.
func controllerDeployment(t *testing.T, c kubernetes.Interface, ns string, args ...string) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "globalmirror", "app.kubernetes.io/part-of": "globalmirror",
		"app.kubernetes.io/component": "controller", "test": strings.ToLower(t.Name())}
	_, err := c.AppsV1().Deployments(ns).Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "globalmirror-controller", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{ServiceAccountName: "globalmirror-controller", Containers: []corev1.Container{{
				Name: "controller", Image: "globalmirror-controller", Args: args}}}},
		},
	}, metav1.CreateOptions{})
	must(t, err)
}

// A controller that watches 50 namespaces is checked inside check's default
// timeout: hundreds of access reviews, none cut off by the client's rate
// limit or the timeout.
func TestFiftyNamespacesAreCheckedInsideTheTimeout(t *testing.T) {
	needsControlPlane(t)
	admin := env.Cluster("cli").Client
	ctx := t.Context()
	var namespaces []string
	for i := range 50 {
		namespaces = append(namespaces, fmt.Sprintf("tenant-%02d", i))
		namespace(t, admin, namespaces[i])
	}
	namespace(t, admin, "globalmirror-system")
	controllerDeployment(t, admin, "globalmirror-system", "--namespaces="+strings.Join(namespaces, ","))

	const timeout = 30 * time.Second // check's default
	cfg := cli.CommandConfig(env.Cluster("cli").Config, timeout)
	ctx30, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	report := cli.RunCheck(ctx30, time.Second, func(ctx context.Context) (*cli.Cluster, error) {
		return cli.Discover(ctx, kubernetes.NewForConfigOrDie(cfg), cfg, cli.DefaultOptions())
	})
	// No kubelet runs the DNS pods here: their metrics cannot be read.
	if report.Error != "" && report.Error != "could not read what these checks need: cluster-dns-image" {
		t.Errorf("the run did not check everything: %s", report.Error)
	}
	rs := report.Checks
	var rbac *cli.Result
	for i, r := range rs {
		if strings.Contains(r.Detail, "before the timeout") {
			t.Errorf("%s: %s", r.Check, r.Detail)
		}
		if r.Check == "RBAC of the controller" {
			rbac = &rs[i]
		}
	}
	// Its ServiceAccount has no rights: each namespace's missing ones named.
	if rbac == nil || rbac.Result != cli.Error || !strings.Contains(rbac.Detail, "in tenant-49") {
		t.Errorf("the controller's RBAC check: %+v", rbac)
	}
}

// checkAs runs every check of opts' installation as the cluster's admin and
// returns the results by check.
func checkAs(t *testing.T, opts cli.Options) map[string]cli.Result {
	t.Helper()
	cfg := cli.CommandConfig(env.Cluster("cli").Config, 30*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out := map[string]cli.Result{}
	for _, r := range cli.RunCheck(ctx, time.Second, func(ctx context.Context) (*cli.Cluster, error) {
		return cli.Discover(ctx, kubernetes.NewForConfigOrDie(cfg), cfg, opts)
	}).Checks {
		out[r.Check] = r
	}
	return out
}

// Two releases of the controller, each in its namespace, are both named.
func TestTwoReleasesAreBothNamed(t *testing.T) {
	needsControlPlane(t)
	admin := env.Cluster("cli").Client
	for _, ns := range []string{"release-a", "release-b"} {
		namespace(t, admin, ns)
		controllerDeployment(t, admin, ns)
	}
	opts := cli.DefaultOptions()
	opts.ControllerSelector += ",test=" + strings.ToLower(t.Name())
	r := checkAs(t, opts)["controller running"]
	if r.Result != cli.Error || !strings.Contains(r.Detail, "2 controller releases watch the same namespaces: release-a/globalmirror-controller, release-b/globalmirror-controller") || r.Hint == "" {
		t.Errorf("%+v; want an error naming both releases, with a hint", r)
	}
}

// The Corefile is judged as the cluster's CoreDNS pods load it: its stanza
// imported from an optional coredns-custom ConfigMap (AKS's layout), and
// its zones against the kubernetes plugin's under a custom cluster domain.
func TestTheStanzaIsReadAsThePodsLoadIt(t *testing.T) {
	needsControlPlane(t)
	admin := env.Cluster("cli").Client
	ctx := t.Context()
	const ns = "custom-dns"
	namespace(t, admin, ns)
	labels := map[string]string{"k8s-app": "kube-dns"}
	_, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}, metav1.CreateOptions{})
	must(t, err)
	corefile := ".:53 {\n    errors\n    import custom/*.override\n    kubernetes example.corp in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n}\nimport custom/*.server\n"
	_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns},
		Data: map[string]string{"Corefile": corefile}}, metav1.CreateOptions{})
	must(t, err)
	custom := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns-custom", Namespace: ns},
		Data: map[string]string{"global.override": "global cluster.local\n"}}
	custom, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, custom, metav1.CreateOptions{})
	must(t, err)
	optional := true
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns-0", Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "coredns", Image: "coredns", Args: []string{"-conf", "/etc/coredns/Corefile"},
				VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns"}, {Name: "custom-config-volume", MountPath: "/etc/coredns/custom"}}}},
			Volumes: []corev1.Volume{
				{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}, Items: []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}}}}},
				{Name: "custom-config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "coredns-custom"}, Optional: &optional}}},
			},
		}}, metav1.CreateOptions{})
	must(t, err)
	// No kubelet runs it: its status says it runs.
	pod.Status.Phase = corev1.PodRunning
	_, err = admin.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	must(t, err)
	opts := cli.DefaultOptions()
	opts.DNSService = ns + "/kube-dns"

	r := checkAs(t, opts)["global stanza"]
	if r.Result != cli.Error || !strings.Contains(r.Detail, "global answers in cluster.local., which is not the cluster's domain: the kubernetes plugin serves example.corp.") {
		t.Errorf("the imported stanza in another domain than the cluster's: %+v", r)
	}
	custom.Data["global.override"] = "global example.corp\n"
	_, err = admin.CoreV1().ConfigMaps(ns).Update(ctx, custom, metav1.UpdateOptions{})
	must(t, err)
	// No kubelet runs the pod: whether it loaded the stanza is unknown.
	if r := checkAs(t, opts)["global stanza"]; r.Result != cli.Warning || !strings.Contains(r.Detail, "could not read whether the pods loaded it: "+ns+"/coredns: zones example.corp. in the Corefile") {
		t.Errorf("the imported stanza in the cluster's domain: %+v", r)
	}
	must(t, admin.CoreV1().ConfigMaps(ns).Delete(ctx, custom.Name, metav1.DeleteOptions{}))
	if r := checkAs(t, opts)["global stanza"]; r.Result != cli.Error || !strings.Contains(r.Detail, "no global stanza") {
		t.Errorf("the optional ConfigMap gone: %+v", r)
	}
}

// A half whose ServiceAccount has every right it needs but the Links' runs,
// and check says so as a warning naming what then goes unhonoured; granted
// them, it passes.
func TestRBACWithoutTheLinksIsAWarningNamingWhatGoesUnhonoured(t *testing.T) {
	needsControlPlane(t)
	admin := env.Cluster("cli").Client
	ctx := t.Context()
	const ns = "links-rbac"
	namespace(t, admin, ns)
	controllerDeployment(t, admin, ns, "--namespaces="+ns, "--leader-elect=false")
	grant := func(name string, rules []rbacv1.PolicyRule) {
		t.Helper()
		_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
		must(t, err)
		_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "globalmirror-controller"}}}, metav1.CreateOptions{})
		must(t, err)
	}
	grant("links-rbac-controller", controller.Rules())
	opts := cli.DefaultOptions()
	opts.ControllerSelector += ",test=" + strings.ToLower(t.Name())
	r := checkAs(t, opts)["RBAC of the controller"]
	if r.Result != cli.Warning || !strings.Contains(r.Detail, "ServiceAccount "+ns+"/globalmirror-controller may not list links.multicluster.linkerd.io") ||
		!strings.Contains(r.Detail, "go unhonoured by the controller's EndpointSlices") || !strings.Contains(r.Hint, "links.multicluster.linkerd.io") {
		t.Errorf("without the Links: %+v", r)
	}
	grant("links-rbac-links", source.LinkRules())
	if r := checkAs(t, opts)["RBAC of the controller"]; r.Result != cli.OK {
		t.Errorf("with the Links: %+v", r)
	}
}
