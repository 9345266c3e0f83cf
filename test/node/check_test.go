package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/workload"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// globalmirror runs the globalmirror command (args[0]) against the node's
// cluster, as an operator would, and returns its output and exit code. With
// into, it asks for JSON (-o json) and decodes the output into it.
func (s *install) globalmirror(ctx context.Context, into any, args ...string) (string, int, error) {
	bin, err := run.Bin("globalmirror")
	if err != nil {
		return "", 0, err
	}
	flags := []string{args[0], "--kubeconfig", s.kubeconfig}
	if into != nil {
		flags = append(flags, "-o", "json")
	}
	cmd := exec.CommandContext(ctx, bin, append(flags, args[1:]...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		return "", 0, fmt.Errorf("globalmirror %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if into != nil {
		if err := json.Unmarshal(out, into); err != nil {
			return string(out), cmd.ProcessState.ExitCode(), fmt.Errorf("output: %v\n%s", err, out)
		}
	}
	return string(out), cmd.ProcessState.ExitCode(), nil
}

// expectCheck waits until `globalmirror check` fails exactly the checks
// named in failing, each with a hint that says what failing gives for it
// ("‼ hint": a warning with that hint; "– detail": skipped, its detail
// saying so), passes every other, and exits 1 where any failed; it logs the
// text the operator reads.
func (s *install) expectCheck(failing map[string]string) {
	s.t.Helper()
	var last string
	s.eventually("globalmirror check", func(ctx context.Context) string {
		var report cli.Report
		_, code, err := s.globalmirror(ctx, &report, "check")
		if err != nil {
			return err.Error()
		}
		rs := report.Checks
		if len(rs) < 11 {
			return fmt.Sprintf("%d checks", len(rs))
		}
		var wrong []string
		errors := 0
		for _, r := range rs {
			hint, want := failing[r.Check]
			level, says := cli.Error, r.Hint
			if rest, ok := strings.CutPrefix(hint, "‼ "); ok {
				level, hint = cli.Warning, rest
			} else if rest, ok := strings.CutPrefix(hint, "– "); ok {
				level, hint, says = cli.Skipped, rest, r.Detail
			}
			if want && level == cli.Error {
				errors++
			}
			switch {
			case want && r.Result != level:
				wrong = append(wrong, fmt.Sprintf("%s %s (%s); want it %s", r.Check, r.Result, r.Detail, level))
			case !want && r.Result != cli.OK:
				wrong = append(wrong, fmt.Sprintf("%s %s: %s (hint: %s)", r.Check, r.Result, r.Detail, r.Hint))
			case want && !strings.Contains(says, hint):
				wrong = append(wrong, fmt.Sprintf("%s %s saying %q; want it to say %q", r.Check, r.Result, says, hint))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(failing)) {
			if !slices.ContainsFunc(rs, func(r cli.Result) bool { return r.Check == name }) {
				wrong = append(wrong, "no check named "+name)
			}
		}
		if wantCode := map[bool]int{true: 1, false: 0}[errors > 0]; code != wantCode || report.Success != (wantCode == 0) {
			wrong = append(wrong, fmt.Sprintf("exit code %d, success %v; want %d", code, report.Success, wantCode))
		}
		var text strings.Builder
		cli.WriteResults(&text, report)
		last = text.String()
		return strings.Join(wrong, "\n")
	})
	s.t.Logf("globalmirror check:\n%s", last)
}

// expectStatus checks what `globalmirror status` says of db-global: every
// member, each of its per-pod names with its address, ready, and the
// controller's slices in sync; it logs the table the operator reads.
func (s *install) expectStatus(want map[string]string) {
	s.t.Helper()
	s.eventually("globalmirror status", func(ctx context.Context) string {
		var st cli.GlobalStatus
		out, code, err := s.globalmirror(ctx, &st, "status", ns+"/db-global")
		// 0: it exists and the controller's objects are in sync.
		if err != nil || code != 0 {
			return fmt.Sprintf("exit %d: %v\n%s", code, err, out)
		}
		got := map[string]string{}
		var wrong []string
		for _, e := range st.Endpoints {
			host, _, _ := strings.Cut(e.Name, ".")
			got[host] = strings.Join(e.Addresses, ",")
			if e.Name != host+".db-global."+ns+".svc" || !e.Ready {
				wrong = append(wrong, fmt.Sprintf("%+v", e))
			}
		}
		members := len(st.Members)
		for _, m := range st.Members {
			if m.Ready != m.Endpoints || m.Endpoints == 0 || len(m.ReadyBy) == 0 {
				wrong = append(wrong, fmt.Sprintf("member %+v", m))
			}
		}
		if !maps.Equal(got, want) || len(wrong) > 0 || !st.Exists || !st.InSync || st.Verdict != "write" || members != 3 || len(st.Problems) > 0 {
			return fmt.Sprintf("status: %d members, per-pod names %v, want %v; exists %v, verdict %s, in sync %v (%v), problems %v, rows or members not ready or misnamed %v",
				members, got, want, st.Exists, st.Verdict, st.InSync, st.Differences, st.Problems, wrong)
		}
		return ""
	})
	out, _, err := s.globalmirror(s.ctx, nil, "status", ns+"/db-global")
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("globalmirror status %s/db-global:\n%s", ns, out)
}

// deleteGlobalSlice deletes one of the controller's EndpointSlices of the
// global name, as a user might while the controller is stopped.
func (s *install) deleteGlobalSlice(name string) {
	s.t.Helper()
	l, err := s.c.DiscoveryV1().EndpointSlices(ns).List(s.ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + name + "," + discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy})
	if err != nil || len(l.Items) == 0 {
		s.t.Fatalf("the controller's slices of %s: %d, %v", name, len(l.Items), err)
	}
	s.must(s.c.DiscoveryV1().EndpointSlices(ns).Delete(s.ctx, l.Items[0].Name, metav1.DeleteOptions{}))
}

// leaseHeldByAStranger makes r's Lease held by an identity no pod has,
// renewed now for an hour: its replicas run and wait for it to expire, and
// none leads. restore deletes it, and a replica takes a new one.
func (s *install) leaseHeldByAStranger(r chartRelease) (restore func()) {
	s.t.Helper()
	leases := s.c.CoordinationV1().Leases(r.namespace)
	s.eventually("the Lease taken from the controller", func(ctx context.Context) string {
		l, err := leases.Get(ctx, r.deployment("controller"), metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("gone-pod_0"), ptr.To[int32](3600)
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			return err.Error() // the leader renewed in between: again
		}
		return ""
	})
	return func() {
		s.t.Helper()
		s.must(leases.Delete(s.ctx, r.deployment("controller"), metav1.DeleteOptions{}))
	}
}

// nameConflict exports cache from east, which Linkerd mirrors here as
// cache-east, where a user's Service already holds cache-global. heal
// removes the export, waits for its mirror to go, then the user's Service.
func (s *install) nameConflict(east *localkube.Cluster) (heal func()) {
	s.t.Helper()
	user := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cache-global"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "tcp", Port: 80}}}}
	s.must(s.c.CoreV1().Services(ns).Create(s.ctx, user, metav1.CreateOptions{}))
	w, err := workload.Create(s.ctx, east.Client, ns, "cache", 1, workload.Options{
		Labels: map[string]string{workload.ExportedLabel: "true"}, IPv4: netip.MustParsePrefix("198.51.100.0/24")})
	if err != nil {
		s.t.Fatal(err)
	}
	return func() {
		s.t.Helper()
		s.must(w.Delete(s.ctx))
		s.eventually("the mirror cache-east gone", func(ctx context.Context) string {
			if _, err := s.c.CoreV1().Services(ns).Get(ctx, "cache-east", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("cache-east: %v", err)
			}
			return ""
		})
		s.must(s.c.CoreV1().Services(ns).Delete(s.ctx, user.Name, metav1.DeleteOptions{}))
	}
}

// serviceMirrorWithoutHeadless adds, scaled to 0, a Linkerd service mirror
// of a cluster linked without headless mirroring (the link's default).
// heal deletes it and its namespace.
func (s *install) serviceMirrorWithoutHeadless() (heal func()) {
	s.t.Helper()
	// Linkerd's extension namespace, which holds the simulator's Links.
	const mns = "linkerd-multicluster"
	if _, err := s.c.CoreV1().Namespaces().Get(s.ctx, mns, metav1.GetOptions{}); err != nil {
		s.t.Fatalf("the Links' namespace: %v", err)
	}
	labels := map[string]string{"app": "service-mirror-north"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: mns, Name: "linkerd-service-mirror-north",
			Labels: map[string]string{"component": "linkerd-service-mirror", aggregate.LabelClusterName: "north"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "service-mirror", Image: s.node.Images["client"], Args: []string{"service-mirror", "-log-level=info", "-event-requeue-limit=3"}}}}}},
	}
	s.must(s.c.AppsV1().Deployments(mns).Create(s.ctx, d, metav1.CreateOptions{}))
	return func() {
		s.t.Helper()
		s.must(s.c.AppsV1().Deployments(mns).Delete(s.ctx, d.Name, metav1.DeleteOptions{}))
	}
}

// expectUnreachable runs check with the node cluster's kubeconfig pointed
// at a loopback port nothing listens on: every check is skipped, the report
// says why with a hint, in its one shape, and check exits 3 (could not
// check).
func (s *install) expectUnreachable() {
	s.t.Helper()
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		s.t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	path := filepath.Join(s.t.TempDir(), "unreachable.kubeconfig")
	s.must(clientcmd.WriteToFile(*cfg, path))
	var report cli.Report
	_, code, err := s.globalmirror(s.ctx, &report, "check", "--kubeconfig", path)
	if err != nil {
		s.t.Fatalf("check of an unreachable API server: %v", err)
	}
	if r := report.Checks; code != cli.ExitCouldNotCheck || report.Success || len(r) < 11 || r[0].Check != "Kubernetes API" || r[0].Result != cli.Skipped ||
		!strings.Contains(report.Error, "connection refused") || !strings.Contains(report.Error, "reachable") {
		s.t.Errorf("check of an unreachable API server: exit %d, %+v", code, report)
	}
	text, _, _ := s.globalmirror(s.ctx, nil, "check", "--kubeconfig", path)
	s.t.Logf("globalmirror check:\n%s", text)
}
