package chart

import (
	"context"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/helmtest"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// TestInstall installs the chart into a real cluster (API server, RBAC and
// kube-controller-manager from test/localkube; no kubelet, so pods never
// run) and proves that:
//   - the API server accepts every rendered object under strict field
//     validation, and helm install and uninstall succeed;
//   - the RBAC grants each ServiceAccount what its component does and denies
//     the rest (checked by impersonating the ServiceAccounts);
//   - the real controller and CoreDNS, authenticated with the ServiceAccounts'
//     own tokens and run with the arguments and Corefile the chart rendered,
//     do their jobs: a global Service for a simulated Linkerd mirror, and DNS
//     answers for it. Missing permissions would stop either.
func TestInstall(t *testing.T) {
	env := localkube.StartT(t, "chart")
	c := env.Cluster("chart")
	ctx := t.Context()
	dir := t.TempDir()

	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	installCRD(t, dyn, "testdata/servicemonitor-crd.yaml")
	installCRD(t, dyn, "testdata/prometheusrule-crd.yaml")
	for _, ns := range []string{helmtest.Namespace, "app", "team"} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))

	// The chart's CoreDNS, run below from the installed ConfigMap, listens on
	// free loopback ports and reaches the API server through a kubeconfig
	// holding its ServiceAccount's token.
	ports := map[string]int{}
	for _, name := range []string{"DNS_PORT", "HEALTH_PORT", "READY_PORT", "METRICS_PORT"} {
		if ports[name], err = run.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	corednsKubeconfig := filepath.Join(dir, "coredns.kubeconfig")
	values := helmtest.WriteValues(t, "coredns:\n  enabled: true\n"+
		helmtest.CoreDNSServers(ports["DNS_PORT"], ports["HEALTH_PORT"], ports["READY_PORT"], ports["METRICS_PORT"], 5, corednsKubeconfig)+
		"serviceMonitor:\n  enabled: true\nalerts:\n  enabled: true\n")

	m := helmtest.Template(t, "gm", "-f", values)
	dryRunStrict(t, dyn, mapper, m)
	start := time.Now()
	out := helmtest.Must(t, "install", "gm", helmtest.ChartDir, "--namespace", helmtest.Namespace, "--kubeconfig", c.Kubeconfig, "-f", values)
	t.Logf("helm install: %v", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "writes <base>-global Services in every namespace") {
		t.Errorf("helm install output (and NOTES.txt):\n%s", out)
	}
	expectInstalled(t, dyn, mapper, m)

	controllerSA := "system:serviceaccount:" + helmtest.Namespace + ":" + helmtest.Controller
	corednsSA := "system:serviceaccount:" + helmtest.Namespace + ":" + helmtest.CoreDNS

	// Both components list and watch what they mirror and answer for in
	// every namespace.
	t.Run("controller RBAC", func(t *testing.T) {
		checkAccess(t, c, controllerSA, append(controllerChecks(t, c, "app", helmtest.Controller), reads("", true)...))
	})
	t.Run("coredns RBAC", func(t *testing.T) {
		checkAccess(t, c, corednsSA, slices.Concat(reads("", true), []check{
			{"list pods cluster-wide", true, func(ctx context.Context, k kubernetes.Interface) error {
				return errOf(k.CoreV1().Pods("").List(ctx, metav1.ListOptions{}))
			}},
			{"list namespaces", true, func(ctx context.Context, k kubernetes.Interface) error {
				return errOf(k.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}))
			}},
			{"create a Service", false, createHeadless("app", "dns-probe")},
			{"get a Service", false, func(ctx context.Context, k kubernetes.Interface) error {
				return errOf(k.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}))
			}},
			{"delete EndpointSlices", false, func(ctx context.Context, k kubernetes.Interface) error {
				return k.DiscoveryV1().EndpointSlices("app").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			}},
			{"list secrets", false, func(ctx context.Context, k kubernetes.Interface) error {
				return errOf(k.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}))
			}},
		}))
	})

	t.Run("controller binary", func(t *testing.T) {
		ctrl := startChartController(t, c, dir, "controller.log", helmtest.Controller)
		defer ctrl.Stop()
		expectGlobal(t, c, "app", ctrl.Process)
		lease, err := c.Client.CoordinationV1().Leases(helmtest.Namespace).Get(ctx, helmtest.Controller, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Errorf("leader Lease %s/%s: %v %+v", helmtest.Namespace, helmtest.Controller, err, lease)
		}
		expectNoForbidden(t, ctrl.Process)
		expectMetrics(t, ctrl.BaseURL+"/metrics", alertMetrics(t, m, "controller"))
	})

	t.Run("coredns binary", func(t *testing.T) {
		writeTokenKubeconfig(t, c, helmtest.Namespace, helmtest.CoreDNS, corednsKubeconfig)
		cm, err := c.Client.CoreV1().ConfigMaps(helmtest.Namespace).Get(ctx, helmtest.CoreDNS, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Ready only once the kubernetes and global plugins have listed
		// what they watch: without list/watch permissions it never is.
		server, err := run.StartCoreDNS(ctx, run.CoreDNSOptions{Corefile: cm.Data["Corefile"], Dir: dir, Ports: ports, WaitReady: true})
		if err != nil {
			t.Fatal(err)
		}
		defer server.Stop()
		// No controller has run for namespace team yet, so only the global
		// plugin can answer for its mirror.
		mirror(t, c, "team")
		// The plugin learns of new mirrors through its informers, a moment
		// after they are written.
		for _, name := range []string{"db-global.team.svc.cluster.local.", "db-0-east.db-global.team.svc.cluster.local."} {
			if err := scenario.AwaitAnswer(ctx, "udp", server.Addr, name, dns.TypeA, dnsq.NoError("192.0.2.10"), 15*time.Second, 50*time.Millisecond); err != nil {
				t.Errorf("%v\ncoredns log:\n%s", err, server.Log(2000))
			}
		}
		expectNoForbidden(t, server.Process)
		expectMetrics(t, server.MetricsURL, alertMetrics(t, m, "coredns"))
	})

	// A second release, limited to namespace team: Roles there and nowhere else.
	t.Run("namespaced", func(t *testing.T) {
		const name = "gmns-globalmirror-controller"
		nsValues := helmtest.WriteValues(t, "controller:\n  namespaces: [team]\n")
		mns := helmtest.Template(t, "gmns", "-f", nsValues)
		if mns.Get("ClusterRole", "", name) != nil {
			t.Fatalf("namespaced release renders a ClusterRole")
		}
		dryRunStrict(t, dyn, mapper, mns)
		helmtest.Must(t, "install", "gmns", helmtest.ChartDir, "--namespace", helmtest.Namespace, "--kubeconfig", c.Kubeconfig, "-f", nsValues)
		expectInstalled(t, dyn, mapper, mns)

		sa := "system:serviceaccount:" + helmtest.Namespace + ":" + name
		checkAccess(t, c, sa, slices.Concat(controllerChecks(t, c, "team", name), reads("", false), reads("app", false),
			[]check{{"create a Service in app", false, createHeadless("app", "probe-global")}}))

		ctrl := startChartController(t, c, dir, "controller-namespaced.log", name)
		defer ctrl.Stop()
		expectGlobal(t, c, "team", ctrl.Process)
		expectNoForbidden(t, ctrl.Process)
	})

	// A forwarded zone's release: its NOTES say what to add to each kind
	// of cluster DNS, with the address its Service has (read with kubectl
	// on install, when it has none yet; named on an upgrade).
	t.Run("forwarded zone NOTES", func(t *testing.T) {
		args := []string{"--namespace", helmtest.Namespace, "--kubeconfig", c.Kubeconfig, "--set", "controller.enabled=false",
			"--set", "coredns.enabled=true", "--set", "coredns.forwarded.enabled=true", "--set", "coredns.forwarded.clusterID=east"}
		out := helmtest.Must(t, append([]string{"install", "gmzone", helmtest.ChartDir}, args...)...)
		const svc = "gmzone-globalmirror-coredns"
		for _, want := range []string{
			"IP=$(kubectl -n " + helmtest.Namespace + " get service " + svc + " -o jsonpath='{.spec.clusterIP}')",
			// AKS: a *.server key of coredns-custom, which its Corefile imports.
			`kubectl -n kube-system patch configmap coredns-custom --type merge \` + "\n" +
				`    -p "{\"data\":{\"globalmirror.server\":\"clusterset.local:53 {\\n    errors\\n    forward . $IP {\\n        force_tcp\\n    }\\n}\\n\"}}"`,
			"  clusterset.local:53 {\n      errors\n      forward . <IP> {\n          force_tcp\n      }\n  }\n",
			`{"clusterset.local": ["<IP>"]}`,
			"kube-dns's stubDomains",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("NOTES lack %q:\n%s", want, out)
			}
		}
		got, err := c.Client.CoreV1().Services(helmtest.Namespace).Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = helmtest.Must(t, append([]string{"upgrade", "gmzone", helmtest.ChartDir}, args...)...)
		if !strings.Contains(out, "\n  IP="+got.Spec.ClusterIP+"\n") {
			t.Errorf("NOTES of the upgrade lack the Service's ClusterIP %s:\n%s", got.Spec.ClusterIP, out)
		}
	})

	// What uninstalling leaves, the chart's README says and test/node
	// checks (expectUninstalled), on releases whose pods ran.
	t.Run("uninstall", func(t *testing.T) {
		for _, release := range []string{"gm", "gmns", "gmzone"} {
			helmtest.Must(t, "uninstall", release, "--namespace", helmtest.Namespace, "--kubeconfig", c.Kubeconfig, "--wait", "--timeout", "60s")
		}
	})
}

// alertMetrics are the metrics the chart's alerts name of component
// (controller or coredns: the series they select come from its metrics
// Service), histograms by their _bucket series.
func alertMetrics(t *testing.T, m helmtest.Manifest, component string) []string {
	t.Helper()
	var names []string
	for _, r := range alertRules(t, m) {
		for _, match := range metricName.FindAllStringSubmatch(r.Expr, -1) {
			name := match[1]
			if strings.HasPrefix(name, "coredns_") == (component == "coredns") && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("the alerts name no metric of the %s", component)
	}
	return names
}

// metricName is a metric's name where a selector follows it.
var metricName = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)

// expectMetrics checks that every one of names has a series at url.
func expectMetrics(t *testing.T, url string, names []string) {
	t.Helper()
	samples, err := run.Scrape(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(samples)), func(s string) bool { return s == n || strings.HasPrefix(s, n+"{") }) {
			t.Errorf("an alert names %s, which %s does not export", n, url)
		}
	}
}

// installCRD creates the CustomResourceDefinition in file and waits until it
// is established.
func installCRD(t *testing.T, dyn dynamic.Interface, file string) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(readFile(t, file), &crd.Object); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(gvr).Create(t.Context(), crd, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(gvr).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s not established: %v", crd.GetName(), err)
	}
}

// dryRunStrict creates every object in a server-side dry run with strict field
// validation: the API server's own schemas (and the CRD's) check each field.
func dryRunStrict(t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, m helmtest.Manifest) {
	t.Helper()
	for _, o := range m.Objects {
		ri := resourceFor(t, dyn, mapper, o)
		if _, err := ri.Create(t.Context(), o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("%s %s/%s rejected: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// expectInstalled checks that every rendered object exists after helm install.
func expectInstalled(t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, m helmtest.Manifest) {
	t.Helper()
	for _, o := range m.Objects {
		if _, err := resourceFor(t, dyn, mapper, o).Get(t.Context(), o.GetName(), metav1.GetOptions{}); err != nil {
			t.Errorf("after helm install: %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

func resourceFor(t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, o *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := o.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			t.Fatalf("%s %s: namespaced but rendered without a namespace", o.GetKind(), o.GetName())
		}
		return dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
	}
	return dyn.Resource(mapping.Resource)
}

// startChartController runs bin/globalmirror-controller as the chart runs it:
// with the installed Deployment's arguments, authenticated with a token of
// the Deployment's ServiceAccount.
func startChartController(t *testing.T, c *localkube.Cluster, dir, logName, deployment string) *run.Controller {
	t.Helper()
	ctx := t.Context()
	d, err := c.Client.AppsV1().Deployments(helmtest.Namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, deployment+".kubeconfig")
	writeTokenKubeconfig(t, c, helmtest.Namespace, d.Spec.Template.Spec.ServiceAccountName, kubeconfig)
	// Without --metrics-addr: the test picks a free port instead of :8080.
	args := slices.DeleteFunc(slices.Clone(d.Spec.Template.Spec.Containers[0].Args),
		func(a string) bool { return strings.HasPrefix(a, "--metrics-addr") })
	if !slices.Contains(args, "--leader-elect=true") {
		t.Fatalf("chart runs the controller without leader election: %q", args)
	}
	ctrl, err := run.StartController(ctx, dir, logName, kubeconfig, args...)
	if err != nil {
		t.Fatalf("controller with the chart's arguments %q: %v", args, err)
	}
	return ctrl
}

// writeTokenKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a token from the TokenRequest API, as a pod's projected
// token would.
func writeTokenKubeconfig(t *testing.T, c *localkube.Cluster, namespace, sa, path string) {
	t.Helper()
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["chart"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["chart"] = &clientcmdapi.Context{Cluster: "chart", AuthInfo: sa}
	cfg.CurrentContext = "chart"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// expectGlobal mirrors db from east into ns (mirror) and waits for the
// controller to write db-global there with the mirrored pod as db-0-east,
// its only member, which needs Service and EndpointSlice writes.
func expectGlobal(t *testing.T, c *localkube.Cluster, ns string, p *run.Process) {
	t.Helper()
	mirror(t, c, ns)
	err := await.Poll(t.Context(), 30*time.Second, 100*time.Millisecond, func(ctx context.Context) string {
		return scenario.GlobalService(ctx, c.Client, ns, "db-global", 5432, map[string]string{"db-0-east": "192.0.2.10"})
	})
	if err != nil {
		t.Fatalf("no db-global with db-0-east (192.0.2.10) in %s: %v\ncontroller log:\n%s", ns, err, p.Log(4000))
	}
}

// expectNoForbidden fails when the process logged an authorization failure:
// a component that retries may still converge, but then it lacks a permission.
func expectNoForbidden(t *testing.T, p *run.Process) {
	t.Helper()
	if log := p.Log(1 << 20); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("%s was denied something:\n%s", p.Name, log)
	}
}
