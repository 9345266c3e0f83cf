package cli

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// checkController judges the controller's Deployment: no other release
// watching its namespaces, a Ready replica, and the release its running
// pods say they are.
func checkController(ctx context.Context, c check, cl *Cluster, _ globals) Result {
	if cl.ControllerErr != nil {
		return c.apiFailure("looking for the controller", cl.ControllerErr, "")
	}
	ctl := cl.Controller
	if ctl == nil {
		return c.result(Error, "no globalmirror controller Deployment found",
			"install it: helm install globalmirror charts/globalmirror -n globalmirror-system --create-namespace")
	}
	d := ctl.Deployment
	id := d.Namespace + "/" + d.Name
	if len(ctl.Overlapping) > 0 {
		return c.result(Error, fmt.Sprintf("%d controller releases watch the same namespaces: %s", 1+len(ctl.Overlapping), strings.Join(append([]string{id}, ctl.Overlapping...), ", ")),
			"each writes the global services of what it watches, against the others: keep one release (helm list -A), or give each --namespaces of its own")
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	if d.Status.ReadyReplicas < 1 {
		return c.result(Error, fmt.Sprintf("%s: %d of %d replicas Ready", id, d.Status.ReadyReplicas, want),
			fmt.Sprintf("start it: kubectl -n %s scale deployment %s --replicas=2; if it runs, see why it is not Ready: kubectl -n %s describe pods -l %s",
				d.Namespace, d.Name, d.Namespace, labels.SelectorFromSet(d.Spec.Selector.MatchLabels)))
	}
	ok := c.result(OK, fmt.Sprintf("%s: %d of %d replicas Ready (caches synced)", id, d.Status.ReadyReplicas, want), "")
	r := versionSkew(ok, "globalmirror_build_info", controllerMetrics(ctx, cl))
	if len(ctl.Others) > 0 && r.Result == OK {
		// Releases with namespaces of their own: this run judges one.
		r = c.result(Warning, fmt.Sprintf("%s; %d more releases, each watching namespaces of its own (%s): the checks below judge %s alone",
			r.Detail, len(ctl.Others), strings.Join(ctl.Others, ", "), id),
			"judge another: --controller-selector with its app.kubernetes.io/instance=RELEASE added")
	}
	return r
}

// controllerMetrics are the metrics of the controller's running pods, by
// name, read through the API server's pod proxy; a pod that could not be
// read is left out (what it runs is then unsaid, not wrong).
func controllerMetrics(ctx context.Context, cl *Cluster) map[string]string {
	d := cl.Controller.Deployment
	_, port, err := net.SplitHostPort(cl.Controller.Options.MetricsAddr)
	if err != nil || d.Spec.Selector == nil || cl.Client == nil {
		return nil
	}
	pods, err := cl.Client.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return nil
	}
	running := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil })
	bodies, errs := podMetrics(ctx, cl, running, func(*corev1.Pod) string { return port })
	out := map[string]string{}
	for i, p := range running {
		if errs[i] == nil {
			out[p.Name] = string(bodies[i])
		}
	}
	return out
}

func checkLeader(ctx context.Context, c check, cl *Cluster, _ globals) Result {
	ctl := cl.Controller
	if ctl == nil || ctl.Deployment.Status.ReadyReplicas < 1 {
		return c.skipped("controller running")
	}
	if !ctl.Options.LeaderElect {
		if replicas := ptr.Deref(ctl.Deployment.Spec.Replicas, 1); replicas > 1 {
			return c.result(Error, fmt.Sprintf("leader election is off, with %d replicas: each writes the same global services against the others", replicas),
				"turn leader election on (the chart's default; --leader-elect=true), or run one replica")
		}
		return c.result(OK, "leader election is off: the one replica writes", "")
	}
	id := ctl.LeaseNamespace + "/" + ctl.Options.LeaderElectID
	lease, err := cl.Client.CoordinationV1().Leases(ctl.LeaseNamespace).Get(ctx, ctl.Options.LeaderElectID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return c.result(Error, "no Lease "+id, "the replicas cannot elect a leader: read their logs, and see the RBAC of the controller check")
	}
	if err != nil {
		return c.apiFailure("reading Lease "+id, err, "")
	}
	pods, err := cl.Client.CoreV1().Pods(ctl.Deployment.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(ctl.Deployment.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return c.apiFailure("listing the controller's pods", err, "")
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	var by string
	for _, p := range pods.Items {
		// client-go's leader election identity is the pod's name, "_", a UUID.
		if holder != "" && strings.HasPrefix(holder, p.Name+"_") && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			by = p.Name
		}
	}
	renewed := "never"
	fresh := false
	if t := lease.Spec.RenewTime; t != nil {
		age := time.Since(t.Time)
		renewed = age.Round(time.Second).String() + " ago"
		fresh = age <= ctl.Options.LeaseDuration
	}
	if by == "" || !fresh {
		if holder == "" {
			holder = "nobody"
		}
		return c.result(Error, fmt.Sprintf("Lease %s held by %s, renewed %s (lease duration %v); %d controller pods", id, holder, renewed, ctl.Options.LeaseDuration, len(pods.Items)),
			"no running replica leads, so nothing writes global services: a replica takes over once the Lease expires; if none does, read the replicas' logs")
	}
	return c.result(OK, fmt.Sprintf("%s holds Lease %s, renewed %s", by, id, renewed), "")
}
