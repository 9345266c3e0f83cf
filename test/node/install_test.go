package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/helmtest"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/node"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/globalmirror/globalmirror/test/workload"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) { os.Exit(node.Main(m)) }

const (
	chartDir  = "../../charts/globalmirror"
	release   = "gm"
	releaseNS = "kube-system"
	ns        = "app"
	// How long a pod on this node may take to become Ready, and an answer
	// to come right: images are local, so this is the kubelet's and
	// CoreDNS's own start on two busy cores.
	readyTimeout = 3 * time.Minute
)

// TestInstallOnANode installs the chart the way users do, onto a real node,
// and resolves through the cluster DNS it provides, from a pod, as
// applications do (glibc's and Go's resolvers through the resolv.conf the
// kubelet wrote): see the package documentation for the node.
func TestInstallOnANode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a node, three control planes and the chart")
	}
	ctx := t.Context()
	logs := t.TempDir()
	if d := os.Getenv("NODE_TEST_LOGS"); d != "" {
		logs = d
	}
	env, err := localkube.Start(ctx, localkube.Options{
		Clusters:     []string{"source", "east", "west"},
		Dir:          filepath.Join(logs, "clusters"),
		RealNodes:    []string{"source"},
		NodeAddress:  netip.MustParseAddr(node.NodeIP),
		StopOnSignal: true,
	})
	if err != nil {
		t.Fatalf("localkube: %v", err)
	}
	source := env.Cluster("source")
	started := time.Now()
	n, err := node.Start(ctx, node.Options{Cluster: source, LogDir: filepath.Join(logs, "node"), Images: []string{"client", "controller", "coredns"}})
	if err != nil {
		t.Log(localkube.LogTails(filepath.Join(logs, "clusters"), 30))
		_ = env.Stop()
		t.Fatalf("node: %v", err)
	}
	t.Logf("node Ready in %v", time.Since(started).Round(time.Millisecond))
	world := scenario.NewWorld(source, ns, filepath.Join(logs, "world"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.LogTails(3000))
			t.Log(localkube.LogTails(filepath.Join(logs, "clusters"), 20))
		}
		_ = world.Stop()
		n.Stop()
		if err := env.Stop(); err != nil {
			t.Errorf("localkube: stop: %v", err)
		}
	})
	s := &install{t: t, ctx: ctx, node: n, c: source.Client, config: source.Config, kubeconfig: source.Kubeconfig}

	// The workloads: db on this node (a StatefulSet of three, headless,
	// exported) and in two remote clusters, mirrored into the source by the
	// Linkerd mirror simulator.
	s.createNamespace(ns)
	s.statefulSet("db", 3)
	for i, remote := range []*localkube.Cluster{env.Cluster("east"), env.Cluster("west")} {
		prefix := []string{"192.0.2.0/24", "203.0.113.0/24"}[i]
		if _, err := workload.Create(ctx, remote.Client, ns, "db", 2, workload.Options{
			Labels: map[string]string{workload.ExportedLabel: "true"},
			IPv4:   netip.MustParsePrefix(prefix),
		}); err != nil {
			t.Fatal(err)
		}
		if err := world.Link(ctx, remote); err != nil {
			t.Fatal(err)
		}
	}
	s.clientPod("client")

	// helm install with only the images, their pull policy and the
	// cluster DNS settings.
	installed := time.Now()
	helmtest.Must(t, append([]string{"install", release, chartDir, "--namespace", releaseNS, "--kubeconfig", s.kubeconfig}, s.values()...)...)
	s.waitDeploymentsReady()
	t.Logf("helm install to every pod Ready by its probes: %v", time.Since(installed).Round(time.Millisecond))
	s.expectProbedAndUnprivileged()

	want := s.expectations()
	s.checkResolvConf("client")
	firstRight := s.awaitAnswers("client", want.forward)
	t.Logf("helm install to the first right answer in the client pod: %v", firstRight.Sub(installed).Round(time.Millisecond))
	s.awaitAnswers("client", want.ptrBefore)
	s.expectControllerSlices(want.addresses)
	s.expectLeader()

	t.Run("CoreDNS pods deleted", func(t *testing.T) {
		s := s.with(t)
		old := s.podsOf("coredns")
		deleted := time.Now()
		for _, p := range old {
			if err := s.c.CoreV1().Pods(releaseNS).Delete(s.ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		s.waitReplaced("coredns", old)
		back := s.awaitAnswers("client", want.forward)
		t.Logf("CoreDNS pods deleted to the answers back from their replacements: %v", back.Sub(deleted).Round(time.Millisecond))
	})

	t.Run("helm upgrade with reverse", func(t *testing.T) {
		s := s.with(t)
		old := s.podsOf("coredns")
		upgraded := time.Now()
		values := helmtest.WriteValues(t, "coredns:\n"+corednsServers("ttl 5\n            reverse"))
		helmtest.Must(t, append(append([]string{"upgrade", release, chartDir, "--namespace", releaseNS, "--kubeconfig", s.kubeconfig}, s.values()...), "-f", values)...)
		s.waitReplaced("coredns", old)
		s.waitDeploymentsReady()
		s.awaitAnswers("client", want.ptrAfter)
		s.awaitAnswers("client", want.forward)
		t.Logf("helm upgrade to the new option in force: %v", time.Since(upgraded).Round(time.Millisecond))
	})

	t.Run("helm uninstall", func(t *testing.T) {
		s := s.with(t)
		helmtest.Must(t, "uninstall", release, "--namespace", releaseNS, "--kubeconfig", s.kubeconfig, "--wait", "--timeout", "2m")
		s.expectUninstalled()
	})
}

// install is the state of the test, and the helpers that act on the cluster.
type install struct {
	t          *testing.T
	ctx        context.Context
	node       *node.Node
	c          kubernetes.Interface
	config     *rest.Config
	kubeconfig string
}

func (s *install) with(t *testing.T) *install {
	c := *s
	c.t, c.ctx = t, t.Context()
	return &c
}

// values are the only values the chart is given: the images imported into
// the node, never pulled, and the cluster DNS settings.
func (s *install) values() []string {
	var out []string
	for _, name := range []string{"controller", "coredns"} {
		ref := s.node.Images[name]
		repo, tag, _ := strings.Cut(ref, ":")
		if i := strings.LastIndex(ref, ":"); i > 0 {
			repo, tag = ref[:i], ref[i+1:]
		}
		out = append(out, "--set", name+".image.repository="+repo, "--set", name+".image.tag="+tag, "--set", name+".image.pullPolicy=Never")
	}
	return append(out,
		"--set", "coredns.enabled=true",
		"--set", "coredns.isClusterService=true",
		"--set", "coredns.service.name=kube-dns",
		"--set", "coredns.service.clusterIP="+node.ClusterDNS,
	)
}

// corednsServers is the chart's default coredns.servers with globalBlock as
// the global plugin's configBlock.
func corednsServers(globalBlock string) string {
	return `  servers:
    - zones: [{zone: .}]
      port: 53
      plugins:
        - name: errors
        - name: health
          configBlock: lameduck 5s
        - name: ready
        - name: global
          parameters: cluster.local
          configBlock: |-
            ` + globalBlock + `
        - name: kubernetes
          parameters: cluster.local in-addr.arpa ip6.arpa
          configBlock: |-
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        - {name: prometheus, parameters: "0.0.0.0:9153"}
        - {name: forward, parameters: . /etc/resolv.conf, configBlock: max_concurrent 1000}
        - {name: cache, parameters: "30"}
        - name: loop
        - name: reload
        - name: loadbalance
`
}

func (s *install) createNamespace(name string) {
	s.t.Helper()
	if _, err := s.c.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// statefulSet runs name on the node: a headless Service exported to Linkerd
// (and so a member of the global service) and replicas pods of the pause
// image, Ready as soon as they run.
func (s *install) statefulSet(name string, replicas int32) {
	s.t.Helper()
	labels := map[string]string{"app": name}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{workload.ExportedLabel: "true"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  labels,
			Ports:     []corev1.ServicePort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := s.c.CoreV1().Services(ns).Create(s.ctx, svc, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       s.podSpec("db", "pause", corev1.ContainerPort{Name: "db", ContainerPort: 5432}),
			},
		},
	}
	if _, err := s.c.AppsV1().StatefulSets(ns).Create(s.ctx, sts, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// podSpec runs one container of an image imported into the node (never
// pulled), which stops at once when its pod is deleted.
func (s *install) podSpec(name, image string, ports ...corev1.ContainerPort) corev1.PodSpec {
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{{
			Name:            name,
			Image:           s.node.Images[image],
			ImagePullPolicy: corev1.PullNever,
			Ports:           ports,
		}},
	}
}

// clientPod runs the client image, which waits, with the kubelet's default
// DNS policy (ClusterFirst) and waits until it runs.
func (s *install) clientPod(name string) {
	s.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       s.podSpec("client", "client"),
	}
	if _, err := s.c.CoreV1().Pods(ns).Create(s.ctx, pod, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.eventually("client pod running", func(ctx context.Context) string {
		p, err := s.c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Sprintf("phase %s %s", p.Status.Phase, describe(p))
		}
		return ""
	})
}

func (s *install) eventually(what string, check func(ctx context.Context) string) {
	s.t.Helper()
	if err := await.Poll(s.ctx, readyTimeout, 200*time.Millisecond, check); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// podsOf lists the release's pods of a component (controller or coredns).
func (s *install) podsOf(component string) []corev1.Pod {
	s.t.Helper()
	pods, err := s.c.CoreV1().Pods(releaseNS).List(s.ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=" + component,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return pods.Items
}

// waitDeploymentsReady waits until both Deployments have rolled out: every
// replica updated and Ready (the kubelet's readiness probes passed), none
// left over.
func (s *install) waitDeploymentsReady() {
	s.t.Helper()
	s.eventually("deployments ready", func(ctx context.Context) string {
		deps, err := s.c.AppsV1().Deployments(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			return err.Error()
		}
		if len(deps.Items) != 2 {
			return fmt.Sprintf("%d deployments", len(deps.Items))
		}
		for _, d := range deps.Items {
			want := ptr.Deref(d.Spec.Replicas, 1)
			st := d.Status
			if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.ReadyReplicas != want || st.Replicas != want {
				pods, _ := s.c.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
				var b strings.Builder
				for _, p := range pods.Items {
					fmt.Fprintf(&b, " %s:%s", p.Name, describe(&p))
				}
				return fmt.Sprintf("%s: %d/%d updated, %d ready, %d in all;%s", d.Name, st.UpdatedReplicas, want, st.ReadyReplicas, st.Replicas, b.String())
			}
		}
		return ""
	})
}

// waitReplaced waits until none of old runs and the component has as many
// Ready pods as before.
func (s *install) waitReplaced(component string, old []corev1.Pod) {
	s.t.Helper()
	s.eventually(component+" pods replaced", func(context.Context) string {
		pods := s.podsOf(component)
		ready := 0
		for _, p := range pods {
			if slices.ContainsFunc(old, func(o corev1.Pod) bool { return o.UID == p.UID }) {
				return "old pod " + p.Name + " still there"
			}
			if podReady(&p) {
				ready++
			}
		}
		if ready != len(old) {
			return fmt.Sprintf("%d of %d new pods ready", ready, len(old))
		}
		return ""
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// describe says why a pod is not running or ready, from its containers.
func describe(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			fmt.Fprintf(&b, " %s waiting (%s: %s)", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			fmt.Fprintf(&b, " %s terminated (%s, exit %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
		case !c.Ready:
			fmt.Fprintf(&b, " %s running, not ready (restarts %d)", c.Name, c.RestartCount)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			fmt.Fprintf(&b, " %s: %s", c.Type, c.Message)
		}
	}
	return b.String()
}

// expectProbedAndUnprivileged checks what made the pods Ready: the chart's
// probes on its ports, run by the kubelet; and how they run: as UID 65532
// with the chart's ServiceAccount token and no kubeconfig.
func (s *install) expectProbedAndUnprivileged() {
	s.t.Helper()
	for component, ports := range map[string][]int32{"controller": {8080}, "coredns": {8080, 8181}} {
		for _, p := range s.podsOf(component) {
			c := p.Spec.Containers[0]
			var probed []int32
			for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
				if pr == nil || pr.HTTPGet == nil {
					s.t.Errorf("%s: a probe is not an HTTP GET: %+v", p.Name, pr)
					continue
				}
				port := pr.HTTPGet.Port.IntVal
				for _, cp := range c.Ports {
					if cp.Name == pr.HTTPGet.Port.StrVal {
						port = cp.ContainerPort
					}
				}
				probed = append(probed, port)
			}
			for _, want := range ports {
				if !slices.Contains(probed, want) {
					s.t.Errorf("%s: probes on ports %v, want %v among them", p.Name, probed, want)
				}
			}
			if !podReady(&p) || p.Spec.NodeName != node.Name {
				s.t.Errorf("%s: ready %v on node %q", p.Name, podReady(&p), p.Spec.NodeName)
			}
			if p.Spec.ServiceAccountName != release+"-globalmirror-"+component {
				s.t.Errorf("%s: ServiceAccount %q", p.Name, p.Spec.ServiceAccountName)
			}
			for _, a := range c.Args {
				if strings.Contains(a, "kubeconfig") {
					s.t.Errorf("%s: argument %q: pods must use their in-cluster configuration", p.Name, a)
				}
			}
			// Credentials come only from the ServiceAccount's projected
			// token; the rest is configuration.
			for _, v := range p.Spec.Volumes {
				if v.ConfigMap == nil && (v.Projected == nil || !strings.HasPrefix(v.Name, "kube-api-access-")) {
					s.t.Errorf("%s: volume %s is neither a ConfigMap nor the ServiceAccount token", p.Name, v.Name)
				}
			}
			for _, e := range c.Env {
				if e.Name == "KUBECONFIG" || e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					s.t.Errorf("%s: environment %s", p.Name, e.Name)
				}
			}
		}
	}
}

// answers maps a resolve query (LIB/TYPE/NAME) to the result it must give,
// as test/cmd/resolve prints it.
type answers map[string]result

type result struct {
	Query    string   `json:"query"`
	Records  []string `json:"records,omitempty"`
	NotFound bool     `json:"notFound,omitempty"`
	NXDomain bool     `json:"nxdomain,omitempty"`
	Err      string   `json:"err,omitempty"`
}

type expectations struct {
	forward, ptrBefore, ptrAfter answers
	// addresses are every global per-pod name's address.
	addresses []string
}

// expectations are the answers the pods' names and addresses must give, from
// what the API says: the local pods' IPs and the ClusterIPs of Linkerd's
// endpoint mirrors of the remote pods.
func (s *install) expectations() expectations {
	s.t.Helper()
	fqdn := func(name string) string { return name + "." + ns + ".svc." + node.ClusterDomain }
	addrs := map[string]string{} // global per-pod name -> address
	s.eventually("db pods and mirrors", func(ctx context.Context) string {
		for i := range 3 {
			p, err := s.c.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("db-%d", i), metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if !podReady(p) || p.Status.PodIP == "" {
				return p.Name + " " + describe(p)
			}
			addrs[p.Name] = p.Status.PodIP
		}
		for _, c := range []string{"east", "west"} {
			for i := range 2 {
				name := fmt.Sprintf("db-%d-%s", i, c)
				svc, err := s.c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				addrs[name] = svc.Spec.ClusterIP
			}
		}
		return ""
	})
	var all, srv []string
	for host, addr := range addrs {
		all = append(all, addr)
		srv = append(srv, "0 "+weight(len(addrs))+" 5432 "+host+"."+fqdn("db-global")+".")
	}
	slices.Sort(all)
	slices.Sort(srv)
	e := expectations{forward: answers{}, ptrBefore: answers{}, ptrAfter: answers{}, addresses: all}
	for _, lib := range []string{"glibc", "go"} {
		e.forward[lib+"/host/db-global"] = result{Records: all}
		e.forward[lib+"/host/"+fqdn("db-global")] = result{Records: all}
		e.forward[lib+"/host/db-0-east.db-global"] = result{Records: []string{addrs["db-0-east"]}}
		e.forward[lib+"/host/db-1.db-global"] = result{Records: []string{addrs["db-1"]}}
		e.forward[lib+"/SRV/_db._tcp.db-global"] = result{Records: srv}
		e.forward[lib+"/host/nope-global"] = result{NotFound: true}
		e.forward[lib+"/host/"+fqdn("nope-global")+"."] = result{NotFound: true}
		// Without reverse, the kubernetes plugin answers an endpoint
		// mirror's ClusterIP with that Service's name; with it, global
		// answers with the per-pod global name.
		dot := map[string]string{"glibc": "", "go": "."}[lib]
		e.ptrBefore[lib+"/PTR/"+addrs["db-0-east"]] = result{Records: []string{fqdn("db-0-east") + dot}}
		e.ptrAfter[lib+"/PTR/"+addrs["db-0-east"]] = result{Records: []string{"db-0-east." + fqdn("db-global") + dot}}
	}
	// glibc tells NXDOMAIN from NODATA.
	e.forward["glibc/SRV/"+fqdn("nope-global")+"."] = result{NotFound: true, NXDomain: true}
	return e
}

// weight is the SRV weight the kubernetes plugin, and so global, gives each
// of n records.
func weight(n int) string { return fmt.Sprint(100 / n) }

// checkResolvConf checks the resolv.conf the kubelet wrote for the pod: the
// kube-dns ClusterIP, the search path of its namespace, ndots:5.
func (s *install) checkResolvConf(pod string) {
	s.t.Helper()
	out, err := s.node.Exec(s.ctx, ns, pod, "cat", "/etc/resolv.conf")
	if err != nil {
		s.t.Fatal(err)
	}
	for _, want := range []string{"nameserver " + node.ClusterDNS, "search " + ns + ".svc.cluster.local svc.cluster.local cluster.local", "options ndots:5"} {
		if !strings.Contains(out, want) {
			s.t.Errorf("resolv.conf of %s lacks %q:\n%s", pod, want, out)
		}
	}
}

// awaitAnswers runs the queries of want in the pod until every result is
// right, and returns when that was first seen.
func (s *install) awaitAnswers(pod string, want answers) time.Time {
	s.t.Helper()
	queries := make([]string, 0, len(want))
	for q := range want {
		queries = append(queries, q)
	}
	slices.Sort(queries)
	var at time.Time
	s.eventually("answers in pod "+pod, func(ctx context.Context) string {
		out, err := s.node.Exec(ctx, ns, pod, append([]string{"resolve"}, queries...)...)
		if err != nil {
			return err.Error()
		}
		var got []result
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			return fmt.Sprintf("%v: %s", err, out)
		}
		var wrong []string
		for _, r := range got {
			w := want[r.Query]
			w.Query = r.Query
			if !slices.Equal(r.Records, w.Records) || r.NotFound != w.NotFound || r.NXDomain != w.NXDomain || r.Err != "" {
				wrong = append(wrong, fmt.Sprintf("%s: got %+v, want %+v", r.Query, r, w))
			}
		}
		if len(wrong) > 0 || len(got) != len(queries) {
			return fmt.Sprintf("%d of %d wrong:\n  %s", len(wrong), len(queries), strings.Join(wrong, "\n  "))
		}
		at = time.Now()
		return ""
	})
	return at
}

// expectControllerSlices checks the controller's work, done with its
// in-cluster configuration and the chart's RBAC: db-global's EndpointSlices
// hold every address, ready.
func (s *install) expectControllerSlices(want []string) {
	s.t.Helper()
	s.eventually("db-global's EndpointSlices", func(ctx context.Context) string {
		l, err := s.c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=db-global"})
		if err != nil {
			return err.Error()
		}
		var got []string
		for _, sl := range l.Items {
			if by := sl.Labels[discoveryv1.LabelManagedBy]; by != aggregate.EndpointSliceManagedBy {
				return fmt.Sprintf("slice %s managed by %q", sl.Name, by)
			}
			for _, ep := range sl.Endpoints {
				if ptr.Deref(ep.Conditions.Ready, false) {
					got = append(got, ep.Addresses...)
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Sprintf("ready addresses %v, want %v", got, want)
		}
		return ""
	})
}

// expectLeader checks that one controller replica leads, through the Lease
// the chart's RBAC lets it hold in the release namespace.
func (s *install) expectLeader() {
	s.t.Helper()
	s.eventually("controller leader", func(ctx context.Context) string {
		l, err := s.c.CoordinationV1().Leases(releaseNS).Get(ctx, release+"-globalmirror-controller", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		for _, p := range s.podsOf("controller") {
			if strings.HasPrefix(holder, p.Name) {
				return ""
			}
		}
		return fmt.Sprintf("lease held by %q, no controller pod", holder)
	})
}

// expectUninstalled checks what `helm uninstall` leaves, as the chart's
// README says: none of the chart's objects, and the global Services the
// controller wrote, with their EndpointSlices.
func (s *install) expectUninstalled() {
	s.t.Helper()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	meta, err := metadata.NewForConfig(s.config)
	if err != nil {
		s.t.Fatal(err)
	}
	kinds := []struct {
		gvr        schema.GroupVersionResource
		namespaced bool
	}{
		{appsv1.SchemeGroupVersion.WithResource("deployments"), true},
		{corev1.SchemeGroupVersion.WithResource("pods"), true},
		{corev1.SchemeGroupVersion.WithResource("services"), true},
		{corev1.SchemeGroupVersion.WithResource("configmaps"), true},
		{corev1.SchemeGroupVersion.WithResource("serviceaccounts"), true},
		{policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"), true},
		{rbacv1.SchemeGroupVersion.WithResource("clusterroles"), false},
		{rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"), false},
	}
	s.eventually("release objects gone", func(ctx context.Context) string {
		var left []string
		for _, k := range kinds {
			var l *metav1.PartialObjectMetadataList
			var err error
			if k.namespaced {
				l, err = meta.Resource(k.gvr).Namespace(releaseNS).List(ctx, sel)
			} else {
				l, err = meta.Resource(k.gvr).List(ctx, sel)
			}
			if err != nil {
				return err.Error()
			}
			for _, o := range l.Items {
				left = append(left, k.gvr.Resource+" "+o.Name)
			}
		}
		if len(left) > 0 {
			return "left: " + strings.Join(left, ", ")
		}
		return ""
	})
	svc, err := s.c.CoreV1().Services(ns).Get(s.ctx, "db-global", metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("the global Service is gone with the release; the chart's README says it stays: %v", err)
	}
	if svc.Labels["app.kubernetes.io/managed-by"] != "globalmirror" {
		s.t.Errorf("db-global labels %v", svc.Labels)
	}
	slices, err := s.c.DiscoveryV1().EndpointSlices(ns).List(s.ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=db-global"})
	if err != nil || len(slices.Items) == 0 {
		s.t.Errorf("db-global's EndpointSlices: %d, %v", len(slices.Items), err)
	}
	// The leader's Lease is the controller's own, not the chart's.
	if _, err := s.c.CoordinationV1().Leases(releaseNS).Get(s.ctx, release+"-globalmirror-controller", metav1.GetOptions{}); err != nil {
		s.t.Errorf("the controller's Lease: %v; the chart's README says it stays", err)
	}
}
