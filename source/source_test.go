package source

import (
	"context"
	"fmt"
	"github.com/globalmirror/globalmirror/test/fakeapi"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

type recorder struct {
	mu      sync.Mutex
	changed map[Key]int
	skipped []string
	drains  *Drains
}

func (r *recorder) Drained(d Drains) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drains = &d
}

func (r *recorder) lastDrains() *Drains {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drains
}

func (r *recorder) Changed(k Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed[k]++
}

func (r *recorder) Skipped(obj metav1.Object, kind string, skip aggregate.Skip) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped = append(r.skipped, kind+" "+obj.GetName()+": "+string(skip.Reason)+": "+skip.Detail)
}

func (r *recorder) reset() map[Key]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.changed
	r.changed = map[Key]int{}
	return c
}

// service is a Service of the tests' namespace carrying what the feeds'
// transform must drop.
func service(name string, lbl map[string]string, clusterIP string) *corev1.Service {
	svc := fixture.Service("ns", name, lbl, clusterIP)
	svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	svc.Annotations = map[string]string{"big": "dropped by the transform"}
	return svc
}

// epSlice is an IPv4 slice of svcName with labels lbl and one endpoint per
// host, address pair, all ready or all not.
func epSlice(name, svcName string, lbl map[string]string, ready bool, hostAddr ...string) *discoveryv1.EndpointSlice {
	var eps []fixture.Endpoint
	for i := 0; i+1 < len(hostAddr); i += 2 {
		eps = append(eps, fixture.Endpoint{Host: hostAddr[i], Addrs: []string{hostAddr[i+1]}, Ready: new(ready)})
	}
	return fixture.Slice(fixture.Service("ns", svcName, lbl, ""), name, discoveryv1.AddressTypeIPv4, nil, eps...)
}

func start(t *testing.T, objs ...any) (*Source, *fake.Clientset, *recorder) {
	t.Helper()
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, o := range objs {
		create(t, client, o)
	}
	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	rec := &recorder{changed: map[Key]int{}}
	src, err := New(Config{Client: client, APIs: fakeapi.For(client), LocalSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	src.AddHandler(rec)
	src.Start(ctx)
	if !src.WaitForSync(ctx) {
		t.Fatal("caches did not sync")
	}
	return src, client, rec
}

func create(t *testing.T, client *fake.Clientset, o any) {
	t.Helper()
	var err error
	switch o := o.(type) {
	case *corev1.Service:
		_, err = client.CoreV1().Services(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
	case *discoveryv1.EndpointSlice:
		_, err = client.DiscoveryV1().EndpointSlices(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond for a few seconds; feeds deliver asynchronously.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := await.Poll(t.Context(), 5*time.Second, 10*time.Millisecond, func(context.Context) string {
		if !cond() {
			return what + " not yet"
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
}

func TestInputGathersMembersAndEndpointMirrors(t *testing.T) {
	exported := map[string]string{aggregate.LabelExported: "true"}
	src, _, _ := start(t,
		service("db", exported, "None"),
		service("db-east", fixture.MirrorLabels("east"), "None"),
		service("db-west", fixture.MirrorLabels("west"), "None"),
		service("db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), "10.96.0.1"),
		service("unrelated", nil, "None"),
		epSlice("db-abc", "db", exported, true, "db-0", "10.0.0.1"),
		// globalmirror's own native-name slice of db (labelled like a member's
		// here, as a user's local selector might): not one of db's endpoints.
		epSlice("db-native", "db", map[string]string{aggregate.LabelExported: "true",
			discoveryv1.LabelManagedBy: aggregate.EndpointSliceManagedBy}, true, "db-0-east", "10.96.0.1"),
		epSlice("db-east-abc", "db-east", fixture.MirrorLabels("east"), true, "db-0", "10.96.0.1"),
		epSlice("db-west-abc", "db-west", fixture.MirrorLabels("west"), true, "db-0", "10.96.0.2"),
		epSlice("db-0-east-abc", "db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), false, "", "192.0.2.1"),
		epSlice("unrelated-abc", "unrelated", nil, true, "x", "10.0.0.9"),
	)
	keys := src.Keys()
	if len(keys) != 1 || keys[0] != (Key{"ns", "db"}) {
		t.Fatalf("Keys() = %v, want [ns/db]", keys)
	}
	in := src.Input(Key{"ns", "db"})
	got := map[string]int{}
	for _, m := range in.Members {
		got[m.Cluster+"/"+m.Service.Name] = len(m.Slices)
	}
	want := map[string]int{"/db": 1, "east/db-east": 1, "west/db-west": 1}
	if len(got) != len(want) {
		t.Fatalf("members = %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("member %s has %d slices, want %d", k, got[k], n)
		}
	}
	if em := in.EndpointMirrors["db-0-east"]; len(em) != 1 || aggregate.MirrorEndpointReady(true, em) {
		t.Errorf("EndpointMirrors = %v, want db-0-east's one slice, not ready", in.EndpointMirrors)
	}
	if !aggregate.Exists(in) {
		t.Error("global should exist")
	}
	// The index keeps small objects.
	s := src.Service("ns", "db-east")
	if s == nil || s.ManagedFields != nil || s.Annotations["big"] != "" {
		t.Errorf("service not stripped: %+v", s)
	}
}

func TestEventsMapToBases(t *testing.T) {
	src, client, rec := start(t,
		service("db-east", fixture.MirrorLabels("east"), "None"),
		service("db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), "10.96.0.1"),
	)
	db := Key{"ns", "db"}
	eventually(t, "initial adds", func() bool { return rec.reset()[db] > 0 })

	// A slice of the endpoint mirror affects the base of its headless mirror.
	create(t, client, epSlice("db-0-east-x", "db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), true, "", "192.0.2.1"))
	eventually(t, "endpoint mirror slice → db", func() bool { return rec.reset()[db] > 0 })

	// A user's Service named like the global affects its base, though it is no member.
	create(t, client, service("db-global", nil, "None"))
	// Wait for the object itself: a late event from an earlier step could
	// satisfy the notification alone.
	eventually(t, "user-owned db-global in the cache", func() bool { return src.Service("ns", "db-global") != nil })
	eventually(t, "user-owned db-global → db", func() bool { return rec.reset()[db] > 0 })
	if s := src.Service("ns", "db-global"); aggregate.WrittenByGlobalmirror(s.Labels) {
		t.Fatalf("user-owned db-global should be unmanaged: %+v", s)
	}

	// Relabelling a mirror to another cluster notifies both old and new bases.
	moved := service("db-east", fixture.MirrorLabels("east"), "None")
	moved.Annotations = map[string]string{aggregate.AnnotationRemoteFQName: "other.ns.svc.cluster.local"}
	moved.ResourceVersion = "2"
	if _, err := client.CoreV1().Services("ns").Update(context.Background(), moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := map[Key]int{}
	eventually(t, "old and new base", func() bool {
		for k, n := range rec.reset() {
			seen[k] += n
		}
		return seen[db] > 0 && seen[Key{"ns", "other"}] > 0
	})
}

func TestMalformedMirrorIsSkippedAndReported(t *testing.T) {
	bad := service("db-east", map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "NOT_A_LABEL"}, "None")
	src, _, rec := start(t, bad)
	eventually(t, "skip report", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.skipped) == 1
	})
	if keys := src.Keys(); len(keys) != 0 {
		t.Fatalf("a malformed mirror made bases: %v", keys)
	}
}

// indexOf is a Source's index of objs, written through its sinks as a list
// would (not started: no feed runs).
func indexOf(objs ...runtime.Object) *Source {
	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	c := fake.NewClientset()
	s, err := New(Config{Client: c, APIs: fakeapi.For(c), LocalSelector: sel})
	if err != nil {
		panic(err)
	}
	relist(s, objs...)
	return s
}

// relist delivers objs to s's sinks as a full list.
func relist(s *Source, objs ...runtime.Object) {
	svcs := s.serviceSinks[metav1.NamespaceAll]
	svcs.Listing()
	for _, k := range s.slices {
		k.Listing()
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			if _, endpointMirror := o.Labels[aggregate.LabelHeadlessMirrorName]; !endpointMirror {
				svcs.Upsert(o)
			}
		case *discoveryv1.EndpointSlice:
			for _, k := range s.slices {
				if k.selector.Matches(labels.Set(o.Labels)) {
					k.Upsert(o)
				}
			}
		}
	}
	svcs.Listed()
	for _, k := range s.slices {
		k.Listed()
	}
}

// A relist (the watch's version was lost) drops what is gone and tells its
// bases; what it delivers unchanged tells nothing.
func TestRelistDropsWhatIsGoneAndTellsOnlyChanges(t *testing.T) {
	db, web := fixture.HeadlessMirror("ns", "db", "east"), fixture.HeadlessMirror("ns", "web", "east")
	dbSlice := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "db-0", "192.0.2.1")
	webSlice := epSlice("web-east-x", "web-east", fixture.MirrorLabels("east"), true, "web-0", "192.0.2.2")
	dbMirror := epSlice("db-0-east-x", "db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), true, "", "192.0.2.3")
	s := indexOf(db, web, dbSlice, webSlice, dbMirror)
	rec := &recorder{changed: map[Key]int{}}
	s.AddHandler(rec)

	relist(s, db, web, dbSlice, webSlice, dbMirror)
	if got := rec.reset(); len(got) != 0 {
		t.Errorf("an unchanged relist told %v", got)
	}
	// Nor does a change to nothing the index keeps.
	relabeled := webSlice.DeepCopy()
	relabeled.Labels["unrelated"], relabeled.ResourceVersion = "x", "99"
	s.slices[0].Upsert(relabeled)
	if got := rec.reset(); len(got) != 0 {
		t.Errorf("a label nothing reads told %v", got)
	}

	// web's slice and db's endpoint mirror are gone; so is web itself.
	relist(s, db, dbSlice)
	got := rec.reset()
	if got[Key{"ns", "db"}] == 0 || got[Key{"ns", "web"}] == 0 || len(got) != 2 {
		t.Errorf("the relist told %v, want ns/db and ns/web", got)
	}
	if keys := s.Keys(); len(keys) != 1 || keys[0] != (Key{"ns", "db"}) {
		t.Errorf("Keys() = %v after web went", keys)
	}
	if in := s.Input(Key{"ns", "db"}); len(in.EndpointMirrors) != 0 || len(in.Members) != 1 || len(in.Members[0].Slices) != 1 {
		t.Errorf("db's input after the relist: %+v", in)
	}
	var present []string
	s.entries.each(func(_, name string, e *entry) {
		present = append(present, name)
		if len(e.mirrors) > 0 {
			t.Errorf("%s: endpoint mirrors left behind: %+v", name, e.mirrors)
		}
		for _, m := range e.members {
			if name != "db-east" || m.name(name) != "db-east-x" {
				t.Errorf("%s: member slice %s left behind", name, m.name(name))
			}
		}
	})
	if !slices.Equal(present, []string{"db-east"}) {
		t.Errorf("entries %v, want db-east's alone", present)
	}
}

// The index keeps no Service nothing reads (the bulk of a large cluster's):
// only members, globals and Services named like a global.
func TestIndexKeepsOnlyWhatIsRead(t *testing.T) {
	exported := map[string]string{aggregate.LabelExported: "true"}
	s := indexOf(
		service("db", exported, "None"),
		fixture.HeadlessMirror("ns", "db", "east"),
		service("api", map[string]string{"app": "api"}, "10.96.0.9"),
		service("web", nil, "None"),
		service("api-east", fixture.MirrorLabels("east"), "10.96.0.10"), // a ClusterIP mirror
		service("web-global", nil, "None"),                              // a user's: blocks web's global
	)
	var present []string
	s.entries.each(func(_, name string, e *entry) {
		if e.svc.present() {
			present = append(present, name)
		}
	})
	slices.Sort(present)
	if want := []string{"db", "db-east", "web-global"}; !slices.Equal(present, want) {
		t.Errorf("present %v, want %v", present, want)
	}
}

// Linkerd's endpoint mirrors (one per mirrored pod) are not cached: nothing
// reads their Services. The one that could matter, an endpoint mirror named
// like a global (pod "db" of service web of a cluster linked as "global"),
// still owns that name for both halves, known from the headless mirror's
// endpoints, and a change to them tells the global's base.
func TestEndpointMirrorsAreNotCachedButHoldAGlobalName(t *testing.T) {
	epm := service("db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), "10.96.0.7")
	other := fixture.HeadlessMirror("ns", "web", "global")
	// Its pod "db" has the endpoint mirror db-global: a global's name.
	otherSlice := epSlice("web-global-x", other.Name, fixture.MirrorLabels("global"), true, "db", "192.0.2.9")
	src, client, rec := start(t, fixture.HeadlessMirror("ns", "db", "east"), epm, other, otherSlice)

	if svc := src.Service("ns", "db-0-east"); svc != nil {
		t.Errorf("endpoint mirror cached: %+v", svc.ObjectMeta)
	}
	holder := src.Service("ns", "db-global")
	if holder == nil || aggregate.OwnerOf(holder) != aggregate.OwnerUser {
		t.Fatalf("db-global's holder = %+v, want the endpoint mirror, not globalmirror's", holder)
	}
	if v := aggregate.GlobalVerdict(src.Input(Key{"ns", "db"}), holder); v != aggregate.VerdictConflict {
		t.Errorf("verdict %d, want VerdictConflict (the global's name is taken)", v)
	}
	rec.reset()
	if err := client.DiscoveryV1().EndpointSlices("ns").Delete(context.Background(), otherSlice.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the name freed", func() bool { return src.Service("ns", "db-global") == nil })
	eventually(t, "db told", func() bool { return rec.reset()[Key{"ns", "db"}] > 0 })
}

// What many Services share is interned, and what is one Service's own (a
// global's base, a cluster IP) is not interned at all: it would
// grow with the world and, bounded, stop sharing what should be shared.
func TestInternerInternsWhatIsShared(t *testing.T) {
	var objs []runtime.Object
	for i := range 500 {
		base := fmt.Sprintf("db%03d", i)
		for _, cluster := range []string{"east", "west"} {
			objs = append(objs, fixture.HeadlessMirror("ns", base, cluster))
		}
		objs = append(objs, service(base+"-global", map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: base}, "None"),
			service(base+"-other-global", nil, fmt.Sprintf("10.96.%d.%d", i/256, i%256))) // a user's, named like a global
	}
	s := indexOf(objs...)
	if n := s.entries.len(); n != 2000 {
		t.Fatalf("%d Services present, want 2,000", n)
	}
	if n := len(s.intern.strs) + len(s.intern.lists); n > 20 {
		t.Errorf("the interner has %d entries for 2,000 Services of 2 clusters", n)
	}
	shapes := map[*serviceShape]bool{}
	s.entries.each(func(_, name string, e *entry) {
		if strings.HasSuffix(name, "-east") || strings.HasSuffix(name, "-west") {
			shapes[e.svc.shape] = true
		}
	})
	if len(shapes) != 2 {
		t.Errorf("1,000 headless mirrors of 2 clusters have %d shapes, want 2", len(shapes))
	}
	if got := s.Service("ns", "db007-global").Labels[aggregate.LabelBase]; got != "db007" {
		t.Errorf("a global's base reads %q", got)
	}
	// Globals of ours share one shape: the base label is the name less
	// the suffix, stored as such.
	globals := map[*serviceShape]bool{}
	s.entries.each(func(_, name string, e *entry) {
		if strings.HasSuffix(name, "0-global") && !strings.Contains(name, "other") {
			globals[e.svc.shape] = true
		}
	})
	if len(globals) != 1 {
		t.Errorf("globals of ours have %d shapes, want 1", len(globals))
	}
	// One whose base label is not its name less the suffix keeps it as is.
	odd := service("renamed-global", map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: "db001"}, "None")
	relist(s, append(objs, odd)...)
	if got := s.Service("ns", "renamed-global").Labels[aggregate.LabelBase]; got != "db001" {
		t.Errorf("renamed-global's base reads %q, want db001", got)
	}
}

// slicesOf is the names of the slices Input gives each member of base db,
// by the member's Service name.
func slicesOf(s *Source) map[string][]string {
	got := map[string][]string{}
	for _, m := range s.Input(Key{"ns", "db"}).Members {
		for _, sl := range m.Slices {
			got[m.Service.Name] = append(got[m.Service.Name], sl.Name)
		}
	}
	return got
}

// A member slice is filed under its service's entry alone, found by its
// name: one named for its service, under the one it names however it was
// relabeled; one named otherwise, through the few such names kept.
func TestMemberSlicesAreFoundWhereverTheyAreFiled(t *testing.T) {
	east, west := fixture.HeadlessMirror("ns", "db", "east"), fixture.HeadlessMirror("ns", "db", "west")
	named := epSlice("db-east-abc", "db-east", fixture.MirrorLabels("east"), true, "db-0", "192.0.2.1")
	other := epSlice("custom", "db-east", fixture.MirrorLabels("east"), true, "db-1", "192.0.2.2")
	s := indexOf(east, west, named, other)
	mirrors := s.slices[0]
	if got := slicesOf(s); !slices.Equal(got["db-east"], []string{"db-east-abc", "custom"}) || len(got) != 1 {
		t.Fatalf("slices %v, want db-east's two", got)
	}

	for _, sl := range []*discoveryv1.EndpointSlice{named, other} {
		moved := sl.DeepCopy()
		moved.Labels[discoveryv1.LabelServiceName], moved.Labels[aggregate.LabelClusterName] = "db-west", "west"
		moved.ResourceVersion = "7"
		mirrors.Upsert(moved)
	}
	if got := slicesOf(s); !slices.Equal(got["db-west"], []string{"db-east-abc", "custom"}) || len(got) != 1 {
		t.Errorf("after both were relabeled to db-west: %v", got)
	}

	// One becomes an endpoint mirror's slice: a member's no more.
	epm := named.DeepCopy()
	epm.Labels = fixture.MirrorLabels("west", aggregate.LabelHeadlessMirrorName, "db-west")
	epm.Labels[discoveryv1.LabelServiceName], epm.ResourceVersion = "db-0-west", "8"
	mirrors.Upsert(epm)
	in := s.Input(Key{"ns", "db"})
	if got := slicesOf(s); !slices.Equal(got["db-west"], []string{"custom"}) || len(got) != 1 {
		t.Errorf("after db-east-abc became an endpoint mirror's: %v", got)
	}
	if _, ok := in.EndpointMirrors["db-1-west"]; ok || len(s.entries.get("ns", "db-west").mirrors) != 1 {
		t.Errorf("the endpoint mirror's slice is not stored as one: %+v", s.entries.get("ns", "db-west"))
	}

	mirrors.Delete(other)
	if got := slicesOf(s); len(got) != 0 {
		t.Errorf("after custom's delete: %v", got)
	}
	if mirrors.otherNamed.len() != 0 {
		t.Errorf("otherNamed left behind: %v", mirrors.otherNamed)
	}
}

// A slice that both feeds' selectors match is filed by each feed and read once;
// each feed's list and delete take only its own.
func TestEachFeedFilesItsOwn(t *testing.T) {
	both := fixture.MirrorLabels("east", aggregate.LabelExported, "true")
	hm := fixture.HeadlessMirror("ns", "db", "east")
	member := epSlice("db-east-abc", "db-east", both, true, "db-0", "192.0.2.1")
	epm := epSlice("db-0-east-x", "db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east", aggregate.LabelExported, "true"), true, "", "10.96.0.1")
	s := indexOf(hm, member, epm)
	mirrors, local := s.slices[0], s.slices[1]
	e := s.entries.get("ns", "db-east")
	if len(e.members) != 2 || len(e.mirrors) != 2 {
		t.Fatalf("present: %d member slices and %d endpoint mirrors' slices, want two of each (a feed each)", len(e.members), len(e.mirrors))
	}
	if got := slicesOf(s); !slices.Equal(got["db-east"], []string{"db-east-abc"}) {
		t.Errorf("slices %v, want db-east-abc once", got)
	}
	if em := s.Input(Key{"ns", "db"}).EndpointMirrors["db-0-east"]; !aggregate.MirrorEndpointReady(false, em) {
		t.Errorf("db-0-east not ready: %v", em)
	}

	// The local feed loses both (relabeled out of its selector); the mirror feed keeps them.
	local.Delete(member)
	local.Delete(epm)
	if len(e.members) != 1 || e.members[0].feed() != mirrorFeed || len(e.mirrors) != 1 || e.mirrors[0].feed() != mirrorFeed {
		t.Errorf("after the local feed's deletes: %+v", e)
	}
	if got := slicesOf(s); !slices.Equal(got["db-east"], []string{"db-east-abc"}) {
		t.Errorf("slices %v, want db-east-abc", got)
	}

	// A list that failed part way, then one without the endpoint mirror's
	// slice: it goes, though the failed one delivered it.
	mirrors.Listing()
	mirrors.Upsert(epm)
	mirrors.Listing()
	mirrors.Upsert(member)
	mirrors.Listed()
	if len(e.mirrors) != 0 || len(e.members) != 1 {
		t.Errorf("after the lists: %+v", e)
	}
	if _, ok := s.Input(Key{"ns", "db"}).EndpointMirrors["db-0-east"]; ok {
		t.Error("db-0-east's readiness outlived its slice")
	}
}

// An endpoint mirror's slice delivered again current (a watch's
// event repeated, not a list) tells no one.
func TestEndpointMirrorSliceDeliveredAgainTellsNothing(t *testing.T) {
	epm := epSlice("db-0-east-x", "db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), true, "", "10.96.0.1")
	s := indexOf(fixture.HeadlessMirror("ns", "db", "east"), epm)
	rec := &recorder{changed: map[Key]int{}}
	s.AddHandler(rec)
	s.slices[0].Upsert(epm)
	if got := rec.reset(); len(got) != 0 {
		t.Errorf("the same slice again told %v", got)
	}
	notReady := epm.DeepCopy()
	notReady.Endpoints[0].Conditions.Ready = new(false)
	s.slices[0].Upsert(notReady)
	if got := rec.reset(); got[Key{"ns", "db"}] == 0 {
		t.Errorf("its readiness changing told %v, want ns/db", got)
	}
}

// A relist that finds objects current reads only their names,
// versions and labels, borrowed from the frame they came in: the index keeps
// none of those bytes, keeps everything as it was, and tells no one.
func TestARelistOfCurrentObjectsReadsOnlyTheirNamesAndVersions(t *testing.T) {
	db := fixture.HeadlessMirror("ns", "db", "east")
	dbSlice := epSlice("db-east-x", "db-east", fixture.MirrorLabels("east"), true, "db-0", "192.0.2.1")
	dbMirror := epSlice("db-0-east-x", "db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), true, "", "192.0.2.3")
	// A mirror without its cluster, named like a global: skipped, and
	// remembered as such, and kept.
	bad := fixture.HeadlessMirror("ns", "bad", "east")
	bad.Name = "bad-global"
	delete(bad.Labels, aggregate.LabelClusterName)
	objs := []runtime.Object{db, dbSlice, dbMirror, bad}
	for i, o := range objs {
		o.(metav1.Object).SetResourceVersion(fmt.Sprint(10 + i))
	}
	s := indexOf(objs...)
	rec := &recorder{changed: map[Key]int{}}
	s.AddHandler(rec)
	before := s.Input(Key{"ns", "db"})
	skipped := len(s.skipped)
	if skipped != 1 {
		t.Fatalf("%d Services skipped, want bad", skipped)
	}

	svcs := s.serviceSinks[metav1.NamespaceAll]
	svcs.Listing()
	for _, k := range s.slices {
		k.Listing()
	}
	for _, o := range objs {
		frame := protobufOf(t, o)
		kind := "Service"
		var sink kubeclient.CurrentSink = svcs
		if _, ok := o.(*discoveryv1.EndpointSlice); ok {
			kind, sink = "EndpointSlice", s.slices[0]
		}
		p, ok, err := kubeclient.Peek(frame, kind)
		if !ok || err != nil {
			t.Fatalf("peeking %s: %v", o.(metav1.Object).GetName(), err)
		}
		if !sink.Current(&p) {
			t.Errorf("%s at its version is not current", p.Name)
		}
		clear(frame) // the next frame is read into the same buffer
		changed := o.DeepCopyObject().(metav1.Object)
		changed.SetResourceVersion("99")
		if p, _, _ := kubeclient.Peek(protobufOf(t, changed.(runtime.Object)), kind); sink.Current(&p) {
			t.Errorf("%s at another version is current", p.Name)
		}
	}
	svcs.Listed()
	for _, k := range s.slices {
		k.Listed()
	}
	if got := rec.reset(); len(got) != 0 {
		t.Errorf("a relist of current objects told %v", got)
	}
	if after := s.Input(Key{"ns", "db"}); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("db's input after the relist:\n  %+v\nwas\n  %+v", after, before)
	}
	if len(s.skipped) != skipped {
		t.Errorf("%d Services skipped after the relist, want %d", len(s.skipped), skipped)
	}
	for id := range s.skipped {
		if id != (nsName{"ns", "bad-global"}) {
			t.Errorf("a skipped Service is filed as %q/%q: the frame's bytes, not its own", id.namespace, id.name)
		}
	}
	s.entries.each(func(namespace, name string, _ *entry) {
		if namespace != "ns" || (!strings.HasPrefix(name, "db") && name != "bad-global") {
			t.Errorf("an entry filed as %q/%q", namespace, name)
		}
	})
}

// protobufOf encodes obj as the API server sends it.
func protobufOf(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	data, err := fakeapi.Encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
