package controller

import (
	"context"
	"fmt"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/fakeapi"
	"github.com/globalmirror/globalmirror/test/fixture"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/metrics"
	"github.com/globalmirror/globalmirror/source"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// These tests run the whole controller against the fake clientset: feeds,
// queue, sync and reporting. The integration tests repeat the important cases
// against real API servers and kube-controller-managers.

type env struct {
	t        *testing.T
	client   *fake.Clientset
	events   *record.FakeRecorder
	metrics  *metrics.Metrics
	ctrl     *Controller
	cancel   context.CancelFunc
	sliceSeq atomic.Int64
}

func start(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	e := &env{t: t, client: fake.NewClientset(objs...), events: record.NewFakeRecorder(100), metrics: metrics.New()}
	// The fake does not name generateName objects nor give UIDs.
	e.client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.CreateAction).GetObject().(metav1.Object)
		if o.GetName() == "" {
			o.SetName(fmt.Sprintf("%s%d", o.GetGenerateName(), e.sliceSeq.Add(1)))
		}
		if o.GetUID() == "" {
			o.SetUID(types.UID("uid-" + o.GetName()))
		}
		return false, nil, nil
	})
	ctrl := newController(t, e.client, e.events, e.metrics)
	ctx, cancel := context.WithCancel(context.Background())
	e.ctrl, e.cancel = ctrl, cancel
	ctrl.Start(ctx)
	go func() { _ = ctrl.Run(ctx, 2) }()
	t.Cleanup(cancel)
	return e
}

// newController builds a Controller over feeds of client, as main does.
func newController(t *testing.T, client *fake.Clientset, events record.EventRecorder, m *metrics.Metrics) *Controller {
	t.Helper()
	src, err := source.New(source.Config{Client: client, APIs: fakeapi.For(client), Suffix: aggregate.DefaultSuffix,
		LocalSelector: labels.SelectorFromSet(labels.Set{aggregate.LabelExported: "true"})})
	if err != nil {
		t.Fatal(err)
	}
	owned, err := NewOwnedSlices(source.Config{Client: client, APIs: fakeapi.For(client)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Client: client, MaxEndpointsPerSlice: 100, Recorder: events, Metrics: m,
		Logger: slog.New(slog.DiscardHandler)}, src, owned)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pg is the port of the tests' members.
var pg = fixture.Port{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}

// mirror is Linkerd's headless mirror of name from cluster.
func mirror(name, cluster string) *corev1.Service {
	return fixture.HeadlessMirror("ns", name, cluster, pg)
}

// memberSlice is a slice of svc with one ready endpoint per host, address pair.
func memberSlice(svc *corev1.Service, hostsAndIPs ...string) *discoveryv1.EndpointSlice {
	var eps []fixture.Endpoint
	for i := 0; i+1 < len(hostsAndIPs); i += 2 {
		eps = append(eps, fixture.Ready(hostsAndIPs[i], hostsAndIPs[i+1]))
	}
	return fixture.Slice(svc, svc.Name+"-abc", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(pg), eps...)
}

// eventually waits up to 30 s for cond: the fake clientset's objects carry
// no resourceVersion, so each watch event ends a feed's watch and it lists
// again, backing off up to 10 s (15 s jittered) while watches keep ending.
func (e *env) eventually(what string, cond func() error) {
	e.t.Helper()
	if err := await.Poll(e.t.Context(), 30*time.Second, 20*time.Millisecond, func(context.Context) string {
		if err := cond(); err != nil {
			return err.Error()
		}
		return ""
	}); err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

func (e *env) globalEndpoints() (map[string]bool, error) {
	list, err := e.client.DiscoveryV1().EndpointSlices("ns").List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db-global"})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			out[*ep.Hostname+"="+ep.Addresses[0]] = *ep.Conditions.Ready
		}
	}
	return out, nil
}

func (e *env) writes() float64 {
	var n float64
	for _, r := range []string{"services", "endpointslices"} {
		for _, v := range []string{"create", "update", "delete"} {
			n += testutil.ToFloat64(e.metrics.APIWrites.WithLabelValues(r, v))
		}
	}
	return n
}

func (e *env) drainEvents() []string {
	var out []string
	for {
		select {
		case ev := <-e.events.Events:
			out = append(out, ev)
		case <-time.After(200 * time.Millisecond):
			return out
		}
	}
}

func TestGlobalFollowsMembers(t *testing.T) {
	east := mirror("db", "east")
	local := fixture.LocalService("ns", "db", pg)
	e := start(t, east, memberSlice(east, "db-0", "192.0.2.10", "db-1", "192.0.2.11"), local, memberSlice(local, "db-0", "192.0.2.1"))
	ctx := context.Background()

	e.eventually("global converges", func() error {
		svc, err := e.client.CoreV1().Services("ns").Get(ctx, "db-global", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !aggregate.WrittenByGlobalmirror(svc.Labels) || svc.Labels[aggregate.LabelBase] != "db" || svc.Spec.ClusterIP != "None" || len(svc.Spec.Ports) != 1 {
			return fmt.Errorf("global service %+v", svc)
		}
		got, err := e.globalEndpoints()
		if err != nil {
			return err
		}
		if want := "map[db-0-east=192.0.2.10:true db-0=192.0.2.1:true db-1-east=192.0.2.11:true]"; fmt.Sprint(got) != want {
			return fmt.Errorf("endpoints %v, want %s", got, want)
		}
		return nil
	})
	settled := e.writes()
	if settled != 2 {
		t.Errorf("convergence took %v writes, want 2 (service and one slice)", settled)
	}
	e.eventually("gauges", func() error {
		if g, n := testutil.ToFloat64(e.metrics.Globals), testutil.ToFloat64(e.metrics.Endpoints); g != 1 || n != 3 {
			return fmt.Errorf("globals = %v, endpoints = %v, want 1 and 3", g, n)
		}
		return nil
	})

	// Tampering with the global slice is repaired.
	list, _ := e.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db-global"})
	tampered := list.Items[0].DeepCopy()
	tampered.Endpoints = tampered.Endpoints[:1]
	tampered.Generation, tampered.ResourceVersion = 99, "99" // the fake counts neither
	if _, err := e.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, tampered, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("tampering repaired", func() error {
		got, err := e.globalEndpoints()
		if err == nil && len(got) != 3 {
			err = fmt.Errorf("endpoints %v", got)
		}
		return err
	})

	// The last headless mirror goes: the global goes.
	if err := e.client.CoreV1().Services("ns").Delete(ctx, east.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("global deleted", func() error {
		if _, err := e.client.CoreV1().Services("ns").Get(ctx, "db-global", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("global service still there (%v)", err)
		}
		if got, _ := e.globalEndpoints(); len(got) != 0 {
			return fmt.Errorf("slices left: %v", got)
		}
		return nil
	})
	e.eventually("gauges after delete", func() error {
		if g := testutil.ToFloat64(e.metrics.Globals); g != 0 {
			return fmt.Errorf("globals gauge = %v", g)
		}
		return nil
	})
}

func TestUserOwnedGlobalIsLeftAlone(t *testing.T) {
	east := mirror("db", "east")
	user := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-global", UID: "user", ResourceVersion: "7"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.9"}}
	other := mirror("web", "east")
	e := start(t, east, memberSlice(east, "db-0", "192.0.2.10"), user, other, memberSlice(other, "web-0", "192.0.2.20"))
	ctx := context.Background()

	// Other bases go on.
	e.eventually("web-global created", func() error {
		_, err := e.client.CoreV1().Services("ns").Get(ctx, "web-global", metav1.GetOptions{})
		return err
	})
	e.eventually("conflict reported", func() error {
		if testutil.ToFloat64(e.metrics.Conflicts) != 1 {
			return fmt.Errorf("conflicts gauge = %v", testutil.ToFloat64(e.metrics.Conflicts))
		}
		return nil
	})
	events := e.drainEvents()
	if len(events) != 1 || !strings.HasPrefix(events[0], "Warning GlobalNameConflict ") {
		t.Errorf("events = %q, want one GlobalNameConflict", events)
	}
	for _, a := range e.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" && a.GetResource().Resource == "services" {
			if n, ok := a.(interface{ GetName() string }); ok && n.GetName() == "db-global" {
				t.Errorf("wrote the user's service: %v", a)
			}
			if c, ok := a.(k8stesting.CreateAction); ok && c.GetObject().(metav1.Object).GetName() == "db-global" {
				t.Errorf("created over the user's service: %v", a)
			}
		}
	}
	// A resync of the base does not repeat the event.
	if res, err := e.ctrl.sync(ctx, baseKey("db")); res != metrics.ResultConflict || err != nil {
		t.Errorf("sync of a base whose name a user owns: %s, %v", res, err)
	}
	if again := e.drainEvents(); len(again) != 0 {
		t.Errorf("conflict reported again: %q", again)
	}

	// Once the user's Service goes, the global is created.
	if err := e.client.CoreV1().Services("ns").Delete(ctx, "db-global", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("db-global created after the user's went", func() error {
		svc, err := e.client.CoreV1().Services("ns").Get(ctx, "db-global", metav1.GetOptions{})
		if err == nil && !aggregate.WrittenByGlobalmirror(svc.Labels) {
			err = fmt.Errorf("not ours: %v", svc.Labels)
		}
		return err
	})
	e.eventually("conflict cleared", func() error {
		if testutil.ToFloat64(e.metrics.Conflicts) != 0 {
			return fmt.Errorf("conflicts gauge = %v", testutil.ToFloat64(e.metrics.Conflicts))
		}
		return nil
	})
}

func TestProblemsReportedOnceWhenTheyChange(t *testing.T) {
	// East's db-0 becomes db-0-east, which a local pod already is: local wins.
	east := mirror("db", "east")
	local := fixture.LocalService("ns", "db", pg)
	e := start(t, east, memberSlice(east, "db-0", "192.0.2.10"), local, memberSlice(local, "db-0-east", "192.0.2.1"))
	e.eventually("problem counted", func() error {
		if n := testutil.ToFloat64(e.metrics.Problems.WithLabelValues(aggregate.ReasonHostnameCollision)); n != 1 {
			return fmt.Errorf("problems = %v", n)
		}
		return nil
	})
	events := e.drainEvents()
	if len(events) != 1 || !strings.HasPrefix(events[0], "Warning HostnameCollision ") {
		t.Errorf("events = %q", events)
	}
	if _, err := e.ctrl.sync(context.Background(), baseKey("db")); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(e.metrics.Problems.WithLabelValues(aggregate.ReasonHostnameCollision)); n != 1 {
		t.Errorf("problem counted again on an unchanged sync: %v", n)
	}
	if again := e.drainEvents(); len(again) != 0 {
		t.Errorf("events on an unchanged sync: %q", again)
	}
}

func TestSkippedObjectsCounted(t *testing.T) {
	bad := mirror("db", "east")
	delete(bad.Labels, aggregate.LabelClusterName)
	e := start(t, bad)
	e.eventually("skip counted", func() error {
		if n := testutil.ToFloat64(e.metrics.Skipped.WithLabelValues("Service", "MissingClusterName")); n != 1 {
			return fmt.Errorf("skipped = %v", n)
		}
		return nil
	})
}

func baseKey(b string) source.Key { return source.Key{Namespace: "ns", Base: b} }

func TestInvalidGlobalNameReportedOnce(t *testing.T) {
	long := mirror(strings.Repeat("a", 60), "east") // a-...-global would be 67 characters
	e := start(t, long, memberSlice(long, "a-0", "192.0.2.10"))
	e.eventually("problem counted", func() error {
		if n := testutil.ToFloat64(e.metrics.Problems.WithLabelValues(aggregate.ReasonInvalidName)); n != 1 {
			return fmt.Errorf("problems = %v", n)
		}
		return nil
	})
	if _, err := e.ctrl.sync(context.Background(), baseKey(strings.Repeat("a", 60))); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(e.metrics.Problems.WithLabelValues(aggregate.ReasonInvalidName)); n != 1 {
		t.Errorf("counted again: %v", n)
	}
	if w := e.writes(); w != 0 {
		t.Errorf("%v writes for a base without a valid global name", w)
	}
}

// ourGlobal is db's global Service and one of its slices, as this
// controller writes them.
func ourGlobal() (*corev1.Service, *discoveryv1.EndpointSlice) {
	return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-global", UID: "uid-db-global",
				Labels: map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: "db"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone},
		}, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-global-abc", UID: "uid-db-global-abc", Generation: 1,
				Labels: map[string]string{discoveryv1.LabelServiceName: "db-global", discoveryv1.LabelManagedBy: aggregate.EndpointSliceManagedBy,
					aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: "db"}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
}

// TestDeletionSentOnce: while the caches still show a global this controller
// has just deleted, another sync of its base sends no second DELETE (which
// would get 404 and be logged and counted twice). The feeds' watches
// never deliver here, so the caches stay as they were listed.
func TestDeletionSentOnce(t *testing.T) {
	global, globalSlice := ourGlobal()
	for _, tc := range []struct {
		name        string
		objs        []runtime.Object
		wantResults []string
	}{
		{"service only", []runtime.Object{global.DeepCopy()}, []string{metrics.ResultSuccess, metrics.ResultSuccess}},
		{"service and slice", []runtime.Object{global.DeepCopy(), globalSlice.DeepCopy()}, []string{metrics.ResultSuccess, metrics.ResultStale}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objs...)
			client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
				return true, watch.NewFake(), nil
			})
			m := metrics.New()
			c := newController(t, client, record.NewFakeRecorder(10), m)
			ctx := t.Context()
			c.Start(ctx)
			if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
				t.Fatal("caches did not sync")
			}
			key := source.Key{Namespace: "ns", Base: "db"}
			for i, want := range tc.wantResults {
				if got, _ := c.sync(ctx, key); got != want {
					t.Errorf("sync %d: %s, want %s", i+1, got, want)
				}
			}
			deletes := map[string]int{}
			for _, a := range client.Actions() {
				if a.GetVerb() == "delete" {
					deletes[a.GetResource().Resource]++
				}
			}
			wantDeletes := map[string]int{"services": 1}
			if len(tc.objs) > 1 {
				wantDeletes["endpointslices"] = 1
			}
			if !maps.Equal(deletes, wantDeletes) {
				t.Errorf("DELETEs sent: %v, want %v", deletes, wantDeletes)
			}
			if n := testutil.ToFloat64(m.APIWrites.WithLabelValues("services", "delete")); n != 1 {
				t.Errorf("api_writes_total{services,delete} = %v, want 1", n)
			}
		})
	}
}

// TestNativeNames: a local service annotated with include-mirrors gets its
// global's mirror endpoints as EndpointSlices of its own (owned by it,
// managed by globalmirror); the slices Kubernetes writes for its own pods
// are never touched; removing the annotation removes the extra slices.
func TestNativeNames(t *testing.T) {
	east := mirror("db", "east")
	local := fixture.LocalService("ns", "db", pg)
	local.Annotations = map[string]string{aggregate.AnnotationIncludeMirrors: "true"}
	kubeSlice := memberSlice(local, "db-0", "192.0.2.1")
	kubeSlice.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
	e := start(t, east, memberSlice(east, "db-0", "192.0.2.10", "db-0-east", "192.0.2.11"), local, kubeSlice)
	ctx := context.Background()

	// native lists the slices labelled with db's name: theirs and ours.
	native := func() (ours, theirs []discoveryv1.EndpointSlice, err error) {
		list, err := e.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db"})
		if err != nil {
			return nil, nil, err
		}
		for _, s := range list.Items {
			if s.Labels[discoveryv1.LabelManagedBy] == aggregate.EndpointSliceManagedBy {
				ours = append(ours, s)
			} else {
				theirs = append(theirs, s)
			}
		}
		return ours, theirs, nil
	}
	e.eventually("mirror endpoints added to db", func() error {
		ours, _, err := native()
		if err != nil {
			return err
		}
		if len(ours) != 1 {
			return fmt.Errorf("%d globalmirror slices for db, want 1", len(ours))
		}
		s := ours[0]
		var got []string
		for _, ep := range s.Endpoints {
			got = append(got, fmt.Sprintf("%s=%s:%v", ptr.Deref(ep.Hostname, ""), ep.Addresses[0], *ep.Conditions.Ready))
		}
		// The local pod db-0 is Kubernetes' to write; east's db-0 is db-0-east,
		// and east's own "db-0-east" collides with nothing here (db-0-east-east).
		if want := "[db-0-east=192.0.2.10:true db-0-east-east=192.0.2.11:true]"; fmt.Sprint(got) != want {
			return fmt.Errorf("endpoints %v, want %s", got, want)
		}
		if o := s.OwnerReferences; len(o) != 1 || o[0].UID != local.UID || o[0].Kind != "Service" || !aggregate.WrittenByGlobalmirror(s.Labels) || s.Labels[aggregate.LabelBase] != "db" {
			return fmt.Errorf("slice owner %v labels %v", o, s.Labels)
		}
		return nil
	})
	for _, a := range e.client.Actions() {
		if a.GetResource().Resource != "endpointslices" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		if n, ok := a.(interface{ GetName() string }); ok && n.GetName() == kubeSlice.Name {
			t.Errorf("touched the EndpointSlice controller's slice: %v", a)
		}
	}

	// Opting out removes the extra slices, and only them.
	optedOut := local.DeepCopy()
	optedOut.Annotations = nil
	optedOut.ResourceVersion = "2"
	if _, err := e.client.CoreV1().Services("ns").Update(ctx, optedOut, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("extra slices removed", func() error {
		ours, theirs, err := native()
		if err == nil && (len(ours) != 0 || len(theirs) != 1) {
			err = fmt.Errorf("%d of ours, %d of Kubernetes' left; want 0 and 1", len(ours), len(theirs))
		}
		return err
	})
}

// TestStaleBaseSyncsOnTheEcho: a sync that finds the slice cache behind the
// controller's own write (ErrStale) is retried when the feed delivers
// that write, not only after the rate limiter's delay, which grows with each
// failure (through an API outage, to tens of seconds) while a change of the
// members waits to be written.
func TestStaleBaseSyncsOnTheEcho(t *testing.T) {
	global, slice := ourGlobal()
	// As the controller writes it, so that nothing but the echo queues db.
	global.Spec.Ports = []corev1.ServicePort{{Name: pg.Name, Port: pg.Port, Protocol: pg.Protocol}}
	east := mirror("db", "east")
	client := fake.NewClientset(global, slice, east, memberSlice(east, "db-0", "198.51.100.1"))
	c := newController(t, client, record.NewFakeRecorder(10), metrics.New())
	// Failed syncs wait an hour: only an event can bring the base back soon.
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[source.Key](time.Hour, time.Hour))
	ctx := t.Context()
	c.Start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
		t.Fatal("caches did not sync")
	}
	for c.queue.Len() > 0 { // the feeds' initial adds
		k, _ := c.queue.Get()
		c.queue.Done(k)
	}
	key := baseKey("db")

	// This controller wrote generation 2; the cache still shows 1.
	written := slice.DeepCopy()
	written.Generation, written.ResourceVersion = 2, "2" // the fake counts neither
	c.tracker.Update(written)
	if result, err := c.sync(ctx, key); result != metrics.ResultStale {
		t.Fatalf("sync with the cache behind: %s (%v), want %s", result, err, metrics.ResultStale)
	}
	c.queue.AddRateLimited(key) // as processNext does
	if n := c.queue.Len(); n != 0 {
		t.Fatalf("queue has %d keys before the echo", n)
	}

	// The echo: the feed catches up with the write.
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, written, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := await.Poll(ctx, 5*time.Second, 10*time.Millisecond, func(context.Context) string {
		if c.queue.Len() == 0 {
			return "the queue is empty"
		}
		return ""
	}); err != nil {
		t.Fatalf("the echo did not queue the stale base; it waits for its rate-limited retry: %v", err)
	}
	got, _ := c.queue.Get()
	if got != key {
		t.Fatalf("queued %v, want %v", got, key)
	}
	c.queue.Done(got)
	if result, err := c.sync(ctx, key); result != metrics.ResultSuccess {
		t.Errorf("sync after the echo: %s (%v), want %s", result, err, metrics.ResultSuccess)
	}
	eps, err := client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db-global"})
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, s := range eps.Items {
		for _, ep := range s.Endpoints {
			hosts = append(hosts, *ep.Hostname)
		}
	}
	if !slices.Equal(hosts, []string{"db-0-east"}) {
		t.Errorf("global slices have %v after the sync, want the member change written: [db-0-east]", hosts)
	}
}

// TestWritesCarryTheFieldManager: every create and update of the
// controller's Services and EndpointSlices names FieldManager, so that
// managedFields say who wrote what.
func TestWritesCarryTheFieldManager(t *testing.T) {
	east := mirror("db", "east")
	e := start(t, east, memberSlice(east, "db-0", "192.0.2.10"))
	ctx := context.Background()
	e.eventually("global created", func() error {
		got, err := e.globalEndpoints()
		if err == nil && len(got) != 1 {
			err = fmt.Errorf("endpoints %v", got)
		}
		return err
	})
	// A new port for the Service, a new endpoint for the slice: both updated.
	moved := east.DeepCopy()
	moved.Spec.Ports = append(moved.Spec.Ports, corev1.ServicePort{Name: "admin", Port: 8080, Protocol: corev1.ProtocolTCP})
	moved.ResourceVersion = "2"
	if _, err := e.client.CoreV1().Services("ns").Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	grown := memberSlice(east, "db-0", "192.0.2.10", "db-1", "192.0.2.11")
	grown.ResourceVersion = "2"
	if _, err := e.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, grown, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("global updated", func() error {
		svc, err := e.client.CoreV1().Services("ns").Get(ctx, "db-global", metav1.GetOptions{})
		if err != nil {
			return err
		}
		got, err := e.globalEndpoints()
		if err == nil && (len(got) != 2 || len(svc.Spec.Ports) != 2) {
			err = fmt.Errorf("endpoints %v, ports %v", got, svc.Spec.Ports)
		}
		return err
	})

	seen := map[string]int{}
	for _, a := range e.client.Actions() {
		var obj runtime.Object
		var manager string
		switch a := a.(type) {
		case k8stesting.CreateActionImpl:
			obj, manager = a.Object, a.CreateOptions.FieldManager
		case k8stesting.UpdateActionImpl:
			obj, manager = a.Object, a.UpdateOptions.FieldManager
		default:
			continue
		}
		if !aggregate.WrittenByGlobalmirror(obj.(metav1.Object).GetLabels()) {
			continue // the test's own writes
		}
		what := a.GetResource().Resource + "/" + a.GetVerb()
		seen[what]++
		if manager != FieldManager {
			t.Errorf("%s of %s: field manager %q, want %q", what, obj.(metav1.Object).GetName()+obj.(metav1.Object).GetGenerateName(), manager, FieldManager)
		}
	}
	for _, what := range []string{"services/create", "services/update", "endpointslices/create", "endpointslices/update"} {
		if seen[what] == 0 {
			t.Errorf("no %s seen (writes: %v)", what, seen)
		}
	}

	// The objects say so too.
	svc, err := e.client.CoreV1().Services("ns").Get(ctx, "db-global", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs := []metav1.Object{svc}
	list, err := e.client.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db-global"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	for _, o := range objs {
		var managers []string
		for _, f := range o.GetManagedFields() {
			managers = append(managers, f.Manager)
		}
		if len(managers) == 0 || slices.ContainsFunc(managers, func(m string) bool { return m != FieldManager }) {
			t.Errorf("%s: managed fields of %q, want only %q", o.GetName(), managers, FieldManager)
		}
	}
}

// A term of leadership that ends (a lost Lease: the replica stands by with
// its feeds running) takes its gauges with it: check reads the largest
// replica's as the leader's, and a former leader's would outlive every
// deletion made since by the next one. The next term reports again.
func TestTheGaugesEndWithTheTerm(t *testing.T) {
	east := mirror("db", "east")
	client := fake.NewClientset(east, memberSlice(east, "db-0", "192.0.2.10"))
	m := metrics.New()
	ctrl := newController(t, client, record.NewFakeRecorder(100), m)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ctrl.Start(ctx)
	e := &env{t: t, client: client, metrics: m, ctrl: ctrl}
	gauges := func(globals, endpoints float64) func() error {
		return func() error {
			if g, n := testutil.ToFloat64(m.Globals), testutil.ToFloat64(m.Endpoints); g != globals || n != endpoints {
				return fmt.Errorf("globals = %v, endpoints = %v, want %v and %v", g, n, globals, endpoints)
			}
			return nil
		}
	}
	for term := range 2 {
		termCtx, endTerm := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- ctrl.Run(termCtx, 1) }()
		e.eventually(fmt.Sprintf("term %d: the global counted", term), gauges(1, 1))
		endTerm()
		if err := <-ran; err != nil {
			t.Fatalf("term %d: Run = %v", term, err)
		}
		if err := gauges(0, 0)(); err != nil {
			t.Errorf("term %d over, standing by: %v", term, err)
		}
	}
}
