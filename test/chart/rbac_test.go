package chart

import (
	"context"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/helmtest"
	"github.com/globalmirror/globalmirror/test/localkube"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// check is one API request and whether the identity may make it.
type check struct {
	name    string
	allowed bool
	do      func(context.Context, kubernetes.Interface) error
}

// checkAccess runs the checks as user, impersonated by the cluster admin: an
// allowed request must succeed, a denied one must fail with 403 Forbidden
// (any other error means the check proved nothing).
func checkAccess(t *testing.T, c *localkube.Cluster, user string, checks []check) {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range checks {
		err := ch.do(t.Context(), k)
		switch {
		case ch.allowed && err != nil:
			t.Errorf("%s: %s: want allowed, got %v", user, ch.name, err)
		case !ch.allowed && !apierrors.IsForbidden(err):
			t.Errorf("%s: %s: want 403 Forbidden, got %v", user, ch.name, err)
		}
	}
}

// controllerChecks are what the controller does in namespace ns, and what it
// must not do, as the identity whose Lease is named lease: the objects are
// created for real, changed and removed.
func controllerChecks(t *testing.T, c *localkube.Cluster, ns, lease string) []check {
	t.Helper()
	ctx := t.Context()
	// Objects the identity must not touch, made by the admin.
	victim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-victim-" + ns, Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	otherLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "someone-else-" + ns, Namespace: helmtest.Namespace}}
	if _, err := c.Client.CoordinationV1().Leases(helmtest.Namespace).Create(ctx, otherLease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	svcName := "probe-global"
	return append(reads(ns, true), []check{
		{"create a Service", true, createHeadless(ns, svcName)},
		{"get and update the Service", true, func(ctx context.Context, k kubernetes.Interface) error {
			svc, err := k.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			svc.Labels = map[string]string{"updated": "true"}
			return errOf(k.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}))
		}},
		{"create an EndpointSlice", true, func(ctx context.Context, k kubernetes.Interface) error {
			s := &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: svcName + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}},
			}
			return errOf(k.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}))
		}},
		{"update the EndpointSlice", true, func(ctx context.Context, k kubernetes.Interface) error {
			s, err := k.DiscoveryV1().EndpointSlices(ns).Get(ctx, svcName+"-abcde", metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.2"}})
			return errOf(k.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{}))
		}},
		{"delete the EndpointSlice", true, func(ctx context.Context, k kubernetes.Interface) error {
			return k.DiscoveryV1().EndpointSlices(ns).Delete(ctx, svcName+"-abcde", metav1.DeleteOptions{})
		}},
		{"delete the Service", true, func(ctx context.Context, k kubernetes.Interface) error {
			return k.CoreV1().Services(ns).Delete(ctx, svcName, metav1.DeleteOptions{})
		}},
		{"create and patch a core/v1 Event", true, func(ctx context.Context, k kubernetes.Interface) error {
			ev := &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: svcName + ".probe", Namespace: ns},
				InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: ns, Name: svcName, APIVersion: "v1"},
				Reason:         "Probe", Message: "RBAC probe", Type: corev1.EventTypeNormal,
				Source:         corev1.EventSource{Component: "globalmirror-controller"},
				FirstTimestamp: now, LastTimestamp: now, Count: 1,
			}
			if _, err := k.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
				return err
			}
			return errOf(k.CoreV1().Events(ns).Patch(ctx, ev.Name, types.StrategicMergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{}))
		}},
		{"create an events.k8s.io Event", true, func(ctx context.Context, k kubernetes.Interface) error {
			ev := &eventsv1.Event{
				ObjectMeta:          metav1.ObjectMeta{Name: svcName + ".probe2", Namespace: ns},
				EventTime:           metav1.NewMicroTime(time.Now()),
				ReportingController: "globalmirror.io/controller", ReportingInstance: "test",
				Action: "Probe", Reason: "Probe", Type: corev1.EventTypeNormal, Note: "RBAC probe",
				Regarding: corev1.ObjectReference{Kind: "Service", Namespace: ns, Name: svcName, APIVersion: "v1"},
			}
			return errOf(k.EventsV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}))
		}},
		{"create, get and update its Lease", true, func(ctx context.Context, k kubernetes.Interface) error {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: helmtest.Namespace}}
			if _, err := k.CoordinationV1().Leases(helmtest.Namespace).Create(ctx, l, metav1.CreateOptions{}); err != nil {
				return err
			}
			got, err := k.CoordinationV1().Leases(helmtest.Namespace).Get(ctx, lease, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Spec.HolderIdentity = new("rbac-probe")
			if _, err = k.CoordinationV1().Leases(helmtest.Namespace).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				return err
			}
			// The controller will create it anew; the admin clears it.
			return c.Client.CoordinationV1().Leases(helmtest.Namespace).Delete(ctx, lease, metav1.DeleteOptions{})
		}},
		{"update another Lease in the release namespace", false, func(ctx context.Context, k kubernetes.Interface) error {
			return errOf(k.CoordinationV1().Leases(helmtest.Namespace).Update(ctx, otherLease, metav1.UpdateOptions{}))
		}},
		{"create a Lease in another namespace", false, func(ctx context.Context, k kubernetes.Interface) error {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: ns}}
			return errOf(k.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{}))
		}},
		{"delete a Pod", false, func(ctx context.Context, k kubernetes.Interface) error {
			return k.CoreV1().Pods("default").Delete(ctx, victim.Name, metav1.DeleteOptions{})
		}},
		{"write a Secret", false, func(ctx context.Context, k kubernetes.Interface) error {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stolen", Namespace: ns}}
			return errOf(k.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}))
		}},
		{"read Secrets", false, func(ctx context.Context, k kubernetes.Interface) error {
			return errOf(k.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}))
		}},
		{"write a ConfigMap", false, func(ctx context.Context, k kubernetes.Interface) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nope", Namespace: ns}}
			return errOf(k.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}))
		}},
	}...)
}

// reads are the lists and watches of Services and EndpointSlices in ns
// ("": every namespace), which both components make. A watch is authorized
// when it opens, so the Watch call's error is the verdict.
func reads(ns string, allowed bool) []check {
	where := "in " + ns
	if ns == "" {
		where = "cluster-wide"
	}
	opened := func(w watch.Interface, err error) error {
		if err == nil {
			w.Stop()
		}
		return err
	}
	brief := metav1.ListOptions{TimeoutSeconds: new(int64(1))}
	return []check{
		{"list services " + where, allowed, func(ctx context.Context, k kubernetes.Interface) error {
			return errOf(k.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}))
		}},
		{"watch services " + where, allowed, func(ctx context.Context, k kubernetes.Interface) error {
			return opened(k.CoreV1().Services(ns).Watch(ctx, brief))
		}},
		{"list endpointslices " + where, allowed, func(ctx context.Context, k kubernetes.Interface) error {
			return errOf(k.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{}))
		}},
		{"watch endpointslices " + where, allowed, func(ctx context.Context, k kubernetes.Interface) error {
			return opened(k.DiscoveryV1().EndpointSlices(ns).Watch(ctx, brief))
		}},
	}
}

// errOf is the error of a call that returns a result and an error.
func errOf[T any](_ T, err error) error { return err }

// createHeadless creates a selector-less headless Service like the ones the
// controller writes.
func createHeadless(ns, name string) func(context.Context, kubernetes.Interface) error {
	return func(ctx context.Context, k kubernetes.Interface) error {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Ports:     []corev1.ServicePort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}},
		}}
		return errOf(k.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}))
	}
}
