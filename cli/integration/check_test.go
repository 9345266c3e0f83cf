// Package integration runs the globalmirror command's reads against a real
// API server: as a user with less than cluster-admin, and on an install
// that watches many namespaces.
package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/controller/options"
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
// with args; nothing runs it.
func controllerDeployment(t *testing.T, c kubernetes.Interface, ns string, args ...string) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "globalmirror", "app.kubernetes.io/part-of": "globalmirror", "app.kubernetes.io/component": "controller"}
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
	rs := cli.RunCheck(ctx30, time.Second, func(ctx context.Context) (*cli.Cluster, error) {
		return cli.Discover(ctx, kubernetes.NewForConfigOrDie(cfg), cfg, cli.DefaultOptions())
	})
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
