package global

import (
	"context"
	"fmt"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/fakeapi"
	"github.com/globalmirror/globalmirror/test/fixture"
	clientset "k8s.io/client-go/kubernetes"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/kubernetes"
	"github.com/coredns/coredns/plugin/kubernetes/object"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller"
	ctrlmetrics "github.com/globalmirror/globalmirror/controller/metrics"
	"github.com/globalmirror/globalmirror/controller/slicewriter"
	"github.com/globalmirror/globalmirror/source"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// Fixture objects, the way Linkerd's service mirror (headless mode), the
// EndpointSlice controller and the mirroring controller write them.

// The fixture's ports.
var (
	peer   = fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}
	client = fixture.Port{Name: "client", Port: 8080, Protocol: corev1.ProtocolTCP}
	gossip = fixture.Port{Name: "gossip", Port: 7946, Protocol: corev1.ProtocolUDP}
)

// uid is a fresh UID for objects the tests make themselves.
func uid() types.UID { uidSeq++; return types.UID(fmt.Sprintf("uid-%d", uidSeq)) }

var uidSeq int

// testWorld is the standard test world in namespace "ns":
//
//   - db: local (db-0 192.0.2.1 + 2001:db8::1, db-1 192.0.2.2 not ready),
//     east (db-0, db-1), west (db-0 behind a dead gateway, db-2 live)
//   - nohost: local endpoints without hostnames (dashed IP names), east's
//     one not ready
//   - portless: east, slice without ports
//   - empty: east, no ready endpoint
//   - taken: east, but a user's Service taken-global exists
//   - managed: east, with the controller's Service managed-global
//   - lonely: a local service only (no global)
//   - v6only: east, IPv6 only
//   - dup: members listing the same endpoints (written once by the controller)
func testWorld() []runtime.Object {
	const ns = "ns"
	var objs []runtime.Object
	add := func(o ...runtime.Object) { objs = append(objs, o...) }

	local := fixture.LocalService(ns, "db", peer, client)
	add(local,
		fixture.Slice(local, "db-v4", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer, client),
			fixture.Ready("db-0", "192.0.2.1"), fixture.NotReady("db-1", "192.0.2.2")),
		fixture.Slice(local, "db-v6", discoveryv1.AddressTypeIPv6, fixture.SlicePorts(peer, client),
			fixture.Ready("db-0", "2001:db8::1")))
	east := fixture.HeadlessMirror(ns, "db", "east", peer, client)
	add(east, fixture.Slice(east, "db-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer, client),
		fixture.Ready("db-0", "192.0.2.10"), fixture.Ready("db-1", "192.0.2.11")))
	west := fixture.HeadlessMirror(ns, "db", "west", peer, client, gossip)
	add(west, fixture.Slice(west, "db-west-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer, client, gossip),
		fixture.Ready("db-0", "192.0.2.20"), fixture.Ready("db-2", "192.0.2.22")))
	emSvc, emSlice := fixture.EndpointMirror(ns, "db-0-west", "west", "db-west", false)
	add(emSvc, emSlice)
	emSvc, emSlice = fixture.EndpointMirror(ns, "db-2-west", "west", "db-west", true)
	add(emSvc, emSlice)

	nohost := fixture.LocalService(ns, "nohost", peer)
	add(nohost, fixture.Slice(nohost, "nohost-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
		fixture.Ready("", "192.0.2.30"), fixture.Ready("", "192.0.2.31")),
		fixture.Slice(nohost, "nohost-2", discoveryv1.AddressTypeIPv6, fixture.SlicePorts(peer),
			fixture.Ready("", "2001:db8::30")))
	nohostEast := fixture.HeadlessMirror(ns, "nohost", "east", peer)
	add(nohostEast, fixture.Slice(nohostEast, "nohost-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
		fixture.NotReady("nh-0", "192.0.2.32")))

	portless := fixture.HeadlessMirror(ns, "portless", "east")
	add(portless, fixture.Slice(portless, "portless-east-1", discoveryv1.AddressTypeIPv4, nil,
		fixture.Ready("pl-0", "192.0.2.40")))

	empty := fixture.HeadlessMirror(ns, "empty", "east", peer)
	add(empty, fixture.Slice(empty, "empty-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
		fixture.NotReady("empty-0", "192.0.2.50")))

	taken := fixture.HeadlessMirror(ns, "taken", "east", peer)
	add(taken, fixture.Slice(taken, "taken-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
		fixture.Ready("taken-0", "192.0.2.60")))
	add(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-global", Namespace: ns, UID: uid(), ResourceVersion: "1"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.60", Ports: fixture.ServicePorts(peer)},
	})

	managed := fixture.HeadlessMirror(ns, "managed", "east", peer)
	add(managed, fixture.Slice(managed, "managed-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
		fixture.Ready("m-0", "192.0.2.70")))
	add(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "managed-global", Namespace: ns, UID: uid(), ResourceVersion: "1",
			Labels: map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: "managed"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: fixture.ServicePorts(peer)},
	})

	lonely := fixture.LocalService(ns, "lonely", peer)
	add(lonely, fixture.Slice(lonely, "lonely-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("l-0", "192.0.2.80")))

	// Two members listing one address without hostnames (once not ready),
	// and a member listing one endpoint twice: the controller writes each
	// once. The mirrors' addresses without hostnames are what Linkerd
	// writes of its gateway: none is a member.
	dupLocal := fixture.LocalService(ns, "dup", peer)
	add(dupLocal, fixture.Slice(dupLocal, "dup-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("", "192.0.2.160"), fixture.Ready("", "192.0.2.161")))
	dupEast := fixture.HeadlessMirror(ns, "dup", "east", peer)
	add(dupEast, fixture.Slice(dupEast, "dup-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("", "192.0.2.160"), fixture.NotReady("", "192.0.2.162")),
		fixture.Slice(dupEast, "dup-east-2", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("d-1", "192.0.2.163")),
		fixture.Slice(dupEast, "dup-east-3", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("d-1", "192.0.2.163")))
	dupWest := fixture.HeadlessMirror(ns, "dup", "west", peer)
	add(dupWest, fixture.Slice(dupWest, "dup-west-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.NotReady("", "192.0.2.161"), fixture.Ready("", "192.0.2.162")))

	v6 := fixture.HeadlessMirror(ns, "v6only", "east", peer)
	add(v6, fixture.Slice(v6, "v6only-east-1", discoveryv1.AddressTypeIPv6, fixture.SlicePorts(peer),
		fixture.Ready("v-0", "2001:db8::90")))
	return objs
}

func defaultConfig() *config {
	c := caddy.NewTestController("dns", "global")
	cfg, err := parse(c)
	if err != nil {
		panic(err)
	}
	return cfg
}

// harness is a started plugin on a fake clientset.
type harness struct {
	g      *Global
	client *fake.Clientset
	cancel context.CancelFunc
}

func startHarness(t testing.TB, cfg *config, objs ...runtime.Object) *harness {
	t.Helper()
	client := fake.NewClientset(objs...)
	g, err := newFromFake(cfg, client)
	if err != nil {
		t.Fatal(err)
	}
	g.Next = test.NextHandler(dns.RcodeBadCookie, nil) // a marker rcode: "passed on"
	ctx, cancel := context.WithCancel(context.Background())
	stopped := g.ctrl.start(ctx)
	stop := func() {
		cancel()
		<-stopped
	}
	t.Cleanup(stop)
	waitFor(t, 10*time.Second, "index built", g.ctrl.ready)
	return &harness{g: g, client: client, cancel: stop}
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := await.Poll(context.Background(), d, 5*time.Millisecond, func(context.Context) string {
		if !cond() {
			return what + " not yet"
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
}

// passedOn is the rcode test.NextHandler returns in these tests.
const passedOn = dns.RcodeBadCookie

// serve runs one query through h and returns the response (nil when passed on) and rcode.
func serve(h plugin.Handler, qname string, qtype uint16, tcp bool) (*dns.Msg, int, error) {
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	rec := dnstest.NewRecorder(&test.ResponseWriter{TCP: tcp})
	rcode, err := h.ServeDNS(context.Background(), rec, m)
	return rec.Msg, rcode, err
}

// ---- the reference: CoreDNS's kubernetes plugin on the converged objects ----

// converge writes what the controller writes for the views, with the
// controller's own slice reconciler: the global Service (headless) and its
// EndpointSlices. It returns them as the kubernetes plugin's informers
// would have them.
func converge(t testing.TB, views []aggregate.View) (svcs []*object.Service, eps []*object.Endpoints) {
	t.Helper()
	var owners []*corev1.Service
	for _, v := range views {
		owners = append(owners, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: v.Name, Namespace: v.Namespace, UID: uid()},
			Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone}, Ports: v.Ports},
		})
	}
	return convergeOwned(t, views, owners)
}

// convergeOwned writes the views as EndpointSlices of the given Services with
// the controller's own slice reconciler.
func convergeOwned(t testing.TB, views []aggregate.View, owners []*corev1.Service) (svcs []*object.Service, eps []*object.Endpoints) {
	t.Helper()
	ctx := context.Background()
	client := fake.NewClientset()
	n := 0
	client.PrependReactor("create", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s := a.(k8stesting.CreateAction).GetObject().(*discoveryv1.EndpointSlice); s.Name == "" {
			n++ // the fake does not do generateName
			s.Name = fmt.Sprintf("%s%d", s.GenerateName, n)
		}
		return false, nil, nil
	})
	rec := slicewriter.NewReconciler(client, controller.FieldManager, endpointsliceutil.NewEndpointSliceTracker(), ctrlmetrics.New(), 7, nil)
	for i, v := range views {
		svc := owners[i]
		if _, err := rec.Reconcile(ctx, svc, v, nil); err != nil {
			t.Fatalf("controller reconcile of %s/%s: %v", v.Namespace, v.Name, err)
		}
		o, _ := object.ToService(svc.DeepCopy())
		svcs = append(svcs, o.(*object.Service))
	}
	list, err := client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		o, _ := object.EndpointSliceToEndpoints(&list.Items[i])
		eps = append(eps, o.(*object.Endpoints))
	}
	return svcs, eps
}

// refConn is the kubernetes plugin's dnsController interface over fixed objects.
type refConn struct {
	svcs    []*object.Service
	eps     []*object.Endpoints
	imports []*object.ServiceImport
	mcEps   []*object.MultiClusterEndpoints
}

func (c *refConn) ServiceList() []*object.Service              { return c.svcs }
func (c *refConn) EndpointsList() []*object.Endpoints          { return c.eps }
func (c *refConn) ServiceImportList() []*object.ServiceImport  { return c.imports }
func (c *refConn) SvcIndexReverse(string) []*object.Service    { return nil }
func (c *refConn) SvcExtIndexReverse(string) []*object.Service { return nil }
func (c *refConn) PodIndex(string) []*object.Pod               { return nil }
func (c *refConn) EpIndexReverse(string) []*object.Endpoints   { return nil }
func (c *refConn) Run()                                        {}
func (c *refConn) HasSynced() bool                             { return true }
func (c *refConn) Stop() error                                 { return nil }
func (c *refConn) Modified(kubernetes.ModifiedMode) int64      { return 3 }
func (c *refConn) SvcImportIndex(key string) []*object.ServiceImport {
	return indexed(c.imports, key, func(o *object.ServiceImport) string { return o.Index })
}
func (c *refConn) McEpIndex(key string) []*object.MultiClusterEndpoints {
	return indexed(c.mcEps, key, func(o *object.MultiClusterEndpoints) string { return o.Index })
}
func (c *refConn) GetNodeByName(context.Context, string) (*corev1.Node, error) {
	return nil, fmt.Errorf("no nodes")
}
func (c *refConn) GetNamespaceByName(name string) (*object.Namespace, error) {
	return &object.Namespace{Name: name}, nil
}
func (c *refConn) SvcIndex(key string) []*object.Service {
	return indexed(c.svcs, key, func(o *object.Service) string { return o.Index })
}
func (c *refConn) EpIndex(key string) []*object.Endpoints {
	return indexed(c.eps, key, func(o *object.Endpoints) string { return o.Index })
}

// indexed are the objects of list filed under key, as the kubernetes
// plugin's indexers would return them.
func indexed[T any](list []T, key string, index func(T) string) []T {
	var out []T
	for _, o := range list {
		if index(o) == key {
			out = append(out, o)
		}
	}
	return out
}

// probedBases are the bases the source knows and three more: one unknown,
// and names the tests' worlds give a lonely member and a user's global.
func probedBases(src *source.Source) []string {
	bases := []string{"unknown", "lonely", "taken"}
	for _, k := range src.Keys() {
		bases = append(bases, k.Base)
	}
	return bases
}

// addMemberHosts adds the first labels of base's member endpoints to hosts:
// their dashed IPs and hostnames, with clustered also hostname-cluster.
func addMemberHosts(hosts map[string]bool, src *source.Source, base string, clustered bool) {
	for _, m := range src.Input(sourceKey("ns", base)).Members {
		for _, s := range m.Slices {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					hosts[dashedIP(a)] = true
				}
				if e.Hostname != nil {
					hosts[*e.Hostname] = true
					if clustered {
						hosts[*e.Hostname+"-"+m.Cluster] = true
					}
				}
			}
		}
	}
}

// globalViews are the views of every global the source knows and the plugin
// answers for (not those whose name a user owns).
func globalViews(src *source.Source) []aggregate.View {
	var views []aggregate.View
	for _, k := range src.Keys() {
		in := src.Input(k)
		if !aggregate.Exists(in) {
			continue
		}
		if aggregate.OwnerOf(src.Service(k.Namespace, aggregate.GlobalName(k.Base, src.Suffix()))) == aggregate.OwnerUser {
			continue
		}
		views = append(views, aggregate.Aggregate(in))
	}
	return views
}

// localObjects are the local member services the source knows with the
// slices Kubernetes wrote for them, and, for those that opted into native
// names, the slices the controller adds (its own reconciler, the view's
// mirror endpoints), as the kubernetes plugin's informers would have them.
func localObjects(t testing.TB, src *source.Source) (svcs []*object.Service, eps []*object.Endpoints) {
	t.Helper()
	var native []aggregate.View
	var owners []*corev1.Service
	for _, k := range src.Keys() {
		in := src.Input(k)
		for _, m := range in.Members {
			if !m.Local() {
				continue
			}
			svc := m.Service.DeepCopy()
			svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
			o, _ := object.ToService(svc) // empties svc
			svcs = append(svcs, o.(*object.Service))
			for _, sl := range m.Slices {
				sl = sl.DeepCopy()
				sl.Labels = map[string]string{discoveryv1.LabelServiceName: m.Service.Name}
				o, _ := object.EndpointSliceToEndpoints(sl)
				eps = append(eps, o.(*object.Endpoints))
			}
			if aggregate.Native(in) {
				native, owners = append(native, aggregate.Aggregate(in).Mirrored()), append(owners, m.Service)
			}
		}
	}
	_, extra := convergeOwned(t, native, owners)
	return svcs, append(eps, extra...)
}

// reference builds a stock kubernetes plugin (zones, ttl) answering from the
// converged global objects of every global the source knows, and from the
// local services with their slices (Kubernetes' and, for native names, the
// controller's).
func reference(t testing.TB, src *source.Source, zones []string, extra ...*object.Service) *kubernetes.Kubernetes {
	t.Helper()
	svcs, eps := converge(t, globalViews(src))
	lsvcs, leps := localObjects(t, src)
	svcs, eps = append(svcs, lsvcs...), append(eps, leps...)
	k := kubernetes.New(zones)
	k.APIConn = &refConn{svcs: append(svcs, extra...), eps: eps}
	k.Next = test.NextHandler(passedOn, nil)
	return k
}

// normalize makes a response comparable: records sorted, SOA serials zeroed.
func normalize(m *dns.Msg) string {
	if m == nil {
		return "<no response>"
	}
	m = m.Copy()
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = 0
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rcode=%s aa=%t tc=%t\n", dns.RcodeToString[m.Rcode], m.Authoritative, m.Truncated)
	for _, sec := range []struct {
		name string
		rrs  []dns.RR
	}{{"answer", m.Answer}, {"ns", m.Ns}, {"extra", m.Extra}} {
		var lines []string
		for _, rr := range sec.rrs {
			lines = append(lines, rr.String())
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Fprintf(&b, "%s: %s\n", sec.name, l)
		}
	}
	return b.String()
}

func sourceKey(ns, base string) source.Key { return source.Key{Namespace: ns, Base: base} }

// newFromFake is newFromClient on one of client-go's fakes, its feeds
// served from it (test/fakeapi).
func newFromFake(cfg *config, client clientset.Interface) (*Global, error) {
	cfg.apis = fakeapi.For(client)
	return newFromClient(cfg, client)
}
