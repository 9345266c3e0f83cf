package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/globalmirror/globalmirror/test/workload"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// convergeTimeout bounds every wait for the controller (the worlds'
// Timeout): generous, since the clusters and every test share two cores.
const convergeTimeout = 90 * time.Second

// endpoint is one expected endpoint of a global service.
type endpoint struct {
	host, addr string
	ready      bool
}

func (e endpoint) String() string {
	r := "ready"
	if !e.ready {
		r = "not-ready"
	}
	return fmt.Sprintf("%s=%s(%s)", e.host, e.addr, r)
}

// local is the expected endpoint of a local workload's pod: its own address.
func local(w *workload.Workload, ord int, ready bool) func(context.Context, *world) (endpoint, error) {
	return func(context.Context, *world) (endpoint, error) {
		ips, err := w.PodIPs(ord)
		if err != nil {
			return endpoint{}, err
		}
		return endpoint{fmt.Sprintf("%s-%d", w.Name, ord), ips[0], ready}, nil
	}
}

// remote is the expected endpoint of a mirrored pod: named <pod>-<cluster>,
// at the ClusterIP of Linkerd's endpoint mirror Service of the same name.
func remote(w *workload.Workload, ord int, cluster string, ready bool) func(context.Context, *world) (endpoint, error) {
	return func(ctx context.Context, s *world) (endpoint, error) {
		name := fmt.Sprintf("%s-%d-%s", w.Name, ord, cluster)
		svc, err := s.Source.Client.CoreV1().Services(s.NS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return endpoint{}, fmt.Errorf("endpoint mirror %s: %w", name, err)
		}
		return endpoint{name, svc.Spec.ClusterIP, ready}, nil
	}
}

type expect = func(context.Context, *world) (endpoint, error)

// all expands expectations for ordinals [0, n) of one member.
func all(n int, one func(ord int) expect) []expect {
	var out []expect
	for i := range n {
		out = append(out, one(i))
	}
	return out
}

// expectGlobal waits until global `name` holds exactly the expected
// endpoints, with the right Service, labels and owners, in at most maxSlices
// slices (0: any number).
func (s *world) expectGlobal(name, base string, ports []corev1.ServicePort, maxSlices int, want ...expect) {
	s.t.Helper()
	s.Eventually(name+" converges", func(ctx context.Context) string {
		var wantEPs []string
		for _, w := range want {
			ep, err := w(ctx, s)
			if err != nil {
				return err.Error()
			}
			wantEPs = append(wantEPs, ep.String())
		}
		sort.Strings(wantEPs)
		got, slices, err := s.globalState(ctx, name, base, ports)
		if err != nil {
			return err.Error()
		}
		if maxSlices > 0 && slices > maxSlices {
			return fmt.Sprintf("%d slices, want at most %d", slices, maxSlices)
		}
		if g, w := strings.Join(got, " "), strings.Join(wantEPs, " "); g != w {
			return fmt.Sprintf("endpoints\n got: %s\nwant: %s", g, w)
		}
		return ""
	})
}

// globalState reads the global Service and its slices and checks everything
// but the endpoints, which it returns sorted, with the number of slices.
func (s *world) globalState(ctx context.Context, name, base string, ports []corev1.ServicePort) ([]string, int, error) {
	svc, err := s.Source.Client.CoreV1().Services(s.NS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, 0, err
	}
	if !aggregate.WrittenByGlobalmirror(svc.Labels) || svc.Labels[aggregate.LabelBase] != base {
		return nil, 0, fmt.Errorf("service labels %v", svc.Labels)
	}
	if err := writtenBy(svc, controller.FieldManager); err != nil {
		return nil, 0, err
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Selector) > 0 {
		return nil, 0, fmt.Errorf("service is not headless without selector: %+v", svc.Spec)
	}
	if got, want := portsString(svc.Spec.Ports), portsString(ports); got != want {
		return nil, 0, fmt.Errorf("service ports %s, want %s", got, want)
	}
	list, err := s.Source.Client.DiscoveryV1().EndpointSlices(s.NS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return nil, 0, err
	}
	var eps []string
	for _, sl := range list.Items {
		if sl.Labels[discoveryv1.LabelManagedBy] != aggregate.EndpointSliceManagedBy || !aggregate.WrittenByGlobalmirror(sl.Labels) || sl.Labels[aggregate.LabelBase] != base {
			return nil, 0, fmt.Errorf("slice %s labels %v", sl.Name, sl.Labels)
		}
		if err := writtenBy(&sl, controller.FieldManager); err != nil {
			return nil, 0, err
		}
		if len(sl.OwnerReferences) != 1 || sl.OwnerReferences[0].UID != svc.UID || sl.OwnerReferences[0].Controller == nil || !*sl.OwnerReferences[0].Controller {
			return nil, 0, fmt.Errorf("slice %s owners %v", sl.Name, sl.OwnerReferences)
		}
		if !strings.HasPrefix(sl.Name, name+"-") {
			return nil, 0, fmt.Errorf("slice %s not named after %s", sl.Name, name)
		}
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready == nil {
				return nil, 0, fmt.Errorf("slice %s: readiness not explicit", sl.Name)
			}
			if e.TargetRef != nil {
				return nil, 0, fmt.Errorf("slice %s: targetRef %v", sl.Name, e.TargetRef)
			}
			host := ""
			if e.Hostname != nil {
				host = *e.Hostname
			}
			eps = append(eps, endpoint{host, e.Addresses[0], *e.Conditions.Ready}.String())
		}
	}
	sort.Strings(eps)
	return eps, len(list.Items), nil
}

// writtenBy says whether manager is among the writers o's managedFields
// name (kubectl get --show-managed-fields).
func writtenBy(o metav1.Object, manager string) error {
	var managers []string
	for _, f := range o.GetManagedFields() {
		if f.Manager == manager {
			return nil
		}
		managers = append(managers, f.Manager)
	}
	return fmt.Errorf("%s: managed fields of %q, none by %q", o.GetName(), managers, manager)
}

// fieldOwners lists the managers that own the field at path (such as
// "f:spec", "f:ports") of o, or a field below it.
func fieldOwners(o metav1.Object, path ...string) ([]string, error) {
	var out []string
	for _, f := range o.GetManagedFields() {
		if f.FieldsV1 == nil {
			continue
		}
		var node any
		if err := json.Unmarshal(f.FieldsV1.GetRawBytes(), &node); err != nil {
			return nil, fmt.Errorf("%s: managed fields of %s: %w", o.GetName(), f.Manager, err)
		}
		for _, p := range path {
			m, _ := node.(map[string]any)
			node = m[p]
		}
		if node != nil {
			out = append(out, f.Manager)
		}
	}
	return out, nil
}

func portsString(ports []corev1.ServicePort) string {
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// expectNoGlobal waits until neither the global Service nor a slice of it exists.
func (s *world) expectNoGlobal(name string) {
	s.t.Helper()
	s.Eventually(name+" deleted", func(ctx context.Context) string {
		_, err := s.Source.Client.CoreV1().Services(s.NS).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Sprintf("service still there (%v)", err)
		}
		list, err := s.Source.Client.DiscoveryV1().EndpointSlices(s.NS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return err.Error()
		}
		if len(list.Items) > 0 {
			return fmt.Sprintf("%d slices left", len(list.Items))
		}
		return ""
	})
}

// resourceVersions of the global Service and its slices, for detecting writes.
func (s *world) resourceVersions(name string) string {
	s.t.Helper()
	ctx := s.t.Context()
	svc, err := s.Source.Client.CoreV1().Services(s.NS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	list, err := s.Source.Client.DiscoveryV1().EndpointSlices(s.NS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		s.t.Fatal(err)
	}
	out := []string{"service/" + svc.Name + "@" + svc.ResourceVersion}
	for _, sl := range list.Items {
		out = append(out, "slice/"+sl.Name+"@"+sl.ResourceVersion)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// metric sums the samples of a metric family whose labels contain every
// given name="value" pair.
func metric(c *run.Controller, family string, labelPairs ...string) (float64, error) {
	return run.MetricSum(c.BaseURL+"/metrics", family, labelPairs...)
}

// writes is the number of writes the controller made to global objects.
func (s *world) writes(c *run.Controller) float64 {
	s.t.Helper()
	n, err := metric(c, "globalmirror_api_writes_total")
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// expectWrites checks that the controller made exactly n writes since it
// had made `since`: it waits for the n-th, then for a second fails on the
// first straggler.
func (s *world) expectWrites(c *run.Controller, since float64, n float64) {
	s.t.Helper()
	s.Eventually(fmt.Sprintf("%v writes", n), func(context.Context) string {
		if got := s.writes(c) - since; got < n {
			return fmt.Sprintf("%v writes", got)
		}
		return ""
	})
	s.Quiet(fmt.Sprintf("no write beyond %v", n), time.Second, s.noWrites(c, since+n, nil))
}

// managed selects globalmirror's Services and EndpointSlices.
var managed = metav1.ListOptions{LabelSelector: aggregate.LabelManagedBy + "=" + aggregate.ManagedBy}

// noWrites is a check for a quiet window: it reports the first write of c
// beyond the `since` it had made, and the first write api (if not nil)
// saw.
func (s *world) noWrites(c *run.Controller, since float64, api *scenario.Writes) func(context.Context) string {
	return func(ctx context.Context) string {
		if api != nil {
			if w := api.Check(ctx); w != "" {
				return w
			}
		}
		n, err := metric(c, "globalmirror_api_writes_total")
		if err != nil {
			return err.Error()
		}
		if n != since {
			return fmt.Sprintf("the controller counted %v more writes", n-since)
		}
		return ""
	}
}

// settle waits until the controller has not written for window and returns
// its write count then.
func (s *world) settle(c *run.Controller, window time.Duration) float64 {
	s.t.Helper()
	n, err := await.Settle(s.t.Context(), window, s.Timeout, s.Interval, func(context.Context) (float64, string, error) {
		n, err := metric(c, "globalmirror_api_writes_total")
		return n, "", err
	})
	if err != nil {
		s.t.Fatalf("the controller kept writing: %v", err)
	}
	return n
}

// warnings counts the Warning events on object name by reason.
func (s *world) warnings(ctx context.Context, name string) (map[string]int, error) {
	list, err := s.Source.Client.CoreV1().Events(s.NS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning {
			out[e.Reason] += int(max(e.Count, 1))
		}
	}
	return out, nil
}

var dbPorts = []corev1.ServicePort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}}
