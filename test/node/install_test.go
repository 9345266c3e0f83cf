package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/source"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/node"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/workload"
	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) { os.Exit(node.Main(m)) }

const (
	ns = "app"
	// How long a pod on this node may take to become Ready, and an answer
	// to come right: images are local, so this is the kubelet's and
	// CoreDNS's own start on two busy cores.
	readyTimeout = 3 * time.Minute
)

// install is the state of the test, and the helpers that act on the cluster.
type install struct {
	t          *testing.T
	ctx        context.Context
	node       *node.Node
	c          kubernetes.Interface
	config     *rest.Config
	kubeconfig string
	// checkedPods are the chart's pods in kube-system that
	// expectProbedAndUnprivileged checked: Pod Security's audit must have
	// seen each created.
	checkedPods map[types.UID]string
	// readPods are every chart pod expectProbedAndUnprivileged checked.
	readPods map[types.UID]bool
	// defaultSeccomp is the seccomp section of the runtime spec the node's
	// containerd gives a container with the RuntimeDefault profile.
	defaultSeccomp string
}

// image is the values that give the chart the image of component,
// imported into the node, never pulled.
func (s *install) image(component string) []string {
	ref := s.node.Images[component]
	i := strings.LastIndex(ref, ":")
	return []string{"--set", component + ".image.repository=" + ref[:i], "--set", component + ".image.tag=" + ref[i+1:], "--set", component + ".image.pullPolicy=Never"}
}

// chartRelease is a release of the chart.
type chartRelease struct{ name, namespace string }

// deployment is the name of the release's Deployment of component.
func (r chartRelease) deployment(component string) string {
	return r.name + "-globalmirror-" + component
}

// podsOf lists the release's pods of a component (controller or coredns).
func (r chartRelease) podsOf(s *install, component string) []corev1.Pod {
	s.t.Helper()
	return s.podsBySelector(r.namespace, "app.kubernetes.io/instance="+r.name+",app.kubernetes.io/component="+component)
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
          configBlock: lameduck 15s
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
            startup_timeout 60s
            ttl 30
        - {name: prometheus, parameters: "0.0.0.0:9153"}
        - {name: forward, parameters: . /etc/resolv.conf, configBlock: max_concurrent 1000}
        - {name: cache, parameters: "30"}
        - name: loop
        - name: reload
        - name: loadbalance
`
}

func (s *install) createNamespace(name string, labels map[string]string) {
	s.t.Helper()
	s.must(s.c.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}))
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
	s.must(s.c.CoreV1().Services(ns).Create(s.ctx, svc, metav1.CreateOptions{}))
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
	s.must(s.c.AppsV1().StatefulSets(ns).Create(s.ctx, sts, metav1.CreateOptions{}))
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

// runPod creates pod in ns, waits until every container of it runs, and
// returns it as it runs.
func (s *install) runPod(pod *corev1.Pod) (running *corev1.Pod) {
	s.t.Helper()
	s.must(s.c.CoreV1().Pods(ns).Create(s.ctx, pod, metav1.CreateOptions{}))
	s.eventually(pod.Name+" pod running", func(ctx context.Context) string {
		p, err := s.c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		running = p
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Sprintf("phase %s %s", p.Status.Phase, describe(p))
		}
		return ""
	})
	return running
}

// must fails the test at once if the last of results, a call's error, is
// not nil: s.must(f()) for an f that returns an error, alone or last.
func (s *install) must(results ...any) {
	s.t.Helper()
	if err, _ := results[len(results)-1].(error); err != nil {
		s.t.Fatal(err)
	}
}

func (s *install) eventually(what string, check func(ctx context.Context) string) {
	s.t.Helper()
	if err := await.Poll(s.ctx, readyTimeout, 200*time.Millisecond, check); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// podsBySelector lists the pods of namespace with label selector sel.
func (s *install) podsBySelector(namespace, sel string) []corev1.Pod {
	s.t.Helper()
	pods, err := s.c.CoreV1().Pods(namespace).List(s.ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		s.t.Fatal(err)
	}
	return pods.Items
}

// waitRolledOut waits until a Deployment has rolled out, as `kubectl
// rollout status` does: every replica updated and Ready (the kubelet's
// readiness probes passed), none left over, and no pod of it terminating.
func (s *install) waitRolledOut(namespace, name string) {
	s.t.Helper()
	s.eventually("deployment "+namespace+"/"+name+" rolled out", func(ctx context.Context) string {
		d, err := s.c.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		want, st := ptr.Deref(d.Spec.Replicas, 1), d.Status
		pods, err := s.deploymentPods(ctx, d)
		if err != nil {
			return err.Error()
		}
		var b strings.Builder
		for _, p := range pods {
			fmt.Fprintf(&b, " %s:%s", p.Name, describe(&p))
		}
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.ReadyReplicas != want || st.Replicas != want ||
			len(pods) != int(want) {
			return fmt.Sprintf("%d/%d updated, %d ready, %d in all, %d pods;%s", st.UpdatedReplicas, want, st.ReadyReplicas, st.Replicas, len(pods), b.String())
		}
		return ""
	})
}

// deploymentPods are the pods of d's ReplicaSets, by ownership: kubeadm's
// coredns selects k8s-app=kube-dns, which the chart's cluster DNS pods
// carry too.
func (s *install) deploymentPods(ctx context.Context, d *appsv1.Deployment) ([]corev1.Pod, error) {
	sel := metav1.FormatLabelSelector(d.Spec.Selector)
	rss, err := s.c.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	owned := map[types.UID]bool{}
	for _, rs := range rss.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == d.UID {
			owned[rs.UID] = true
		}
	}
	pods, err := s.c.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		ref := metav1.GetControllerOf(&p)
		return ref == nil || !owned[ref.UID]
	}), nil
}

// waitReplaced waits until none of old is left and the release's
// Deployment of component has rolled out again.
func (s *install) waitReplaced(r chartRelease, component string, old []corev1.Pod) {
	s.t.Helper()
	s.eventually(component+" pods replaced", func(context.Context) string {
		for _, p := range r.podsOf(s, component) {
			if slices.ContainsFunc(old, func(o corev1.Pod) bool { return o.UID == p.UID }) {
				return "old pod " + p.Name + " still there"
			}
		}
		return ""
	})
	s.waitRolledOut(r.namespace, r.deployment(component))
}

// The readiness probe's period of kubeadm's CoreDNS, and as the chart's
// README patches it in with the globalmirror image: with 3 failures, a
// terminating pod stops serving within 6 s, inside the patched lameduck.
const (
	kubeadmReadinessPeriod = 10
	patchedReadinessPeriod = 2
	patchedLameduck        = "15s"
)

// grantLinksToKubeadmDNS lets kubeadm's CoreDNS read Linkerd's Links, for
// the drains on them, as the README's patch says (kubectl create
// clusterrole and clusterrolebinding): system:coredns does not.
func (s *install) grantLinksToKubeadmDNS() {
	s.t.Helper()
	const name = "globalmirror-coredns-links"
	s.must(s.c.RbacV1().ClusterRoles().Create(s.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: source.LinkRules()}, metav1.CreateOptions{}))
	s.must(s.c.RbacV1().ClusterRoleBindings().Create(s.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: metav1.NamespaceSystem, Name: "coredns"}}}, metav1.CreateOptions{}))
}

// patchKubeadmCoreDNS gives kubeadm's CoreDNS image and its readiness
// probe's period, with the patch the chart's README gives (kubectl patch),
// and waits for the rollout.
func (s *install) patchKubeadmCoreDNS(image string, readinessPeriod int) {
	s.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"coredns","image":%q,"readinessProbe":{"periodSeconds":%d}}]}}}}`,
		image, readinessPeriod)
	s.must(s.c.AppsV1().Deployments(metav1.NamespaceSystem).Patch(s.ctx, "coredns", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}))
	s.waitRolledOut(metav1.NamespaceSystem, "coredns")
}

// setKubeadmMemoryLimit sets the memory limit of kubeadm's CoreDNS, as
// `kubectl set resources` does.
func (s *install) setKubeadmMemoryLimit(limit string) {
	s.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"coredns","resources":{"limits":{"memory":%q}}}]}}}}`, limit)
	s.must(s.c.AppsV1().Deployments(metav1.NamespaceSystem).Patch(s.ctx, "coredns", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}))
}

// restart restarts a Deployment's pods, as `kubectl rollout restart` does.
func (s *install) restart(namespace, deployment string) {
	s.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	s.must(s.c.AppsV1().Deployments(namespace).Patch(s.ctx, deployment, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}))
}

// scale scales a Deployment, as `kubectl scale` does, and waits until it
// has as many Ready pods and no other.
func (s *install) scale(namespace, deployment string, replicas int32) {
	s.t.Helper()
	sc, err := s.c.AppsV1().Deployments(namespace).GetScale(s.ctx, deployment, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	// No resourceVersion precondition, as `kubectl scale` sends none: the
	// Deployment's status changes under us (a pod turning Ready), and that
	// is no reason to refuse a new replica count.
	sc.Spec.Replicas, sc.ResourceVersion = replicas, ""
	s.must(s.c.AppsV1().Deployments(namespace).UpdateScale(s.ctx, deployment, sc, metav1.UpdateOptions{}))
	s.waitRolledOut(namespace, deployment)
}

// setCorefile edits the Corefile in kubeadm's coredns ConfigMap, as
// `kubectl edit configmap coredns` does, and waits until every one of
// kubeadm's CoreDNS pods runs it (the reload plugin applied the ConfigMap
// the kubelet updated in its volume) and, withGlobal, the global plugin
// has synced and answers for the global service.
func (s *install) setCorefile(corefile string, withGlobal bool) {
	s.t.Helper()
	// Each pod's running Corefile's hash (the reload plugin's
	// coredns_reload_version_info).
	before := map[string]string{}
	for _, p := range s.kubeadmPods() {
		m, err := s.podMetrics(p)
		if err != nil {
			s.t.Fatal(err)
		}
		before[p.Name] = reloadHash(m)
	}
	s.writeCorefile(corefile)
	s.eventually("the new Corefile in every CoreDNS pod", func(context.Context) string {
		for _, p := range s.kubeadmPods() {
			m, err := s.podMetrics(p)
			if err != nil {
				return err.Error()
			}
			if h := reloadHash(m); h == before[p.Name] {
				return p.Name + " still runs the old Corefile"
			}
			if withGlobal && m.Sum("coredns_global_globals") < 1 {
				return p.Name + " has no global service"
			}
		}
		return ""
	})
}

// writeCorefile writes corefile into kubeadm's CoreDNS ConfigMap.
func (s *install) writeCorefile(corefile string) {
	s.t.Helper()
	cm, err := s.c.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(s.ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	cm.Data["Corefile"] = corefile
	s.must(s.c.CoreV1().ConfigMaps(metav1.NamespaceSystem).Update(s.ctx, cm, metav1.UpdateOptions{}))
}

// kubeadmPods are kubeadm's CoreDNS pods.
func (s *install) kubeadmPods() []corev1.Pod {
	s.t.Helper()
	return slices.DeleteFunc(s.podsBySelector(metav1.NamespaceSystem, "k8s-app=kube-dns"), func(p corev1.Pod) bool {
		return p.Labels["app.kubernetes.io/instance"] != ""
	})
}

// podMetrics scrapes a CoreDNS pod's prometheus plugin.
func (s *install) podMetrics(p corev1.Pod) (run.Samples, error) {
	return run.Scrape("http://" + net.JoinHostPort(p.Status.PodIP, "9153") + "/metrics")
}

func reloadHash(m run.Samples) string {
	for series := range m {
		if rest, ok := strings.CutPrefix(series, "coredns_reload_version_info{"); ok {
			if _, v, ok := strings.Cut(rest, `value="`); ok {
				return strings.TrimSuffix(strings.TrimSuffix(v, "}"), `"`)
			}
		}
	}
	return ""
}

// withoutRule removes the rules on group/resource from ClusterRole name,
// and returns what puts them back.
func (s *install) withoutRule(name, group, resource string) (restore func()) {
	s.t.Helper()
	roles := s.c.RbacV1().ClusterRoles()
	role, err := roles.Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	rules := role.Rules
	role.Rules = slices.DeleteFunc(slices.Clone(rules), func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource)
	})
	if len(role.Rules) == len(rules) {
		s.t.Fatalf("ClusterRole %s has no rule on %s.%s", name, resource, group)
	}
	if role, err = roles.Update(s.ctx, role, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	return func() {
		s.t.Helper()
		role.Rules = rules
		s.must(roles.Update(s.ctx, role, metav1.UpdateOptions{}))
	}
}

// awaitServing waits until each pod answers db-global itself, on its own
// address.
func (s *install) awaitServing(pods []corev1.Pod) {
	s.t.Helper()
	s.awaitAnswering(pods, "db-global."+ns+".svc."+node.ClusterDomain+".")
}

// awaitAnswering waits until each of pods answers name with addresses.
func (s *install) awaitAnswering(pods []corev1.Pod, name string) {
	s.t.Helper()
	for _, p := range pods {
		s.eventually(p.Name+" answering "+name, func(context.Context) string {
			if got := dnsq.Answer("udp", net.JoinHostPort(p.Status.PodIP, "53"), name, dns.TypeA); !strings.HasPrefix(got, "NOERROR ") {
				return got
			}
			return ""
		})
	}
}

func podReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
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

// expectProbedAndUnprivileged checks every running pod of the releases that
// it has not checked before (each step ends with it, so every pod a step
// makes is read): what made it Ready, the chart's probes on its ports, run
// by the kubelet; and how it runs, as the chart's README says, both in its
// spec and as the kernel and the runtime show the running container
// (containerProcess, node.RuntimeSpec): UID and GID 65532, no privilege
// escalation, the runtime's default seccomp profile, a read-only root, no
// capability but NET_BIND_SERVICE for CoreDNS; with the chart's
// ServiceAccount token and no kubeconfig. It returns how many it checked.
func (s *install) expectProbedAndUnprivileged(releases ...chartRelease) int {
	s.t.Helper()
	checked := 0
	for _, r := range releases {
		for component, ports := range map[string][]int32{"controller": {8080}, "coredns": {8080, 8181}} {
			for _, p := range r.podsOf(s, component) {
				if s.readPods[p.UID] || p.DeletionTimestamp != nil {
					continue
				}
				s.readPods[p.UID] = true
				// A step may end as a Deployment's status still counts the
				// pod its new one replaces: read the new one once Ready.
				s.eventually(p.Name+" Ready", func(ctx context.Context) string {
					got, err := s.c.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
					if err != nil {
						return err.Error()
					}
					if p = *got; !podReady(&p) {
						return describe(&p)
					}
					return ""
				})
				checked++
				if p.Namespace == metav1.NamespaceSystem {
					s.checkedPods[p.UID] = p.Name
				}
				s.expectProbed(p, ports)
				if p.Spec.ServiceAccountName != r.deployment(component) {
					s.t.Errorf("%s: ServiceAccount %q", p.Name, p.Spec.ServiceAccountName)
				}
				caps := uint64(0)
				if component == "coredns" {
					caps = 1 << 10 // CAP_NET_BIND_SERVICE
				}
				s.expectRunningUnprivileged(p, caps)
				s.expectDefaultSeccomp(p)
			}
		}
	}
	return checked
}

// expectDefaultSeccomp compares the seccomp profile the runtime gave p's
// container with the one it gives a container that asks for RuntimeDefault
// (the kernel's Seccomp: 2 says only that some filter is on).
func (s *install) expectDefaultSeccomp(p corev1.Pod) {
	s.t.Helper()
	if s.defaultSeccomp == "" {
		ref := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "seccomp-reference"}, Spec: s.podSpec("seccomp-reference", "pause")}
		ref.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
		running := s.runPod(ref)
		s.defaultSeccomp = s.seccompOf(*running)
		if !strings.Contains(s.defaultSeccomp, `"defaultAction":"SCMP_ACT_ERRNO"`) {
			s.t.Fatalf("the runtime's default seccomp profile does not deny by default: %.300s", s.defaultSeccomp)
		}
		s.must(s.c.CoreV1().Pods(ns).Delete(s.ctx, ref.Name, metav1.DeleteOptions{}))
	}
	if got := s.seccompOf(p); got != s.defaultSeccomp {
		s.t.Errorf("%s: seccomp profile is not the runtime's default (RuntimeDefault): %.300s", p.Name, got)
	}
}

// seccompOf is the seccomp section of the runtime spec of p's one container.
func (s *install) seccompOf(p corev1.Pod) string {
	s.t.Helper()
	if len(p.Status.ContainerStatuses) != 1 {
		s.t.Fatalf("%s: %d container statuses, want 1", p.Name, len(p.Status.ContainerStatuses))
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	raw, err := node.RuntimeSpec(id)
	if err != nil {
		s.t.Fatalf("%s: %v", p.Name, err)
	}
	var spec struct {
		Linux struct {
			Seccomp json.RawMessage `json:"seccomp"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		s.t.Fatalf("%s: runtime spec: %v", p.Name, err)
	}
	return string(spec.Linux.Seccomp)
}

func (s *install) expectProbed(p corev1.Pod, ports []int32) {
	s.t.Helper()
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
	for _, a := range c.Args {
		if strings.Contains(a, "kubeconfig") {
			s.t.Errorf("%s: argument %q: pods must use their in-cluster configuration", p.Name, a)
		}
	}
	// Credentials come only from the ServiceAccount's projected token; the
	// rest is configuration.
	for _, v := range p.Spec.Volumes {
		if v.ConfigMap == nil && !serviceAccountToken(v) {
			s.t.Errorf("%s: volume %s is neither a ConfigMap nor the ServiceAccount token", p.Name, v.Name)
		}
	}
	for _, e := range c.Env {
		if e.Name == "KUBECONFIG" || e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			s.t.Errorf("%s: environment %s", p.Name, e.Name)
		}
	}
}

// expectRunningUnprivileged reads the pod's container process in /proc
// (the node's processes are this test's): its UIDs and GIDs, no_new_privs,
// its capabilities (effective, permitted and bounding: caps, no more; no
// ambient ones, so only the image's file capability lifts caps), and
// its root mount.
func (s *install) expectRunningUnprivileged(p corev1.Pod, caps uint64) {
	s.t.Helper()
	pid, err := containerProcess(p.UID)
	if err != nil {
		s.t.Errorf("%s: %v", p.Name, err)
		return
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		s.t.Errorf("%s: %v", p.Name, err)
		return
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	// Seccomp 2: a filter (which one: expectDefaultSeccomp).
	want := map[string]string{"Uid": "65532 65532 65532 65532", "Gid": "65532 65532 65532 65532", "NoNewPrivs": "1", "Seccomp": "2",
		"CapEff": fmt.Sprintf("%016x", caps), "CapPrm": fmt.Sprintf("%016x", caps), "CapBnd": fmt.Sprintf("%016x", caps), "CapAmb": "0000000000000000"}
	for k, v := range want {
		if fields[k] != v {
			s.t.Errorf("%s (pid %d): %s %q, want %q", p.Name, pid, k, fields[k], v)
		}
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		s.t.Errorf("%s: %v", p.Name, err)
		return
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		// id parent major:minor root mountpoint options ...
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/" {
			if !slices.Contains(strings.Split(f[5], ","), "ro") {
				s.t.Errorf("%s (pid %d): root mounted %s, want read-only", p.Name, pid, f[5])
			}
			return
		}
	}
	s.t.Errorf("%s (pid %d): no root mount in mountinfo", p.Name, pid)
}

// serviceAccountToken says whether v is the pod's ServiceAccount token as
// the kubelet mounts it (kube-api-access-*, or the chart's of a lifetime of
// its own): a projected token for the API server, its CA and the namespace,
// and nothing else.
func serviceAccountToken(v corev1.Volume) bool {
	if v.Projected == nil {
		return false
	}
	for _, src := range v.Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil && src.ServiceAccountToken.Audience == "":
		case src.ConfigMap != nil && src.ConfigMap.Name == "kube-root-ca.crt":
		case src.DownwardAPI != nil && len(src.DownwardAPI.Items) == 1 && src.DownwardAPI.Items[0].FieldRef != nil &&
			src.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.namespace":
		default:
			return false
		}
	}
	return true
}

// containerProcess is the process of the pod's one container (not the
// sandbox's pause): cgroupfs places it under kubepods/.../pod<uid>/.
func containerProcess(uid types.UID) (int, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var found []int
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !strings.Contains(string(cg), "/pod"+string(uid)+"/") {
			continue
		}
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), "/pause") {
			continue
		}
		found = append(found, pid)
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%d processes in pod %s's cgroup besides its sandbox, want 1: %v", len(found), uid, found)
	}
	return found[0], nil
}

// auditRestricted makes Pod Security audit and warn at the restricted
// level in kube-system, which cannot enforce it while kubeadm's CoreDNS
// runs there (not run as non-root, no seccomp profile).
func (s *install) auditRestricted() {
	s.t.Helper()
	patch := `{"metadata":{"labels":{"pod-security.kubernetes.io/audit":"restricted","pod-security.kubernetes.io/warn":"restricted"}}}`
	s.must(s.c.CoreV1().Namespaces().Patch(s.ctx, metav1.NamespaceSystem, types.MergePatchType, []byte(patch), metav1.PatchOptions{}))
}

// auditEvent is what expectAdmittedRestricted reads of the API server's
// audit log.
type auditEvent struct {
	Verb      string `json:"verb"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseObject *corev1.Pod       `json:"responseObject"`
	Annotations    map[string]string `json:"annotations"`
}

// expectAdmittedRestricted reads Pod Security's audit of every pod created
// in kube-system (auditRestricted) from the API server's audit log: each
// of kubeadm's pods violates the restricted level, which shows the audit at
// work; no pod of the chart does, and every chart pod the test checked
// running (s.checkedPods) is among those audited. Then, where the level is
// enforced, a pod that breaks it is refused.
func (s *install) expectAdmittedRestricted(auditLog string, enforced string) {
	s.t.Helper()
	data, err := os.ReadFile(auditLog)
	if err != nil {
		s.t.Fatal(err)
	}
	audited := map[types.UID]bool{}
	kubeadm := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e auditEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			s.t.Fatalf("audit log: %v: %s", err, line)
		}
		p := e.ResponseObject
		if e.Verb != "create" || e.ObjectRef.Resource != "pods" || e.ObjectRef.Subresource != "" ||
			e.ObjectRef.Namespace != metav1.NamespaceSystem || p == nil || p.UID == "" {
			continue
		}
		violations := e.Annotations["pod-security.kubernetes.io/audit-violations"]
		switch {
		case p.Labels["app.kubernetes.io/instance"] == dnsRelease.name:
			audited[p.UID] = true
			if violations != "" {
				s.t.Errorf("Pod Security's audit: the chart's pod %s violates the restricted level: %s", p.Name, violations)
			}
		case p.Labels["k8s-app"] == "kube-dns":
			kubeadm++
			if violations == "" {
				s.t.Errorf("Pod Security's audit: kubeadm's pod %s has no violation of the restricted level; is the audit on?", p.Name)
			}
		}
	}
	if kubeadm == 0 {
		s.t.Error("Pod Security's audit: no pod of kubeadm's created in kube-system")
	}
	for uid, name := range s.checkedPods {
		if !audited[uid] {
			s.t.Errorf("Pod Security's audit: the chart's pod %s, checked running, has no audited creation", name)
		}
	}
	s.t.Logf("Pod Security's audit: %d chart pods created in kube-system, none violating the restricted level; %d of kubeadm's, each violating it",
		len(audited), kubeadm)

	refused := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "refused"}, Spec: s.podSpec("refused", "client")}
	_, err = s.c.CoreV1().Pods(enforced).Create(s.ctx, refused, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		s.t.Errorf("a pod without the restricted level's settings in %s: %v, want refused by Pod Security", enforced, err)
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
	// Any are the sets of records either of which is right, where the
	// cluster may answer one or the other (expectations only).
	Any [][]string `json:"-"`
}

type expectations struct {
	// asked are the asker's queries, TYPE/NAME, each asked with both
	// libraries: a global name short and fully qualified, a per-pod name
	// of each kind, SRV, an ordinary Service, an external name, a name
	// that does not exist (NXDOMAIN) and one without AAAA records (NODATA),
	// the reverse names of a mirrored and a local pod's addresses, and the
	// fleet's names (fleetAsked).
	asked []string
	// What the cluster answers each query with, LIB/TYPE/NAME: before
	// globalmirror; with the global service (from the controller's slices
	// or the plugin); with the plugin's reverse names on.
	before, global, reverse answers
	// drained is reverse with east drained at the shared level: east's
	// pods out of db-global and its SRV records, their own names (and
	// PTR) answering.
	drained answers
	// drainedStock is global with east drained at the shared level, as a
	// stock CoreDNS answers it from the controller's slices: east's pods
	// out of db-global and its SRV records, their own names not found
	// (the slices have them not ready). It is also what a stock CoreDNS
	// answers while east's gateway is down: the controller writes east's
	// pods not ready either way.
	drainedStock answers
	// gatewayDown is reverse while east's gateway fails its probes: east's
	// pods out of every answer, their own names NXDOMAIN and their
	// addresses' PTR the kubernetes plugin's (the endpoint mirrors'
	// Services).
	gatewayDown answers
	// podNames are the global per-pod names (db-1, db-0-east) and the
	// address of each.
	podNames map[string]string
}

// expectations are the answers of the world the test makes, from what the
// API says: the local pods' IPs and the ClusterIPs of Linkerd's endpoint
// mirrors of the remote pods.
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
	var all, srv, undrained, undrainedSRV []string
	for host, addr := range addrs {
		all = append(all, addr)
		srv = append(srv, "0 "+weight(len(addrs))+" 5432 "+host+"."+fqdn("db-global")+".")
		if !strings.HasSuffix(host, "-east") {
			undrained = append(undrained, addr)
		}
	}
	for host := range addrs {
		if !strings.HasSuffix(host, "-east") {
			undrainedSRV = append(undrainedSRV, "0 "+weight(len(undrained))+" 5432 "+host+"."+fqdn("db-global")+".")
		}
	}
	slices.Sort(all)
	slices.Sort(srv)
	slices.Sort(undrained)
	slices.Sort(undrainedSRV)
	e := expectations{podNames: addrs, before: answers{}, global: answers{}, reverse: answers{}, drained: answers{}}
	nodata := "AAAA/" + fqdn("db-global") + "." // a name with IPv4 addresses only
	mirrorPTR, localPTR := "PTR/"+addrs["db-0-east"], "PTR/"+addrs["db-1"]
	e.asked = []string{"host/db-global", "host/" + fqdn("db-global"), "host/db-0-east.db-global", "host/db-1.db-global",
		"SRV/_db._tcp.db-global", "host/kubernetes.default", "host/example.org.", "SRV/" + fqdn("nope-global") + ".", nodata,
		mirrorPTR, localPTR}
	e.asked = append(e.asked, fleetAsked()...)
	for _, lib := range []string{"glibc", "go"} {
		q := func(query string) string { return lib + "/" + query }
		// glibc tells NXDOMAIN from NODATA (res_search's h_errno); Go does not.
		nxdomain := result{NotFound: true, NXDomain: lib == "glibc"}
		notFound := result{NotFound: true}
		dot := map[string]string{"glibc": "", "go": "."}[lib]
		always := answers{
			q("host/kubernetes.default"):          {Records: []string{"10.96.0.1"}},
			q("host/example.org."):                {Records: []string{node.External["example.org."]}},
			q("SRV/" + fqdn("nope-global") + "."): nxdomain,
			q(mirrorPTR):                          {Records: []string{fqdn("db-0-east") + dot}},
			q(localPTR):                           {Records: []string{fqdn("db-1.db") + dot}},
			q("host/db-global"):                   {Records: all},
			q("host/" + fqdn("db-global")):        {Records: all},
			q("host/db-0-east.db-global"):         {Records: []string{addrs["db-0-east"]}},
			q("host/db-1.db-global"):              {Records: []string{addrs["db-1"]}},
			q("SRV/_db._tcp.db-global"):           {Records: srv},
			q(nodata):                             {NotFound: true},
		}
		for k, v := range always {
			e.before[k], e.global[k], e.reverse[k] = v, v, v
		}
		// Before globalmirror none of the global names exists.
		for _, name := range []string{"host/db-global", "host/" + fqdn("db-global"), "host/db-0-east.db-global", "host/db-1.db-global"} {
			e.before[q(name)] = notFound
		}
		e.before[q("SRV/_db._tcp.db-global")] = nxdomain
		e.before[q(nodata)] = nxdomain
		// The local pod's address is in db and in db-global: the
		// kubernetes plugin answers with both names (glibc takes one);
		// global's reverse names with the global one, as for the mirrored
		// pod.
		byDB, byGlobal := fqdn("db-1.db")+dot, "db-1."+fqdn("db-global")+dot
		e.global[q(localPTR)] = result{Any: [][]string{{byDB}, {byGlobal}, {byGlobal, byDB}}}
		e.reverse[q(localPTR)] = result{Records: []string{"db-1." + fqdn("db-global") + dot}}
		e.reverse[q(mirrorPTR)] = result{Records: []string{"db-0-east." + fqdn("db-global") + dot}}
	}
	// Drained: reverse, but for the shared names, of either library.
	maps.Copy(e.drained, e.reverse)
	for _, lib := range []string{"glibc", "go"} {
		e.drained[lib+"/host/db-global"] = result{Records: undrained}
		e.drained[lib+"/host/"+fqdn("db-global")] = result{Records: undrained}
		e.drained[lib+"/SRV/_db._tcp.db-global"] = result{Records: undrainedSRV}
	}
	e.drainedStock = maps.Clone(e.global)
	for _, lib := range []string{"glibc", "go"} {
		e.drainedStock[lib+"/host/db-global"] = result{Records: undrained}
		e.drainedStock[lib+"/host/"+fqdn("db-global")] = result{Records: undrained}
		e.drainedStock[lib+"/SRV/_db._tcp.db-global"] = result{Records: undrainedSRV}
		e.drainedStock[lib+"/host/db-0-east.db-global"] = result{NotFound: true}
	}
	e.gatewayDown = maps.Clone(e.drained)
	for _, lib := range []string{"glibc", "go"} {
		e.gatewayDown[lib+"/host/db-0-east.db-global"] = result{NotFound: true}
		e.gatewayDown[lib+"/"+mirrorPTR] = e.global[lib+"/"+mirrorPTR]
	}
	// The fleet is not there until a step writes it.
	e.before, e.global, e.reverse, e.drained = withFleet(e.before, 0), withFleet(e.global, 0), withFleet(e.reverse, 0), withFleet(e.drained, 0)
	e.drainedStock, e.gatewayDown = withFleet(e.drainedStock, 0), withFleet(e.gatewayDown, 0)
	return e
}

// between are the states from all to less, where a cluster's pods leave
// (or come back) one at a time, as when Linkerd marks a gateway's
// endpoint mirrors one by one: for each record of a query that all holds
// and less does not, all without that record (SRV weights for the records
// left). Each lookup is judged on its own, so a state per record, not per
// combination of them across queries, says every answer in between; with
// two pods leaving, as east's, "all but one" is each state in between.
func between(all, less answers) []answers {
	target := func(query, record string) string {
		if _, rest, _ := strings.Cut(query, "/"); strings.HasPrefix(rest, "SRV/") {
			f := strings.Fields(record)
			return f[len(f)-1]
		}
		return record
	}
	var states []answers
	for q, r := range all {
		kept := map[string]bool{}
		for _, rec := range less[q].Records {
			kept[target(q, rec)] = true
		}
		var leaving []int
		for i, rec := range r.Records {
			if !kept[target(q, rec)] {
				leaving = append(leaving, i)
			}
		}
		if len(leaving) < 2 || r.Any != nil {
			continue
		}
		for _, i := range leaving {
			records := slices.Delete(slices.Clone(r.Records), i, i+1)
			if _, rest, _ := strings.Cut(q, "/"); strings.HasPrefix(rest, "SRV/") {
				for j, rec := range records {
					f := strings.Fields(rec)
					f[1] = weight(len(records))
					records[j] = strings.Join(f, " ")
				}
				slices.Sort(records)
			}
			state := maps.Clone(all)
			state[q] = result{Records: records}
			states = append(states, state)
		}
	}
	return states
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
// right.
func (s *install) awaitAnswers(pod string, want answers) {
	s.t.Helper()
	s.eventually("answers in pod "+pod, func(ctx context.Context) string { return s.wrongAnswers(ctx, pod, want) })
}

// answered says whether the pod's answers are right until readyTimeout.
func (s *install) answered(pod string, want answers) bool {
	return await.Poll(s.ctx, readyTimeout, 200*time.Millisecond, func(ctx context.Context) string { return s.wrongAnswers(ctx, pod, want) }) == nil
}

// wrongAnswers runs the queries of want in the pod once and says which
// results are wrong ("" where none is).
func (s *install) wrongAnswers(ctx context.Context, pod string, want answers) string {
	queries := slices.Sorted(maps.Keys(want))
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
		if w := want[r.Query]; !w.matches(r) {
			wrong = append(wrong, fmt.Sprintf("%s: got %+v, want %+v", r.Query, r, w))
		}
	}
	if len(wrong) > 0 || len(got) != len(queries) {
		return fmt.Sprintf("%d of %d wrong:\n  %s", len(wrong), len(queries), strings.Join(wrong, "\n  "))
	}
	return ""
}

// expectLeader checks that one controller replica of r leads, through the
// Lease the chart's RBAC lets it hold in the release namespace: a running
// one, none of the pods gone.
func (s *install) expectLeader(r chartRelease, gone ...types.UID) {
	s.t.Helper()
	s.eventually("controller leader", func(context.Context) string {
		if p := s.leaderPod(r); p.Name == "" || slices.Contains(gone, p.UID) {
			return "no running controller pod holds the Lease"
		}
		return ""
	})
}

// leaderPod is r's controller pod holding the Lease; empty if none.
func (s *install) leaderPod(r chartRelease) corev1.Pod {
	s.t.Helper()
	l, err := s.c.CoordinationV1().Leases(r.namespace).Get(s.ctx, r.deployment("controller"), metav1.GetOptions{})
	if err != nil {
		return corev1.Pod{}
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	for _, p := range r.podsOf(s, "controller") {
		if strings.HasPrefix(holder, p.Name+"_") {
			return p
		}
	}
	return corev1.Pod{}
}

// expectUninstalled checks what `helm uninstall` leaves of r, as the
// chart's README says: none of the chart's objects but the cluster DNS
// Service, which it keeps.
func (s *install) expectUninstalled(r chartRelease) {
	s.t.Helper()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.name}
	meta, err := metadata.NewForConfig(s.config)
	if err != nil {
		s.t.Fatal(err)
	}
	// Namespaced kinds are listed in every namespace, cluster-scoped ones
	// by the same request.
	kinds := []schema.GroupVersionResource{
		appsv1.SchemeGroupVersion.WithResource("deployments"),
		corev1.SchemeGroupVersion.WithResource("pods"),
		corev1.SchemeGroupVersion.WithResource("services"),
		corev1.SchemeGroupVersion.WithResource("configmaps"),
		corev1.SchemeGroupVersion.WithResource("serviceaccounts"),
		policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"),
		rbacv1.SchemeGroupVersion.WithResource("roles"),
		rbacv1.SchemeGroupVersion.WithResource("rolebindings"),
		rbacv1.SchemeGroupVersion.WithResource("clusterroles"),
		rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"),
	}
	s.eventually(r.name+"'s objects gone", func(ctx context.Context) string {
		var left []string
		for _, gvr := range kinds {
			l, err := meta.Resource(gvr).List(ctx, sel)
			if err != nil {
				return err.Error()
			}
			for _, o := range l.Items {
				if gvr.Resource == "services" && o.Annotations["helm.sh/resource-policy"] == "keep" {
					continue // the cluster DNS Service
				}
				left = append(left, gvr.Resource+" "+o.Namespace+"/"+o.Name)
			}
		}
		if len(left) > 0 {
			return "left: " + strings.Join(left, ", ")
		}
		return ""
	})
}

// expectGlobalKept checks what uninstalling the controller leaves, as the
// chart's README says: the global Services it wrote, with their
// EndpointSlices, and its Lease.
func (s *install) expectGlobalKept(r chartRelease) {
	s.t.Helper()
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
	if _, err := s.c.CoordinationV1().Leases(r.namespace).Get(s.ctx, r.deployment("controller"), metav1.GetOptions{}); err != nil {
		s.t.Errorf("the controller's Lease: %v; the chart's README says it stays", err)
	}
}

// captureAskersDNS captures the asker's DNS on the node's interfaces
// (dnsWire) until the test ends.
func (s *install) captureAskersDNS(asker *corev1.Pod, server netip.Addr) *dnsWire {
	s.t.Helper()
	// The asker's veth on the node's side is the peer of its eth0.
	out, err := s.node.ExecIn(s.ctx, ns, asker.Name, "udp", "cat", "/sys/class/net/eth0/iflink")
	if err != nil {
		s.t.Fatal(err)
	}
	link, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		s.t.Fatalf("the asker's link: %v", err)
	}
	wire, stop, err := captureDNS(netip.MustParseAddr(asker.Status.PodIP), server, link)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(stop)
	return wire
}

// dnsWarnings are the warnings and errors the cluster DNS pods still
// running logged within d of at: the tail of a failed step says what
// CoreDNS said of it.
func (s *install) dnsWarnings(at time.Time, d time.Duration) []string {
	var out []string
	since := metav1.NewTime(at.Add(-d))
	for _, p := range s.podsBySelector(metav1.NamespaceSystem, "k8s-app=kube-dns") {
		raw, err := s.c.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &since, Timestamps: true}).DoRaw(s.ctx)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", p.Name, err))
			continue
		}
		for line := range strings.Lines(string(raw)) {
			stamp, msg, _ := strings.Cut(strings.TrimSpace(line), " ")
			when, err := time.Parse(time.RFC3339Nano, stamp)
			if err == nil && when.Before(at.Add(d)) && (strings.Contains(msg, "[WARNING]") || strings.Contains(msg, "[ERROR]")) {
				out = append(out, fmt.Sprintf("%s %s %s", when.Local().Format("15:04:05.000"), p.Name, msg))
			}
		}
	}
	return out
}
