package integration

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/source"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/globalmirror/globalmirror/test/mirrorsim"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// drain drains (level) or undrains (NotDrained) cluster as user.
func drain(t *testing.T, user, cluster string, level aggregate.Drain) (*cli.Drained, error) {
	t.Helper()
	client, cfg := as(user)
	return cli.Drain(t.Context(), client, cfg, cli.DrainTarget{Cluster: cluster, LinkNamespace: mirrorsim.LinkNamespace}, level)
}

// A drain writes the one annotation on the Link, with the user's own
// rights, as the user the API server names, and nothing else; undrain
// removes it; a user who may not patch Links changes nothing; and check
// names the drained cluster with its level and since when.
func TestDrainWritesOnlyItsAnnotationAsTheUser(t *testing.T) {
	needsControlPlane(t)
	ctx := t.Context()
	cfg := env.Cluster("cli").Config
	admin := env.Cluster("cli").Client
	must(t, mirrorsim.InstallLinkCRD(ctx, cfg))
	links := dynamic.NewForConfigOrDie(cfg).Resource(mirrorsim.LinkResource).Namespace(mirrorsim.LinkNamespace)
	// south's Link is named unlike its cluster, whose name Linkerd labels
	// its mirrors with.
	for name, target := range map[string]string{"east": "east", "west": "west", "south": "south-prod"} {
		_, err := links.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mirrorsim.LinkResource.GroupVersion().String(), "kind": "Link",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"kept": "yes"}},
			"spec":     map[string]any{"targetClusterName": target, "gatewayAddress": "192.0.2.254"},
		}}, metav1.CreateOptions{})
		must(t, err)
	}
	_, err := admin.RbacV1().Roles(mirrorsim.LinkNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "drainer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{source.LinkGroup}, Resources: []string{source.LinkResource}, Verbs: []string{"get", "list", "patch"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = admin.RbacV1().RoleBindings(mirrorsim.LinkNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "drainer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "drainer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "operator"}},
	}, metav1.CreateOptions{})
	must(t, err)
	before, err := links.Get(ctx, "east", metav1.GetOptions{})
	must(t, err)

	d, err := drain(t, "operator", "east", aggregate.DrainShared)
	if err != nil || !d.Written || d.As != "operator" || d.Level != "shared" || d.Was != "" || d.Object != "Link linkerd-multicluster/east" {
		t.Fatalf("drain: %+v, %v", d, err)
	}
	var out bytes.Buffer
	d.Write(&out, cli.DrainTarget{Cluster: "east", LinkNamespace: mirrorsim.LinkNamespace})
	if !strings.Contains(out.String(), "as operator with your own rights") || !strings.Contains(out.String(), "Undo: globalmirror undrain east") {
		t.Errorf("drain says:\n%s", out.String())
	}
	after, err := links.Get(ctx, "east", metav1.GetOptions{})
	must(t, err)
	if after.GetAnnotations()[aggregate.AnnotationDrain] != "shared" || after.GetLabels()["kept"] != "yes" {
		t.Errorf("annotations %v, labels %v", after.GetAnnotations(), after.GetLabels())
	}
	if !equalSpec(before, after) {
		t.Errorf("the spec changed: %v -> %v", before.Object["spec"], after.Object["spec"])
	}
	var mine []string
	for _, mf := range after.GetManagedFields() {
		if mf.Manager == cli.FieldManager {
			mine = append(mine, mf.FieldsV1.GetRawString())
		}
	}
	if want := `{"f:metadata":{"f:annotations":{".":{},"f:` + aggregate.AnnotationDrain + `":{}}}}`; len(mine) != 1 || mine[0] != want {
		t.Errorf("the command's managed fields %q, want only the annotation %s", mine, want)
	}
	m, err := links.Get(ctx, "east", metav1.GetOptions{})
	must(t, err)
	if level, since, err := source.LinkDrain(m); err != nil || level != aggregate.DrainShared || time.Since(since) > time.Minute || time.Since(since) < 0 {
		t.Errorf("read back: %v since %v, %v", level, since, err)
	}

	if d, err := drain(t, "operator", "east", aggregate.DrainShared); err != nil || d.Written {
		t.Errorf("drain again: %+v, %v; want nothing written", d, err)
	}
	if _, err := drain(t, "operator", "north", aggregate.DrainShared); err == nil || !strings.Contains(err.Error(), "the clusters linked there are east, south-prod (Link south), west") {
		t.Errorf("drain of a cluster with no Link: %v", err)
	}
	// A Link named unlike its cluster: found by its cluster's name, as
	// both halves match it, or by its own; either way it drains the
	// cluster its mirrors are labelled with, and says so.
	south, err := drain(t, "operator", "south-prod", aggregate.DrainShared)
	if err != nil || !south.Written || south.Cluster != "south-prod" || south.Object != "Link linkerd-multicluster/south" || south.Mirrors != -1 {
		t.Fatalf("drain south-prod: %+v, %v", south, err)
	}
	if again, err := drain(t, "operator", "south", aggregate.DrainShared); err != nil || again.Written || again.Cluster != "south-prod" {
		t.Errorf("drain south, its Link's name: %+v, %v; want the same Link, already drained", again, err)
	}
	out.Reset()
	south.Write(&out, cli.DrainTarget{Cluster: "south", LinkNamespace: mirrorsim.LinkNamespace})
	if !strings.Contains(out.String(), "Link linkerd-multicluster/south is to cluster south-prod (its spec.targetClusterName)") ||
		!strings.Contains(out.String(), "Warning: the headless mirrors of cluster south-prod here could not be listed with your rights") {
		t.Errorf("drain south says:\n%s", out.String())
	}
	if _, err := drain(t, "operator", "south", aggregate.NotDrained); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(t, "viewer", "west", aggregate.DrainAll); !apierrors.IsForbidden(err) {
		t.Errorf("drain by a user who may not: %v, want forbidden", err)
	}
	if w, err := links.Get(ctx, "west", metav1.GetOptions{}); err != nil || len(w.GetAnnotations()) != 0 {
		t.Errorf("west after a forbidden drain: %v, %v", w.GetAnnotations(), err)
	}

	// check: east drained, a warning that says since when.
	namespace(t, admin, "drain-release")
	controllerDeployment(t, admin, "drain-release")
	opts := cli.DefaultOptions()
	opts.ControllerSelector += ",test=" + strings.ToLower(t.Name())
	r := checkAs(t, opts)["drained clusters"]
	if r.Result != cli.Warning || !strings.Contains(r.Detail, "cluster east: shared since ") || !strings.Contains(r.Detail, "Link linkerd-multicluster/east") || !strings.Contains(r.Hint, "undrain") ||
		!strings.Contains(r.Detail, "Link linkerd-multicluster/east drains cluster east, of which there is no headless mirror here") {
		t.Errorf("check: %+v", r)
	}

	if d, err := drain(t, "operator", "east", aggregate.NotDrained); err != nil || !d.Written || d.Was != "shared" {
		t.Fatalf("undrain: %+v, %v", d, err)
	}
	after, err = links.Get(ctx, "east", metav1.GetOptions{})
	must(t, err)
	if _, ok := after.GetAnnotations()[aggregate.AnnotationDrain]; ok || !equalSpec(before, after) {
		t.Errorf("undrained: annotations %v, spec %v", after.GetAnnotations(), after.Object["spec"])
	}
	if r := checkAs(t, opts)["drained clusters"]; r.Result != cli.OK || r.Detail != "none" {
		t.Errorf("check, undrained: %+v", r)
	}
}

// equalSpec reports whether a and b have the same, present, spec.
func equalSpec(a, b *unstructured.Unstructured) bool {
	sa, _, _ := unstructured.NestedMap(a.Object, "spec")
	sb, _, _ := unstructured.NestedMap(b.Object, "spec")
	return len(sa) > 0 && reflect.DeepEqual(sa, sb)
}

// --service drains a local member service by its own annotation, and
// refuses a Service that is not one (a Linkerd mirror, globalmirror's own).
func TestDrainOfALocalServiceAnnotatesOnlyIt(t *testing.T) {
	needsControlPlane(t)
	ctx := t.Context()
	admin := env.Cluster("cli").Client
	const ns = "drain-local"
	namespace(t, admin, ns)
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{aggregate.LabelExported: "true"}}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-east", Labels: map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "east"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
	} {
		_, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		must(t, err)
	}
	drainService := func(name string, level aggregate.Drain) (*cli.Drained, error) {
		cfg := env.Cluster("cli").Config
		return cli.Drain(ctx, admin, cfg, cli.DrainTarget{Service: ns + "/" + name}, level)
	}
	if d, err := drainService("db", aggregate.DrainAll); err != nil || !d.Written || d.Object != "Service "+ns+"/db" {
		t.Fatalf("drain --service: %+v, %v", d, err)
	}
	svc, err := admin.CoreV1().Services(ns).Get(ctx, "db", metav1.GetOptions{})
	must(t, err)
	if svc.Annotations[aggregate.AnnotationDrain] != "all" || svc.Labels[aggregate.LabelExported] != "true" {
		t.Errorf("db: annotations %v, labels %v", svc.Annotations, svc.Labels)
	}
	if _, err := drainService("db-east", aggregate.DrainShared); err == nil || !strings.Contains(err.Error(), "not a local member service") {
		t.Errorf("drain of Linkerd's mirror: %v", err)
	}
	if mirror, err := admin.CoreV1().Services(ns).Get(ctx, "db-east", metav1.GetOptions{}); err != nil || len(mirror.Annotations) != 0 {
		t.Errorf("db-east after a refused drain: %v, %v", mirror.Annotations, err)
	}
	if d, err := drainService("db", aggregate.NotDrained); err != nil || !d.Written || d.Was != "all" {
		t.Fatalf("undrain --service: %+v, %v", d, err)
	}
	svc, err = admin.CoreV1().Services(ns).Get(ctx, "db", metav1.GetOptions{})
	must(t, err)
	if _, ok := svc.Annotations[aggregate.AnnotationDrain]; ok {
		t.Errorf("db undrained: annotations %v", svc.Annotations)
	}
}

// --exported drains, in the cluster under maintenance, every headless
// service it exports (Linkerd then copies the annotation onto the mirrors in
// every cluster that links it), and nothing else; undrain --exported undoes
// it.
func TestDrainExportedAnnotatesEveryExportedHeadlessService(t *testing.T) {
	needsControlPlane(t)
	ctx := t.Context()
	admin, cfg := env.Cluster("cli").Client, env.Cluster("cli").Config
	const ns = "drain-exported"
	namespace(t, admin, ns)
	exported := map[string]string{aggregate.LabelExported: "true"}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "kafka", Labels: exported}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
		{ObjectMeta: metav1.ObjectMeta{Name: "zk", Labels: exported}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
		{ObjectMeta: metav1.ObjectMeta{Name: "api", Labels: exported}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kafka-east", Labels: map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "east", aggregate.LabelExported: "true"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
	} {
		_, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		must(t, err)
	}
	drained := func() map[string]string {
		list, err := admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		must(t, err)
		out := map[string]string{}
		for _, svc := range list.Items {
			if v, ok := svc.Annotations[aggregate.AnnotationDrain]; ok {
				out[svc.Name] = v
			}
		}
		return out
	}
	all, err := cli.DrainExported(ctx, admin, cfg, aggregate.DrainShared)
	must(t, err)
	var objects []string
	for _, d := range all {
		if strings.HasPrefix(d.Object, "Service "+ns+"/") {
			objects = append(objects, d.Object)
		}
	}
	if got := drained(); !reflect.DeepEqual(got, map[string]string{"kafka": "shared", "zk": "shared"}) || len(objects) != 2 {
		t.Errorf("drained %v (reported %v), want kafka and zk alone", got, objects)
	}
	_, err = cli.DrainExported(ctx, admin, cfg, aggregate.NotDrained)
	must(t, err)
	if got := drained(); len(got) != 0 {
		t.Errorf("undrained: %v left", got)
	}
}

// A drain's preview, read with the user's rights from a real API server:
// the endpoints each global loses, and the global left with none, which
// the command refuses to drain unless forced; from the drained cluster
// (--exported), its own pods leave.
func TestDrainPreviewNamesTheGlobalLeftEmpty(t *testing.T) {
	needsControlPlane(t)
	ctx := t.Context()
	admin, cfg := env.Cluster("cli").Client, env.Cluster("cli").Config
	must(t, mirrorsim.InstallLinkCRD(ctx, cfg))
	_, err := dynamic.NewForConfigOrDie(cfg).Resource(mirrorsim.LinkResource).Namespace(mirrorsim.LinkNamespace).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mirrorsim.LinkResource.GroupVersion().String(), "kind": "Link",
		"metadata": map[string]any{"name": "preview"}, "spec": map[string]any{"targetClusterName": "pv-east"},
	}}, metav1.CreateOptions{})
	must(t, err)
	const ns = "drain-preview"
	namespace(t, admin, ns)
	ipv4 := discoveryv1.AddressTypeIPv4
	local, east, kv := fixture.LocalService(ns, "db"), fixture.HeadlessMirror(ns, "db", "pv-east"), fixture.HeadlessMirror(ns, "kv", "pv-east")
	for _, svc := range []*corev1.Service{local, east, kv} {
		svc.ResourceVersion = ""
		_, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		must(t, err)
	}
	for _, sl := range []*discoveryv1.EndpointSlice{
		fixture.Slice(local, "db-a", ipv4, nil, fixture.Ready("db-0", "10.0.0.1")),
		fixture.Slice(east, "db-pv-east-a", ipv4, nil, fixture.Ready("db-0", "10.1.0.1")),
		fixture.Slice(kv, "kv-pv-east-a", ipv4, nil, fixture.Ready("kv-0", "10.1.0.9")),
	} {
		sl.ResourceVersion, sl.UID = "", ""
		_, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{})
		must(t, err)
	}
	cl, err := cli.Discover(ctx, admin, cfg, cli.DefaultOptions())
	must(t, err)
	ours := func(p *cli.DrainPreview) (out []string) {
		for _, g := range p.Globals {
			if strings.HasPrefix(g.Global, ns+"/") {
				out = append(out, fmt.Sprintf("%s %v %d->%d", g.Global, g.Endpoints, g.ReadyBefore, g.ReadyAfter))
			}
		}
		return out
	}
	p, err := cli.PreviewOf(ctx, cl, cli.DrainTarget{Cluster: "pv-east", LinkNamespace: mirrorsim.LinkNamespace}, aggregate.DrainShared)
	must(t, err)
	if got, want := ours(p), []string{ns + "/db-global [db-0-pv-east 10.1.0.1] 2->1", ns + "/kv-global [kv-0-pv-east 10.1.0.9] 1->0"}; !reflect.DeepEqual(got, want) || !slices.Contains(p.Left, ns+"/kv-global") {
		t.Errorf("preview of drain pv-east: %q, left %v; want %q", got, p.Left, want)
	}
	p, err = cli.PreviewOf(ctx, cl, cli.DrainTarget{Exported: true}, aggregate.DrainAll)
	must(t, err)
	if got, want := ours(p), []string{ns + "/db-global [db-0 10.0.0.1] 2->1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("preview of drain --exported: %q; want %q", got, want)
	}
	var out bytes.Buffer
	p.Write(&out)
	if !strings.Contains(out.String(), ns+"/db-global: 1 endpoints leave its shared names (2 ready -> 1): db-0 10.0.0.1") {
		t.Errorf("preview says:\n%s", out.String())
	}
}
