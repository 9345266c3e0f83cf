package chart

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/controller"
	"github.com/globalmirror/globalmirror/plugin/global"
	"github.com/globalmirror/globalmirror/source"
	"github.com/globalmirror/globalmirror/test/helmtest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

func TestLint(t *testing.T) {
	for name, args := range map[string][]string{
		"defaults": nil,
		"everything on": {"--set", "coredns.enabled=true", "--set", "serviceMonitor.enabled=true",
			"--set", "controller.namespaces={apps,db}", "--set", "coredns.isClusterService=true"},
		"coredns only": {"--set", "controller.enabled=false", "--set", "coredns.enabled=true"},
	} {
		t.Run(name, func(t *testing.T) {
			out := helmtest.Must(t, append([]string{"lint", "--strict", helmtest.ChartDir}, args...)...)
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

func TestTemplateDefaults(t *testing.T) {
	m := helmtest.Template(t, "gm")
	ids := m.IDs()
	sort.Strings(ids)
	want := []string{
		"ClusterRole /" + helmtest.Controller,
		"ClusterRoleBinding /" + helmtest.Controller,
		"Deployment globalmirror-system/" + helmtest.Controller,
		"PodDisruptionBudget globalmirror-system/" + helmtest.Controller,
		"Role globalmirror-system/" + helmtest.Controller + "-leader-election",
		"RoleBinding globalmirror-system/" + helmtest.Controller + "-leader-election",
		"Service globalmirror-system/" + helmtest.Controller + "-metrics",
		"ServiceAccount globalmirror-system/" + helmtest.Controller,
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("objects:\n%s\nwant:\n%s", strings.Join(ids, "\n"), strings.Join(want, "\n"))
	}

	var d appsv1.Deployment
	helmtest.Typed(t, m.MustGet(t, "Deployment", helmtest.Namespace, helmtest.Controller), &d)
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d, want 2", *d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/globalmirror/globalmirror-controller:"+appVersion(t) {
		t.Errorf("image = %s", c.Image)
	}
	for _, arg := range []string{"--leader-elect=true", "--leader-elect-namespace=globalmirror-system",
		"--leader-elect-id=" + helmtest.Controller, "--suffix=-global", "--local-selector=mirror.linkerd.io/exported",
		"--metrics-addr=:8080", "--log-format=json"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %q lack %s", c.Args, arg)
		}
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("liveness probe = %+v", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe = %+v", p)
	}
	checkHardened(t, d.Spec.Template.Spec, c, nil)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v", c.Resources)
	}

	var role rbacv1.ClusterRole
	helmtest.Typed(t, m.MustGet(t, "ClusterRole", "", helmtest.Controller), &role)
	// The permissions are written once, in Go, beside the code that uses them.
	if got, want := toYAML(t, role.Rules), toYAML(t, append(controller.Rules(), source.LinkRules()...)); got != want {
		t.Errorf("controller ClusterRole rules:\n%s\nwant:\n%s", got, want)
	}
	var lease rbacv1.Role
	helmtest.Typed(t, m.MustGet(t, "Role", helmtest.Namespace, helmtest.Controller+"-leader-election"), &lease)
	if got, want := toYAML(t, lease.Rules), toYAML(t, controller.LeaseRules(helmtest.Controller)); got != want {
		t.Errorf("lease Role rules:\n%s\nwant:\n%s", got, want)
	}
	var pdb policyv1.PodDisruptionBudget
	helmtest.Typed(t, m.MustGet(t, "PodDisruptionBudget", helmtest.Namespace, helmtest.Controller), &pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB spec = %+v", pdb.Spec)
	}
	if !matches(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PDB selector %v does not select the pods %v", pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
}

// TestTemplateEverything renders every optional part: CoreDNS as the cluster
// DNS, the ServiceMonitor, namespaced RBAC and no local services.
func TestTemplateEverything(t *testing.T) {
	m := helmtest.Template(t, "gm", "-f", helmtest.WriteValues(t, `
localSelector: none
controller:
  namespaces: [apps, db]
  image: {digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
coredns:
  enabled: true
  isClusterService: true
  priorityClassName: system-cluster-critical
  service: {name: kube-dns, clusterIP: 10.96.0.10}
serviceMonitor:
  enabled: true
  labels: {release: prometheus}
`))
	// Namespaced controller RBAC: a Role per namespace, no ClusterRole.
	if m.Get("ClusterRole", "", helmtest.Controller) != nil || m.Get("ClusterRoleBinding", "", helmtest.Controller) != nil {
		t.Errorf("controller ClusterRole rendered with controller.namespaces set")
	}
	for _, ns := range []string{"apps", "db"} {
		var rb rbacv1.RoleBinding
		helmtest.Typed(t, m.MustGet(t, "RoleBinding", ns, helmtest.Controller), &rb)
		if rb.RoleRef.Kind != "Role" || rb.Subjects[0].Namespace != helmtest.Namespace || rb.Subjects[0].Name != helmtest.Controller {
			t.Errorf("RoleBinding %s = %+v", ns, rb)
		}
		var role rbacv1.Role
		helmtest.Typed(t, m.MustGet(t, "Role", ns, helmtest.Controller), &role)
		if got, want := toYAML(t, role.Rules), toYAML(t, controller.Rules()); got != want {
			t.Errorf("controller Role in %s:\n%s\nwant:\n%s", ns, got, want)
		}
	}
	// The Links, cluster-wide whatever it watches.
	var links rbacv1.ClusterRole
	helmtest.Typed(t, m.MustGet(t, "ClusterRole", "", helmtest.Controller+"-links"), &links)
	if got, want := toYAML(t, links.Rules), toYAML(t, source.LinkRules()); got != want {
		t.Errorf("controller links ClusterRole:\n%s\nwant:\n%s", got, want)
	}
	var linksBinding rbacv1.ClusterRoleBinding
	helmtest.Typed(t, m.MustGet(t, "ClusterRoleBinding", "", helmtest.Controller+"-links"), &linksBinding)
	if linksBinding.RoleRef.Name != helmtest.Controller+"-links" || linksBinding.Subjects[0].Name != helmtest.Controller || linksBinding.Subjects[0].Namespace != helmtest.Namespace {
		t.Errorf("controller links ClusterRoleBinding %+v", linksBinding)
	}
	var d appsv1.Deployment
	helmtest.Typed(t, m.MustGet(t, "Deployment", helmtest.Namespace, helmtest.Controller), &d)
	args := d.Spec.Template.Spec.Containers[0].Args
	for _, arg := range []string{"--namespaces=apps,db", "--local-selector=none"} {
		if !slices.Contains(args, arg) {
			t.Errorf("controller args %q lack %s", args, arg)
		}
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, "-controller@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") {
		t.Errorf("image by digest = %s", img)
	}

	// CoreDNS: the Corefile's global stanza carries the controller's settings.
	var cm corev1.ConfigMap
	helmtest.Typed(t, m.MustGet(t, "ConfigMap", helmtest.Namespace, helmtest.CoreDNS), &cm)
	corefile := cm.Data["Corefile"]
	for _, want := range []string{
		".:53 {",
		"    global cluster.local {\n        suffix -global\n        local_selector none\n        namespaces apps db\n        ttl 5\n    }",
		"    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n",
		"    health {\n        lameduck 15s\n    }",
		"    ready\n",
		"    prometheus 0.0.0.0:9153\n",
		"    cache 30\n",
	} {
		if !strings.Contains(corefile, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, corefile)
		}
	}
	if strings.Index(corefile, "global cluster.local") > strings.Index(corefile, "kubernetes cluster.local") {
		t.Errorf("global after kubernetes (order is fixed at build time, but the Corefile should read as it runs):\n%s", corefile)
	}

	var cd appsv1.Deployment
	helmtest.Typed(t, m.MustGet(t, "Deployment", helmtest.Namespace, helmtest.CoreDNS), &cd)
	pod := cd.Spec.Template.Spec
	c := pod.Containers[0]
	checkHardened(t, pod, c, []corev1.Capability{"NET_BIND_SERVICE"})
	if pod.DNSPolicy != corev1.DNSDefault || pod.PriorityClassName != "system-cluster-critical" {
		t.Errorf("dnsPolicy %q, priorityClassName %q", pod.DNSPolicy, pod.PriorityClassName)
	}
	if cd.Spec.Template.Labels["k8s-app"] != "kube-dns" || cd.Spec.Selector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("cluster service labels: pod %v, selector %v", cd.Spec.Template.Labels, cd.Spec.Selector.MatchLabels)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("liveness = %+v", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet.Path != "/ready" || p.HTTPGet.Port.IntValue() != 8181 {
		t.Errorf("readiness = %+v", p)
	}
	if !strings.Contains(toYAML(t, c.Ports), "containerPort: 53\n  name: udp-53\n  protocol: UDP") ||
		!strings.Contains(toYAML(t, c.Ports), "containerPort: 9153") {
		t.Errorf("ports:\n%s", toYAML(t, c.Ports))
	}

	var svc corev1.Service
	helmtest.Typed(t, m.MustGet(t, "Service", helmtest.Namespace, "kube-dns"), &svc)
	// The cluster DNS Service is kube-dns as kubeadm writes it: selected by
	// k8s-app alone (kubeadm's pods and the chart's alike), its ports by
	// number and kubeadm's names, kept when the release goes.
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s %d/%s->%s", p.Name, p.Port, p.Protocol, p.TargetPort.String()))
	}
	if want := []string{"dns 53/UDP->53", "dns-tcp 53/TCP->53", "metrics 9153/TCP->9153"}; !slices.Equal(ports, want) {
		t.Errorf("DNS Service ports %v, want kube-dns's %v", ports, want)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" || !maps.Equal(svc.Spec.Selector, map[string]string{"k8s-app": "kube-dns"}) ||
		!matches(svc.Spec.Selector, cd.Spec.Template.Labels) || svc.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("DNS Service %+v, spec %+v", svc.ObjectMeta, svc.Spec)
	}
	var role rbacv1.ClusterRole
	helmtest.Typed(t, m.MustGet(t, "ClusterRole", "", helmtest.CoreDNS), &role)
	for _, r := range role.Rules {
		if !slices.Equal(r.Verbs, []string{"list", "watch"}) {
			t.Errorf("CoreDNS may only list and watch: %+v", r)
		}
	}
	// What the global plugin needs, as it says (beside the kubernetes
	// plugin's), and the Links for their drains.
	for _, need := range append(global.Rules(), source.LinkRules()...) {
		for _, g := range need.APIGroups {
			for _, res := range need.Resources {
				for _, v := range need.Verbs {
					if !allows(role.Rules, g, res, v) {
						t.Errorf("the CoreDNS ClusterRole does not let the global plugin %s %s in group %q", v, res, g)
					}
				}
			}
		}
	}
	m.MustGet(t, "PodDisruptionBudget", helmtest.Namespace, helmtest.CoreDNS)
	m.MustGet(t, "Service", helmtest.Namespace, helmtest.CoreDNS+"-metrics")

	sm := m.MustGet(t, "ServiceMonitor", helmtest.Namespace, "gm-globalmirror")
	if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels = %v", sm.GetLabels())
	}
	// It must select both metrics Services, by labels they carry.
	sel := sm.Object["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any)
	for _, name := range []string{helmtest.Controller + "-metrics", helmtest.CoreDNS + "-metrics"} {
		labels := m.MustGet(t, "Service", helmtest.Namespace, name).GetLabels()
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("ServiceMonitor selector %s=%v misses Service %s (labels %v)", k, v, name, labels)
			}
		}
	}
}

// TestTemplateCoreDNSHighPort: without a privileged port CoreDNS still gets
// NET_BIND_SERVICE, since its image's binary cannot be executed without it
// (test/image runs it).
func TestTemplateCoreDNSHighPort(t *testing.T) {
	m := helmtest.Template(t, "gm", "-f", helmtest.WriteValues(t, `
coredns:
  enabled: true
  servers:
    - zones: [{zone: cluster.local}, {zone: example.org}]
      port: 5353
      plugins: [{name: global}, {name: prometheus, parameters: ":9253"}]
`))
	var d appsv1.Deployment
	helmtest.Typed(t, m.MustGet(t, "Deployment", helmtest.Namespace, helmtest.CoreDNS), &d)
	c := d.Spec.Template.Spec.Containers[0]
	checkHardened(t, d.Spec.Template.Spec, c, []corev1.Capability{"NET_BIND_SERVICE"})
	if !strings.Contains(toYAML(t, c.Ports), "containerPort: 5353") || !strings.Contains(toYAML(t, c.Ports), "containerPort: 9253") {
		t.Errorf("ports:\n%s", toYAML(t, c.Ports))
	}
	var cm corev1.ConfigMap
	helmtest.Typed(t, m.MustGet(t, "ConfigMap", helmtest.Namespace, helmtest.CoreDNS), &cm)
	if want := "cluster.local:5353 example.org:5353 {\n    global {\n"; !strings.HasPrefix(cm.Data["Corefile"], want) {
		t.Errorf("Corefile:\n%s\nwant prefix:\n%s", cm.Data["Corefile"], want)
	}
}

// TestSchemaRejects: values.schema.json refuses wrong types, unknown keys and
// values outside their enums, naming the offending value.
func TestSchemaRejects(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"controller.logLevel=verbose", "/controller/logLevel"},
		{"controller.logFormat=xml", "/controller/logFormat"},
		{"controller.replicaCount=two", "/controller/replicaCount"},
		{"controller.maxEndpointsPerSlice=1001", "/controller/maxEndpointsPerSlice"},
		{"controller.replicas=2", "replicas"},
		{"controller.namespaces={Not_A_Namespace}", "/controller/namespaces/0"},
		{"controller.leaderElection.leaseDuration=fifteen", "/controller/leaderElection/leaseDuration"},
		{"controller.image.pullPolicy=Sometimes", "/controller/image/pullPolicy"},
		{"coredns.service.type=Ingress", "/coredns/service/type"},
		{"coredns.service.ipFamilyPolicy=DualStack", "/coredns/service/ipFamilyPolicy"},
		{"coredns.isClusterService=maybe", "/coredns/isClusterService"},
		{"serviceMonitor.interval=30seconds", "/serviceMonitor/interval"},
		{"suffix=_global", "/suffix"},
		{"localSelector=", "/localSelector"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			out, err := helmtest.Run(t, "template", "gm", helmtest.ChartDir, "--set", tc.set)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded:\n%s", tc.set, out)
			}
			if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not blame the schema and %s:\n%v", tc.want, err)
			}
		})
	}
}

// checkHardened checks the pod and container security settings every
// component must have; add is the only capability the container may gain.
func checkHardened(t *testing.T, pod corev1.PodSpec, c corev1.Container, add []corev1.Capability) {
	t.Helper()
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: pod securityContext = %+v", c.Name, psc)
	}
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Fatalf("%s: container securityContext = %s", c.Name, toYAML(t, sc))
	}
	if !slices.Equal(sc.Capabilities.Add, add) {
		t.Errorf("%s: capabilities added = %v, want %v", c.Name, sc.Capabilities.Add, add)
	}
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func toYAML(t testing.TB, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// appVersion is the chart's appVersion, the default image tag.
func appVersion(t testing.TB) string {
	t.Helper()
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(helmtest.Must(t, "show", "chart", helmtest.ChartDir)), &c); err != nil || c.AppVersion == "" {
		t.Fatalf("appVersion: %v", err)
	}
	return c.AppVersion
}

// TestReadmeDocumentsEveryValue: every value in values.yaml has a row in the
// chart's README table. Free-form values (resources, security contexts,
// label maps, lists) are one row each; the schema says which those are.
func TestReadmeDocumentsEveryValue(t *testing.T) {
	read := func(name string) []byte { return readFile(t, filepath.Join(helmtest.ChartDir, name)) }
	var values, schema map[string]any
	if err := yaml.Unmarshal(read("values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(read("values.schema.json"), &schema); err != nil {
		t.Fatal(err)
	}
	readme := string(read("README.md"))
	resolve := func(node map[string]any) map[string]any {
		for {
			ref, ok := node["$ref"].(string)
			if !ok {
				return node
			}
			node = schema["definitions"].(map[string]any)[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
	}
	var walk func(path string, v any, node map[string]any)
	walk = func(path string, v any, node map[string]any) {
		node = resolve(node)
		props, structured := node["properties"].(map[string]any)
		m, isMap := v.(map[string]any)
		if !isMap || !structured || strings.HasSuffix(path, ".resources") {
			if !strings.Contains(readme, "| `"+path+"` |") {
				t.Errorf("README.md has no row for `%s`", path)
			}
			return
		}
		for k, sub := range m {
			p := k
			if path != "" {
				p = path + "." + k
			}
			child, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("values.schema.json has no property for %s", p)
				continue
			}
			walk(p, sub, child)
		}
	}
	walk("", values, schema)
}

// allows reports whether rules grant verb on every object of group/resource.
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return len(r.ResourceNames) == 0 && slices.Contains(r.APIGroups, group) &&
			slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
	})
}
