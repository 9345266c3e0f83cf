// Package workload simulates StatefulSet-like workloads on clusters that run no
// kubelet: a headless Service and pods name-0..name-N-1 with hostname and
// subdomain, bound to a Node, whose status (Running, pod IPs, Ready) is written
// through the status subresource as a kubelet would. The cluster's real
// kube-controller-manager then writes Endpoints and EndpointSlices with
// hostnames, exactly as for real pods.
package workload

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// ExportedLabel is the label Linkerd's service mirror selects exported
// services by (its default selector).
const ExportedLabel = "mirror.linkerd.io/exported"

// FieldManager names this package's writes.
const FieldManager = "workload-simulator"

// Options describe a workload. The zero value is a PostgreSQL-like IPv4
// workload on 192.0.2.0/24 that is not exported.
type Options struct {
	// Ports of the Service and the pods' container; default one TCP port
	// 5432 named "db".
	Ports []corev1.ServicePort
	// Labels are added to the Service (e.g. ExportedLabel: "true") once its
	// Endpoints list every pod ready, so that a mirror sees the whole
	// workload at once. The pods and the Service's selector use app=<name>.
	Labels map[string]string
	// IPv4 is the prefix pod IPv4 addresses come from: pod N gets the
	// (N+1)th address. Default 192.0.2.0/24. Give each cluster its own
	// documentation prefix (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24)
	// so that addresses never repeat across clusters.
	IPv4 netip.Prefix
	// IPv6, when valid, makes pods dual-stack (use 2001:db8::/32
	// subprefixes) and the Service PreferDualStack.
	IPv6 netip.Prefix
}

// image is the pods' container image, only data.
const image = "postgres:18"

// Workload is a created workload. Scale, SetReady and Delete act on the
// cluster, so one Workload value may be used from one test at a time.
type Workload struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	opts      Options
	node      string // the pods are bound to: the first Node by name
}

// Create makes the namespace if needed, the headless Service and `replicas`
// Ready pods, waits until the Service's Endpoints list them all, then labels
// the Service with opts.Labels.
func Create(ctx context.Context, client kubernetes.Interface, ns, name string, replicas int, opts Options) (*Workload, error) {
	w := &Workload{Client: client, Namespace: ns, Name: name, opts: opts}
	if err := w.defaults(ctx); err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, client, ns); err != nil {
		return nil, err
	}
	svc, err := client.CoreV1().Services(ns).Create(ctx, w.service(), metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("workload %s/%s: service: %w", ns, name, err)
	}
	if err := w.Scale(ctx, replicas); err != nil {
		return nil, err
	}
	if len(w.opts.Labels) == 0 {
		return w, nil
	}
	if err := w.waitEndpoints(ctx, replicas); err != nil {
		return nil, err
	}
	svc.Labels = maps.Clone(w.opts.Labels)
	if _, err := client.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return nil, fmt.Errorf("workload %s/%s: label service: %w", ns, name, err)
	}
	return w, nil
}

// waitEndpoints waits until the Service's Endpoints have n ready addresses.
func (w *Workload) waitEndpoints(ctx context.Context, n int) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		eps, err := w.Client.CoreV1().Endpoints(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := 0
		for _, s := range eps.Subsets {
			ready += len(s.Addresses)
		}
		last = fmt.Sprintf("%d of %d ready", ready, n)
		return ready == n, nil
	})
	if err != nil {
		return fmt.Errorf("workload %s/%s: endpoints: %w (%s)", w.Namespace, w.Name, err, last)
	}
	return nil
}

// Scale creates the missing pods up to replicas (Ready) and deletes those with
// an ordinal of replicas or more, at once, as a kubelet confirming would.
func (w *Workload) Scale(ctx context.Context, replicas int) error {
	pods, err := w.pods(ctx)
	if err != nil {
		return err
	}
	have := map[int]bool{}
	for _, p := range pods {
		ord, _ := ordinal(w.Name, p.Name)
		if ord >= replicas {
			if err := w.deletePod(ctx, p.Name); err != nil {
				return err
			}
			continue
		}
		have[ord] = true
	}
	if len(have) < replicas {
		if err := waitServiceAccount(ctx, w.Client, w.Namespace); err != nil {
			return err
		}
	}
	for ord := range replicas {
		if have[ord] {
			continue
		}
		if err := w.createPod(ctx, ord); err != nil {
			return err
		}
	}
	return nil
}

// SetReady sets the Ready condition of pod (e.g. "db-1").
func (w *Workload) SetReady(ctx context.Context, pod string, ready bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := w.Client.CoreV1().Pods(w.Namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		setCondition(p, corev1.PodReady, ready)
		setCondition(p, corev1.ContainersReady, ready)
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = ready
		}
		_, err = w.Client.CoreV1().Pods(w.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
}

// Annotate sets one annotation on the Service and changes nothing else, as
// Helm, Argo CD's tracking and many operators do on every sync.
func (w *Workload) Annotate(ctx context.Context, key, value string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return err
	}
	_, err = w.Client.CoreV1().Services(w.Namespace).Patch(ctx, w.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Delete deletes the Service and the pods.
func (w *Workload) Delete(ctx context.Context) error {
	err := w.Client.CoreV1().Services(w.Namespace).Delete(ctx, w.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return w.Scale(ctx, 0)
}

// PodIPs returns the addresses pod ordinal gets, IPv4 first.
func (w *Workload) PodIPs(ordinal int) ([]string, error) {
	var ips []string
	for _, prefix := range []netip.Prefix{w.opts.IPv4, w.opts.IPv6} {
		if !prefix.IsValid() {
			continue
		}
		addr := prefix.Masked().Addr()
		for range ordinal + 1 {
			addr = addr.Next()
		}
		if !prefix.Contains(addr) {
			return nil, fmt.Errorf("workload %s: pod %d does not fit in %s", w.Name, ordinal, prefix)
		}
		ips = append(ips, addr.String())
	}
	return ips, nil
}

func (w *Workload) defaults(ctx context.Context) error {
	if len(w.opts.Ports) == 0 {
		w.opts.Ports = []corev1.ServicePort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}}
	}
	if !w.opts.IPv4.IsValid() {
		w.opts.IPv4 = netip.MustParsePrefix("192.0.2.0/24")
	}
	if !w.opts.IPv4.Addr().Is4() || (w.opts.IPv6.IsValid() && !w.opts.IPv6.Addr().Is6()) {
		return fmt.Errorf("workload %s: IPv4 %s / IPv6 %s of the wrong family", w.Name, w.opts.IPv4, w.opts.IPv6)
	}
	nodes, err := w.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(nodes.Items) == 0 {
		return errors.New("workload: the cluster has no Node to bind pods to")
	}
	w.node = slices.MinFunc(nodes.Items, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) }).Name
	return nil
}

func (w *Workload) selector() map[string]string { return map[string]string{"app": w.Name} }

func (w *Workload) service() *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  w.selector(),
			Ports:     w.opts.Ports,
		},
	}
	if w.opts.IPv6.IsValid() {
		policy := corev1.IPFamilyPolicyPreferDualStack
		svc.Spec.IPFamilyPolicy = &policy
	}
	return svc
}

func (w *Workload) pods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := w.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(w.selector()).String(),
	})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
		_, ok := ordinal(w.Name, p.Name)
		return !ok
	}), nil
}

func (w *Workload) createPod(ctx context.Context, ord int) error {
	ips, err := w.PodIPs(ord)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%d", w.Name, ord)
	var ports []corev1.ContainerPort
	for _, p := range w.opts.Ports {
		ports = append(ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: p.Protocol})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace, Labels: w.selector()},
		Spec: corev1.PodSpec{
			Hostname:   name,
			Subdomain:  w.Name,
			NodeName:   w.node,
			Containers: []corev1.Container{{Name: "main", Image: image, Ports: ports}},
		},
	}
	created, err := w.Client.CoreV1().Pods(w.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("workload: pod %s/%s: %w", w.Namespace, name, err)
	}

	now := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: &now,
		PodIP:     ips[0],
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "main", Image: image, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	for _, ip := range ips {
		created.Status.PodIPs = append(created.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		setCondition(created, c, true)
	}
	if _, err := w.Client.CoreV1().Pods(w.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("workload: pod %s/%s status: %w", w.Namespace, name, err)
	}
	return nil
}

// deletePod deletes at once: with no kubelet to confirm, a graceful deletion
// would never finish.
func (w *Workload) deletePod(ctx context.Context, name string) error {
	err := w.Client.CoreV1().Pods(w.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func setCondition(p *corev1.Pod, t corev1.PodConditionType, ok bool) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == t {
			if c.Status != status {
				c.Status, c.LastTransitionTime = status, metav1.Now()
			}
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()})
}

// ordinal parses the N of <name>-N.
func ordinal(name, pod string) (int, bool) {
	rest, ok := strings.CutPrefix(pod, name+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == rest
}

func ensureNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("workload: namespace %s: %w", ns, err)
	}
	return nil
}

// waitServiceAccount waits for the namespace's `default` ServiceAccount: the
// ServiceAccount admission plugin rejects pods until the controller manager
// has created it, moments after the namespace.
func waitServiceAccount(ctx context.Context, client kubernetes.Interface, ns string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("workload: ServiceAccount %s/default: %w (last: %v)", ns, err, last)
	}
	return nil
}
