package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUserOwnedGlobalIsLeftAlone(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	// The user's db-global predates everything.
	user := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.NS, Name: "db-global", Labels: map[string]string{"owner": "user"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "user"},
			Ports:    []corev1.ServicePort{{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := s.Source.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.NS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := s.Source.Client.CoreV1().Services(s.NS).Create(ctx, user, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, east, west := s.dbEverywhere("db", 1)
	_, _, _ = s.dbEverywhere("web", 1) // another base goes on meanwhile
	c := s.startController()

	webPorts := dbPorts
	s.expectGlobal("web-global", "web", webPorts, 1, func(ctx context.Context, s *world) (endpoint, error) {
		return endpoint{"web-0", "192.0.2.129", true}, nil
	}, func(ctx context.Context, s *world) (endpoint, error) {
		return remoteNamed(ctx, s, "web-0-east")
	}, func(ctx context.Context, s *world) (endpoint, error) {
		return remoteNamed(ctx, s, "web-0-west")
	})
	s.Eventually("conflict reported", func(ctx context.Context) string {
		got, err := s.warnings(ctx, "db-global")
		if err != nil {
			return err.Error()
		}
		if got["GlobalNameConflict"] != 1 {
			return fmt.Sprintf("warnings %v, want one GlobalNameConflict", got)
		}
		if n, err := metric(c, "globalmirror_name_conflicts"); err != nil || n != 1 {
			return fmt.Sprintf("name_conflicts = %v (%v)", n, err)
		}
		return ""
	})
	// Some more member changes later, the user's Service is exactly as it was
	// and has no slice of ours: the window fails at the first write to either.
	now, err := s.Source.Client.CoreV1().Services(s.NS).Get(ctx, "db-global", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != created.ResourceVersion || now.UID != created.UID || aggregate.WrittenByGlobalmirror(now.Labels) {
		t.Errorf("user's db-global changed: rv %s -> %s, labels %v", created.ResourceVersion, now.ResourceVersion, now.Labels)
	}
	writes := s.WatchWrites(metav1.ListOptions{FieldSelector: "metadata.name=db-global"},
		metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy + "," + discoveryv1.LabelServiceName + "=db-global"})
	ours, err := s.Source.Client.DiscoveryV1().EndpointSlices(s.NS).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy + "," + discoveryv1.LabelServiceName + "=db-global"})
	if err != nil || len(ours.Items) > 0 {
		t.Errorf("slices written for the user's db-global: %d (%v)", len(ours.Items), err)
	}
	conflicts := func() float64 {
		n, err := metric(c, "globalmirror_syncs_total", `result="conflict"`)
		must(t, err)
		return n
	}
	synced := conflicts()
	must(t, east.Scale(ctx, 2))
	s.Eventually("db synced after the scale", func(context.Context) string {
		if n := conflicts(); n == synced {
			return fmt.Sprintf("still %v syncs of db ending in the conflict", n)
		}
		return ""
	})
	s.Quiet("the user's db-global after the scale", 3*time.Second, func(ctx context.Context) string {
		if w := writes.Check(ctx); w != "" {
			return w
		}
		if got, err := s.warnings(ctx, "db-global"); err != nil || got["GlobalNameConflict"] != 1 {
			return fmt.Sprintf("conflict reported again on later syncs: %v (%v)", got, err)
		}
		return ""
	})
	writes.Stop()

	// The user deletes theirs: the global is created.
	must(t, s.Source.Client.CoreV1().Services(s.NS).Delete(ctx, "db-global", metav1.DeleteOptions{}))
	s.expectGlobal("db-global", "db", dbPorts, 1, local(src, 0, true),
		remote(east, 0, "east", true), remote(east, 1, "east", true), remote(west, 0, "west", true))
	s.Eventually("conflict cleared", func(ctx context.Context) string {
		if n, err := metric(c, "globalmirror_name_conflicts"); err != nil || n != 0 {
			return fmt.Sprintf("name_conflicts = %v (%v)", n, err)
		}
		return ""
	})
}

func remoteNamed(ctx context.Context, s *world, name string) (endpoint, error) {
	svc, err := s.Source.Client.CoreV1().Services(s.NS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return endpoint{}, err
	}
	return endpoint{name, svc.Spec.ClusterIP, true}, nil
}

// TestProblems builds members by hand, as a misbehaving mirror would: a
// cluster "far" (not linked, so the simulator leaves its mirror alone) whose
// pod db-0 becomes db-0-far, which a local endpoint already is, and whose
// other pod's name grows past 63 characters with the cluster suffix.
func TestProblems(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	if _, err := s.Source.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.NS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 60) // 60 + len("-far") > 63
	localSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.NS, Name: "db", Labels: exported},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: dbPorts},
	}
	farSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.NS, Name: "db-far",
			Labels:      map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "far"},
			Annotations: map[string]string{aggregate.AnnotationRemoteFQName: "db." + s.NS + ".svc.cluster.local"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: dbPorts},
	}
	for _, svc := range []*corev1.Service{localSvc, farSvc} {
		if _, err := s.Source.Client.CoreV1().Services(s.NS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	handSlice := func(svc *corev1.Service, eps map[string]string) *discoveryv1.EndpointSlice {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: s.NS, Name: svc.Name + "-hand", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "test.globalmirror.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: new("db"), Port: new(int32(5432)), Protocol: new(corev1.ProtocolTCP)}},
		}
		for k, v := range svc.Labels {
			sl.Labels[k] = v
		}
		for host, ip := range eps {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Hostname: new(host)})
		}
		return sl
	}
	for _, sl := range []*discoveryv1.EndpointSlice{
		handSlice(localSvc, map[string]string{"db-0-far": "192.0.2.1"}),
		handSlice(farSvc, map[string]string{"db-0": "198.51.100.1", long: "198.51.100.2"}),
	} {
		if _, err := s.Source.Client.DiscoveryV1().EndpointSlices(s.NS).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := s.startController()

	fixed := func(host, addr string) expect {
		return func(context.Context, *world) (endpoint, error) { return endpoint{host, addr, true}, nil }
	}
	// The losers keep their addresses, without names.
	s.expectGlobal("db-global", "db", dbPorts, 1, fixed("db-0-far", "192.0.2.1"), fixed("", "198.51.100.1"), fixed("", "198.51.100.2"))
	want := map[string]int{aggregate.ReasonHostnameCollision: 1, aggregate.ReasonInvalidHostname: 1}
	s.Eventually("problems reported", func(ctx context.Context) string {
		got, err := s.warnings(ctx, "db-global")
		if err != nil {
			return err.Error()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("warnings %v, want %v", got, want)
		}
		for reason := range want {
			if n, err := metric(c, "globalmirror_problems_total", `reason="`+reason+`"`); err != nil || n != 1 {
				return fmt.Sprintf("problems_total{%s} = %v (%v)", reason, n, err)
			}
		}
		return ""
	})

	// A change that leaves the problems as they are reports nothing new.
	far, err := s.Source.Client.CoreV1().Services(s.NS).Get(ctx, "db-far", metav1.GetOptions{})
	must(t, err)
	far.Spec.Ports = append(far.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9187, Protocol: corev1.ProtocolTCP})
	_, err = s.Source.Client.CoreV1().Services(s.NS).Update(ctx, far, metav1.UpdateOptions{})
	must(t, err)
	withMetrics := append(append([]corev1.ServicePort{}, dbPorts...), corev1.ServicePort{Name: "metrics", Port: 9187, Protocol: corev1.ProtocolTCP})
	s.expectGlobal("db-global", "db", withMetrics, 1, fixed("db-0-far", "192.0.2.1"), fixed("", "198.51.100.1"), fixed("", "198.51.100.2"))
	s.Quiet("problems after an unrelated change", 2*time.Second, func(ctx context.Context) string {
		if got, err := s.warnings(ctx, "db-global"); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("warnings %v (%v), want still %v", got, err, want)
		}
		for reason := range want {
			if n, err := metric(c, "globalmirror_problems_total", `reason="`+reason+`"`); err != nil || n != 1 {
				return fmt.Sprintf("problems_total{%s} = %v (%v), want still 1", reason, n, err)
			}
		}
		return ""
	})
}

// TestTamperingRepaired: edits and deletions of the controller's objects by
// someone else are undone.
func TestTamperingRepaired(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	src, east, west := s.dbEverywhere("db", 2)
	s.startController()
	want := []expect{local(src, 0, true), local(src, 1, true), remote(east, 0, "east", true), remote(east, 1, "east", true),
		remote(west, 0, "west", true), remote(west, 1, "west", true)}
	s.expectGlobal("db-global", "db", dbPorts, 1, want...)
	// client-go writes the Lease without a field manager: the API server
	// names it after the user agent, the same name.
	lease, err := s.Source.Client.CoordinationV1().Leases(s.NS).Get(ctx, "globalmirror", metav1.GetOptions{})
	must(t, err)
	must(t, writtenBy(lease, controller.FieldManager))

	slices := func() []discoveryv1.EndpointSlice {
		list, err := s.Source.Client.DiscoveryV1().EndpointSlices(s.NS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db-global"})
		must(t, err)
		return list.Items
	}
	// An endpoint removed and one marked not ready by hand.
	sl := slices()[0]
	sl.Endpoints = sl.Endpoints[1:]
	sl.Endpoints[0].Conditions.Ready = new(false)
	_, err = s.Source.Client.DiscoveryV1().EndpointSlices(s.NS).Update(ctx, &sl, metav1.UpdateOptions{FieldManager: "tamperer"})
	must(t, err)
	s.expectGlobal("db-global", "db", dbPorts, 1, want...)
	// The repair took the endpoints back: their writer is the controller.
	owners, err := fieldOwners(&slices()[0], "f:endpoints")
	must(t, err)
	if fmt.Sprint(owners) != fmt.Sprint([]string{controller.FieldManager}) {
		t.Errorf("repaired slice: endpoints owned by %q, want %q alone", owners, controller.FieldManager)
	}

	// The slice deleted.
	must(t, s.Source.Client.DiscoveryV1().EndpointSlices(s.NS).Delete(ctx, slices()[0].Name, metav1.DeleteOptions{}))
	s.expectGlobal("db-global", "db", dbPorts, 1, want...)

	// The Service given other ports. (Not a selector: Kubernetes' EndpointSlice
	// controller would write slices for it and not remove them when the
	// selector goes.)
	svc, err := s.Source.Client.CoreV1().Services(s.NS).Get(ctx, "db-global", metav1.GetOptions{})
	must(t, err)
	svc.Spec.Ports = []corev1.ServicePort{{Name: "other", Port: 1, Protocol: corev1.ProtocolTCP}}
	_, err = s.Source.Client.CoreV1().Services(s.NS).Update(ctx, svc, metav1.UpdateOptions{FieldManager: "tamperer"})
	must(t, err)
	s.expectGlobal("db-global", "db", dbPorts, 1, want...)
	svc, err = s.Source.Client.CoreV1().Services(s.NS).Get(ctx, "db-global", metav1.GetOptions{})
	must(t, err)
	owners, err = fieldOwners(svc, "f:spec", "f:ports")
	must(t, err)
	if fmt.Sprint(owners) != fmt.Sprint([]string{controller.FieldManager}) {
		t.Errorf("repaired Service: ports owned by %q, want %q alone", owners, controller.FieldManager)
	}

	// The Service deleted: recreated, with slices owned by the new one.
	must(t, s.Source.Client.CoreV1().Services(s.NS).Delete(ctx, "db-global", metav1.DeleteOptions{}))
	s.expectGlobal("db-global", "db", dbPorts, 1, want...)
}
