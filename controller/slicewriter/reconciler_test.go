package slicewriter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/metrics"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	endpointsliceutil "k8s.io/endpointslice/util"
)

var (
	tcp80  = []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(80)), Protocol: new(corev1.ProtocolTCP)}}
	tcp443 = []discoveryv1.EndpointPort{{Name: new("https"), Port: new(int32(443)), Protocol: new(corev1.ProtocolTCP)}}
	global = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-global", UID: "svc-uid"}}
)

// testManager is the field manager the tests' reconcilers write as.
const testManager = "slicewriter-test"

// harness is a fake API server whose slices get names and generations the way
// the real one gives them, and whose list is the "feed's index".
type harness struct {
	t       *testing.T
	client  *fake.Clientset
	tracker *endpointsliceutil.EndpointSliceTracker
	rec     *Reconciler
}

func newHarness(t *testing.T, limit int) *harness {
	client := fake.NewClientset()
	n, gen := 0, int64(0)
	client.PrependReactor("*", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() != "create" && a.GetVerb() != "update" {
			return false, nil, nil
		}
		s := a.(k8stesting.CreateAction).GetObject().(*discoveryv1.EndpointSlice) // updates have the same shape
		if s.Name == "" {
			n++
			s.Name = fmt.Sprintf("%s%d", s.GenerateName, n)
		}
		// UIDs derive from names, so an update keeps its object's UID.
		s.UID = k8stypes.UID("uid-" + s.Name)
		gen++
		s.Generation = gen
		return false, nil, nil
	})
	tr := endpointsliceutil.NewEndpointSliceTracker()
	return &harness{t: t, client: client, tracker: tr, rec: NewReconciler(client, testManager, tr, metrics.New(), limit, nil)}
}

// cache lists the slices as an up-to-date feed would have them.
func (h *harness) cache() []*discoveryv1.EndpointSlice {
	h.t.Helper()
	list, err := h.client.DiscoveryV1().EndpointSlices("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*discoveryv1.EndpointSlice
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// sync reconciles view against the cache and returns the write actions,
// each of which must name the reconciler's field manager.
func (h *harness) sync(view aggregate.View) []string {
	h.t.Helper()
	existing := h.cache()
	h.client.ClearActions()
	if _, err := h.rec.Reconcile(context.Background(), global, view, existing); err != nil {
		h.t.Fatal(err)
	}
	for _, a := range h.client.Actions() {
		manager := testManager
		switch a := a.(type) {
		case k8stesting.CreateActionImpl:
			manager = a.CreateOptions.FieldManager
		case k8stesting.UpdateActionImpl:
			manager = a.UpdateOptions.FieldManager
		}
		if manager != testManager {
			h.t.Errorf("%s %s: field manager %q, want %q", a.GetVerb(), a.GetResource().Resource, manager, testManager)
		}
	}
	return writes(h.client)
}

func writes(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		if v := a.GetVerb(); v == "create" || v == "update" || v == "delete" {
			out = append(out, v)
		}
	}
	return out
}

func ep(ip, host string, ready bool, ports []discoveryv1.EndpointPort) aggregate.Endpoint {
	at := discoveryv1.AddressTypeIPv4
	if slices.Contains([]byte(ip), ':') {
		at = discoveryv1.AddressTypeIPv6
	}
	return aggregate.Endpoint{Addresses: []string{ip}, AddressType: at, Hostname: host, Ready: ready, Ports: ports,
		Source: &discoveryv1.Endpoint{Addresses: []string{ip}}}
}

func view(eps ...aggregate.Endpoint) aggregate.View {
	return aggregate.View{Namespace: "ns", Base: "db", Name: "db-global", Endpoints: eps}
}

func many(n int, ports []discoveryv1.EndpointPort) []aggregate.Endpoint {
	var out []aggregate.Endpoint
	for i := range n {
		// Unique addresses: 192.0.2.1-250, then 198.51.100.x.
		addr := fmt.Sprintf("192.0.2.%d", i+1)
		if i >= 250 {
			addr = fmt.Sprintf("198.51.100.%d", i-249)
		}
		out = append(out, ep(addr, fmt.Sprintf("db-%d", i), true, ports))
	}
	return out
}

func sizes(s []*discoveryv1.EndpointSlice) []int {
	var out []int
	for _, x := range s {
		out = append(out, len(x.Endpoints))
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

func TestReconcile(t *testing.T) {
	three := []aggregate.Endpoint{
		ep("192.0.2.1", "db-0", true, tcp80),
		ep("192.0.2.2", "db-0-east", true, tcp80),
		ep("192.0.2.3", "db-0-west", true, tcp80),
	}
	tests := []struct {
		name   string
		limit  int
		before aggregate.View // synced first, its writes ignored
		after  aggregate.View
		want   []string // write verbs of the second sync
		sizes  []int    // endpoints per slice at the end
	}{
		{name: "create", limit: 100, after: view(three...), want: []string{"create"}, sizes: []int{3}},
		{name: "no-op", limit: 100, before: view(three...), after: view(three...), sizes: []int{3}},
		{name: "one endpoint turns not ready", limit: 100, before: view(three...),
			after: view(three[0], ep("192.0.2.2", "db-0-east", false, tcp80), three[2]),
			want:  []string{"update"}, sizes: []int{3}},
		{name: "one endpoint added", limit: 100, before: view(three...),
			after: view(append(slices.Clone(three), ep("192.0.2.4", "db-1", true, tcp80))...),
			want:  []string{"update"}, sizes: []int{4}},
		{name: "one endpoint removed", limit: 100, before: view(three...), after: view(three[:2]...),
			want: []string{"update"}, sizes: []int{2}},
		{name: "hostname lost to a collision", limit: 100, before: view(three...),
			after: view(three[0], ep("192.0.2.2", "", true, tcp80), three[2]),
			want:  []string{"update"}, sizes: []int{3}},
		{name: "max per slice packing", limit: 100, after: view(many(250, tcp80)...),
			want: []string{"create", "create", "create"}, sizes: []int{100, 100, 50}},
		{name: "one added to full slices goes into the one with room", limit: 100, before: view(many(250, tcp80)...),
			after: view(append(many(250, tcp80), ep("198.51.100.1", "x", true, tcp80))...),
			want:  []string{"update"}, sizes: []int{100, 100, 51}},
		{name: "family and port split", limit: 100,
			after: view(three[0], ep("192.0.2.9", "a", true, tcp443), ep("2001:db8::1", "b", true, tcp80)),
			want:  []string{"create", "create", "create"}, sizes: []int{1, 1, 1}},
		{name: "all endpoints gone deletes the slices", limit: 100, before: view(many(150, tcp80)...), after: view(),
			want: []string{"delete", "delete"}},
		{name: "ports change rewrites the slice instead of delete and create", limit: 100, before: view(three...),
			after: view(ep("192.0.2.1", "db-0", true, tcp443), ep("192.0.2.2", "db-0-east", true, tcp443), ep("192.0.2.3", "db-0-west", true, tcp443)),
			want:  []string{"update"}, sizes: []int{3}},
		{name: "limit lowered splits", limit: 2, before: view(three...), after: view(three...),
			want: []string{"create", "update"}, sizes: []int{2, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 100)
			if len(tc.before.Endpoints) > 0 {
				h.sync(tc.before)
			}
			h.rec.limit = tc.limit
			if got := h.sync(tc.after); !slices.Equal(got, tc.want) {
				t.Errorf("writes = %v, want %v", got, tc.want)
			}
			final := h.cache()
			if got := sizes(final); !slices.Equal(got, tc.sizes) {
				t.Errorf("slice sizes = %v, want %v", got, tc.sizes)
			}
			assertHas(t, final, tc.after)
			if again := h.sync(tc.after); len(again) != 0 {
				t.Errorf("second sync of the same view wrote %v, want nothing", again)
			}
		})
	}
}

// assertHas checks that slices have exactly the view's endpoints with the
// right metadata.
func assertHas(t *testing.T, got []*discoveryv1.EndpointSlice, v aggregate.View) {
	t.Helper()
	type row struct {
		at          discoveryv1.AddressType
		addr, host  string
		ready       bool
		ports       string
		targetRefed bool
	}
	var have, want []row
	for _, s := range got {
		if s.Labels[discoveryv1.LabelServiceName] != "db-global" || !Owns(s) || s.Labels[aggregate.LabelBase] != "db" {
			t.Errorf("slice %s labels = %v", s.Name, s.Labels)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != global.UID || !*s.OwnerReferences[0].Controller {
			t.Errorf("slice %s owners = %v", s.Name, s.OwnerReferences)
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil {
				t.Errorf("slice %s: readiness not explicit", s.Name)
				continue
			}
			have = append(have, row{s.AddressType, e.Addresses[0], deref(e.Hostname), *e.Conditions.Ready, fmt.Sprint(*s.Ports[0].Port), e.TargetRef != nil})
		}
	}
	seen := map[string]int{}
	for _, e := range v.Endpoints {
		k := e.Addresses[0] + "/" + e.Hostname
		if i, dup := seen[k]; dup {
			want[i].ready = want[i].ready || e.Ready
			continue
		}
		seen[k] = len(want)
		want = append(want, row{e.AddressType, e.Addresses[0], e.Hostname, e.Ready, fmt.Sprint(*e.Ports[0].Port), false})
	}
	less := func(r []row) func(i, j int) bool {
		return func(i, j int) bool { return r[i].addr+r[i].host < r[j].addr+r[j].host }
	}
	sort.Slice(have, less(have))
	sort.Slice(want, less(want))
	if !slices.Equal(have, want) {
		t.Errorf("slices have\n%v\nwant\n%v", have, want)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestReconcileWritesTriggerTimeOnlyWithOtherChanges(t *testing.T) {
	h := newHarness(t, 100)
	v := view(ep("192.0.2.1", "db-0", true, tcp80))
	v.TriggerTime = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	h.sync(v)
	if got := h.cache()[0].Annotations[corev1.EndpointsLastChangeTriggerTime]; got != "2026-01-02T03:04:05.000000006Z" {
		t.Errorf("trigger time annotation = %q", got)
	}
	v.TriggerTime = v.TriggerTime.Add(time.Second)
	if got := h.sync(v); len(got) != 0 {
		t.Errorf("a new trigger time alone wrote %v", got)
	}
}

func TestReconcileRepairsTamperingAndIgnoresForeignSlices(t *testing.T) {
	h := newHarness(t, 100)
	v := view(ep("192.0.2.1", "db-0", true, tcp80))
	h.sync(v)
	s := h.cache()[0].DeepCopy()
	s.Labels["extra"] = "x"
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.99"}})
	if _, err := h.client.DiscoveryV1().EndpointSlices("ns").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "user", Labels: map[string]string{discoveryv1.LabelServiceName: "db-global"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.50"}}},
	}
	if _, err := h.client.DiscoveryV1().EndpointSlices("ns").Create(context.Background(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.sync(v); !slices.Equal(got, []string{"update"}) {
		t.Errorf("writes = %v, want one update", got)
	}
	managed := Owned(h.cache())
	assertHas(t, managed, v)
	if _, err := h.client.DiscoveryV1().EndpointSlices("ns").Get(context.Background(), "user", metav1.GetOptions{}); err != nil {
		t.Errorf("foreign slice touched: %v", err)
	}
}

func TestReconcileStaleCache(t *testing.T) {
	h := newHarness(t, 100)
	h.sync(view(ep("192.0.2.1", "db-0", true, tcp80)))
	old := h.cache()
	h.sync(view(ep("192.0.2.1", "db-0", false, tcp80)))

	// The feed has not seen the update yet: refuse to plan on it.
	h.client.ClearActions()
	_, err := h.rec.Reconcile(context.Background(), global, view(ep("192.0.2.1", "db-0", true, tcp80)), old)
	if !errors.Is(err, ErrStale) {
		t.Fatalf("err = %v, want ErrStale", err)
	}
	if got := writes(h.client); len(got) != 0 {
		t.Errorf("stale sync wrote %v", got)
	}
	// Nor on a cache that misses a slice we created.
	_, err = h.rec.Reconcile(context.Background(), global, view(ep("192.0.2.1", "db-0", true, tcp80)), nil)
	if !errors.Is(err, ErrStale) {
		t.Fatalf("err = %v, want ErrStale for a missing slice", err)
	}
}

func TestDeleteAll(t *testing.T) {
	h := newHarness(t, 100)
	h.sync(view(many(120, tcp80)...))
	h.client.ClearActions()
	n, err := h.rec.DeleteAll(context.Background(), "ns", "db-global", h.cache())
	if err != nil || n != 2 {
		t.Fatalf("DeleteAll = %d, %v", n, err)
	}
	if left := h.cache(); len(left) != 0 {
		t.Errorf("%d slices left", len(left))
	}
}

// Slices whose ports or addresses are written in another order (as an
// earlier release's hash order left them) hold the same endpoints: no
// write; a port told apart only by an absent name or protocol is another.
func TestReconcileKeysIgnoreOrderNotAbsence(t *testing.T) {
	h := newHarness(t, 100)
	ports := append(slices.Clone(tcp443), tcp80...)
	e := ep("10.0.0.1", "db-0", true, ports)
	e.Addresses = []string{"10.0.0.2", "10.0.0.1"}
	v := view(e, ep("10.0.0.3", "db-1", true, ports))
	if got := h.sync(v); !slices.Equal(got, []string{"create"}) {
		t.Fatalf("first sync: %v, want one create", got)
	}
	// Reordered in place, as another writer's order would leave them.
	s := h.cache()[0]
	slices.Reverse(s.Ports)
	for i := range s.Endpoints {
		slices.Reverse(s.Endpoints[i].Addresses)
	}
	if _, err := h.client.DiscoveryV1().EndpointSlices("ns").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.sync(v); len(got) != 0 {
		t.Errorf("the same endpoints and ports in another order: %v, want no write", got)
	}

	unnamed := []discoveryv1.EndpointPort{{Port: new(int32(80)), Protocol: new(corev1.ProtocolTCP)}}
	emptyName := []discoveryv1.EndpointPort{{Name: new(""), Port: new(int32(80)), Protocol: new(corev1.ProtocolTCP)}}
	a, _ := keyOf(discoveryv1.AddressTypeIPv4, unnamed)
	b, _ := keyOf(discoveryv1.AddressTypeIPv4, emptyName)
	c, _ := keyOf(discoveryv1.AddressTypeIPv4, append(slices.Clone(tcp80), tcp443...))
	d, _ := keyOf(discoveryv1.AddressTypeIPv4, ports)
	if a == b || c != d {
		t.Errorf("port keys: unnamed %q, named \"\" %q (want different); %q, %q (want equal)", a.ports, b.ports, c.ports, d.ports)
	}
}
