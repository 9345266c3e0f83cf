package source

import (
	"context"
	"errors"
	"fmt"
	"github.com/globalmirror/globalmirror/test/fakeapi"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

var linkGVR = fixture.LinkGVR

func link(cluster, level string, since time.Time) *unstructured.Unstructured {
	return fixture.Link(cluster, level, since)
}

// startWithLinks starts a source whose API server serves Links (unless
// served is false) holding links, and a world of db (east, west) and kv
// (west).
func startWithLinks(t *testing.T, served bool, meta *dynamicfake.FakeDynamicClient) (*Source, *recorder) {
	t.Helper()
	client := fake.NewClientset()
	if served {
		fixture.ServeLinks(client)
	}
	for _, o := range []any{
		fixture.HeadlessMirror("ns", "db", "east"), fixture.HeadlessMirror("ns", "db", "west"), fixture.HeadlessMirror("ns", "kv", "west"),
	} {
		create(t, client, o)
	}
	rec := &recorder{changed: map[Key]int{}}
	src, err := New(Config{Client: client, APIs: fakeapi.For(client), Links: meta, LinksPoll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src.AddHandler(rec)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	src.Start(ctx)
	if !src.WaitForSync(ctx) {
		t.Fatal("not synced")
	}
	return src, rec
}

func newMeta(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return fixture.LinkClient(objs...)
}

func drainsOf(src *Source) []string {
	var out []string
	for _, d := range src.Drains().Clusters {
		out = append(out, d.Cluster+"="+d.Level.String()+" "+d.Link)
	}
	return out
}

func TestALinksDrainReachesTheInputsOfItsClustersBases(t *testing.T) {
	since := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	meta := newMeta(link("east", "shared", since), link("west", "", since))
	src, rec := startWithLinks(t, true, meta)
	eventually(t, "east drained", func() bool { return len(src.Drains().Clusters) == 1 })
	if got := drainsOf(src); !slices.Equal(got, []string{"east=shared linkerd-multicluster/east"}) {
		t.Fatalf("drains %q", got)
	}
	if d := src.Drains().Clusters[0]; !d.Since.Equal(since) {
		t.Errorf("since %v, want the drain annotation's manager's time %v", d.Since, since)
	}
	if got := src.Input(Key{"ns", "db"}).Drains; got["east"] != aggregate.DrainShared || len(got) != 1 {
		t.Errorf("db's input drains %v", got)
	}
	rec.reset()

	// east to all: db changes, kv (west only) does not.
	res := meta.Resource(linkGVR).Namespace("linkerd-multicluster")
	update := func(u *unstructured.Unstructured) {
		t.Helper()
		if _, err := res.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	all := link("east", "all", since)
	all.SetResourceVersion("2")
	update(all)
	eventually(t, "east drained all", func() bool { return src.Input(Key{"ns", "db"}).Drains["east"] == aggregate.DrainAll })
	eventually(t, "db told", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return rec.changed[Key{"ns", "db"}] > 0 })
	if n := rec.reset()[Key{"ns", "kv"}]; n != 0 {
		t.Errorf("kv told %d times of east's drain; it has no member of east", n)
	}

	// An unknown value (a typo) keeps the drain the Link had, reported once.
	odd := link("east", "true", since)
	odd.SetResourceVersion("3")
	update(odd)
	eventually(t, "the unknown value reported", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.skipped) > 0 })
	rec.mu.Lock()
	skipped := slices.Clone(rec.skipped)
	rec.mu.Unlock()
	if len(skipped) != 1 || !strings.Contains(skipped[0], "Link east: InvalidDrain") || !strings.Contains(skipped[0], `"true"`) || !strings.Contains(skipped[0], "stays as it was") {
		t.Errorf("skipped %q", skipped)
	}
	if got := drainsOf(src); !slices.Equal(got, []string{"east=all linkerd-multicluster/east"}) {
		t.Errorf("drains after an unknown value %q, want east's all kept", got)
	}
	if got := src.Drains().InvalidLinks; !slices.Equal(got, []string{`linkerd-multicluster/east: "true"`}) {
		t.Errorf("invalid Links %q", got)
	}
	undrained := link("east", "", since)
	undrained.SetResourceVersion("4")
	update(undrained)
	eventually(t, "east undrained", func() bool { return len(src.Drains().Clusters) == 0 })

	// West drained, then its Link deleted: undrained.
	west := link("west", "shared", since)
	west.SetResourceVersion("5")
	update(west)
	eventually(t, "west drained", func() bool { return slices.Equal(drainsOf(src), []string{"west=shared linkerd-multicluster/west"}) })
	if err := res.Delete(context.Background(), "west", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "west undrained", func() bool { return len(src.Drains().Clusters) == 0 && src.Input(Key{"ns", "kv"}).Drains == nil })
}

// Without Linkerd's CRD the source syncs at once and drains nothing; the
// Links are read once they are served.
func TestLinksAbsentThenServed(t *testing.T) {
	src, _ := startWithLinks(t, false, newMeta(link("east", "all", time.Now())))
	if src.Drains().LinksReadable || len(src.Drains().Clusters) != 0 {
		t.Fatalf("absent %v, drains %q", !src.Drains().LinksReadable, drainsOf(src))
	}

	// Served, but the CRD not yet established (404), then listed.
	meta := newMeta(link("east", "all", time.Now()))
	var served atomic.Bool
	meta.PrependReactor("list", LinkResource, func(clienttesting.Action) (bool, runtime.Object, error) {
		if served.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewNotFound(linkGVR.GroupResource(), "")
	})
	src, _ = startWithLinks(t, true, meta)
	if src.Drains().LinksReadable || len(src.Drains().Clusters) != 0 {
		t.Fatalf("absent %v, drains %q", !src.Drains().LinksReadable, drainsOf(src))
	}
	served.Store(true)
	eventually(t, "east drained once the Links are served", func() bool { return slices.Equal(drainsOf(src), []string{"east=all linkerd-multicluster/east"}) })
	if !src.Drains().LinksReadable {
		t.Error("still absent")
	}
}

// Forbidden (a role without the Links) drains nothing and blocks nothing.
func TestLinksForbiddenDrainNothing(t *testing.T) {
	meta := newMeta(link("east", "all", time.Now()))
	meta.PrependReactor("list", LinkResource, func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(linkGVR.GroupResource(), "", nil)
	})
	src, _ := startWithLinks(t, true, meta)
	if src.Drains().LinksReadable || len(src.Drains().Clusters) != 0 {
		t.Fatalf("absent %v, drains %q", !src.Drains().LinksReadable, drainsOf(src))
	}
}

// Links that can no longer be read (a 403 after a chart upgrade rebound the
// rights, a CRD being replaced) keep the drains last read; never read,
// there are none.
func TestLinksUnreadableAfterAListKeepTheirDrains(t *testing.T) {
	since := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	src := indexOf(fixture.HeadlessMirror("ns", "db", "east"))
	l := &linkFeed{s: src}
	src.links = l
	l.replace([]unstructured.Unstructured{*link("east", "shared", since)})
	l.listed = true
	if kept := l.unreadable(errors.New("links.multicluster.linkerd.io is forbidden")); kept != 1 || !slices.Equal(drainsOf(src), []string{"east=shared linkerd-multicluster/east"}) || src.Drains().LinksReadable {
		t.Errorf("unreadable after a list: kept %d, drains %q, absent %v; want east's kept", kept, drainsOf(src), !src.Drains().LinksReadable)
	}
	l.listed = false
	if kept := l.unreadable(errors.New("links.multicluster.linkerd.io is forbidden")); kept != 0 || len(src.Drains().Clusters) != 0 {
		t.Errorf("never listed: kept %d, drains %q; want none", kept, drainsOf(src))
	}
}

// The READMEs and DESIGN.md say how often an absent Link resource is looked
// for again: DefaultLinksPoll.
func TestTheDocsSayHowOftenLinksAreLookedFor(t *testing.T) {
	want := fmt.Sprintf("%d s", int(DefaultLinksPoll.Seconds()))
	for _, f := range []string{"../README.md", "../plugin/global/README.md", "../DESIGN.md"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if text := strings.Join(strings.Fields(string(data)), " "); !strings.Contains(text, "within "+want) && !strings.Contains(text, "every "+want) {
			t.Errorf("%s does not say the Links are looked for again every %s", f, want)
		}
	}
}

// Linkerd labels a Link's mirrors with its spec.targetClusterName, which
// need not be its name: the drain is that cluster's.
func TestALinkNamedUnlikeItsClusterDrainsItsCluster(t *testing.T) {
	since := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	src, _ := startWithLinks(t, true, newMeta(fixture.LinkTo("prod-east", "east", "all", since), fixture.LinkTo("west", "", "shared", since)))
	eventually(t, "two drains", func() bool { return len(src.Drains().Clusters) == 2 })
	if got := drainsOf(src); !slices.Equal(got, []string{"east=all linkerd-multicluster/prod-east", "west=shared linkerd-multicluster/west"}) {
		t.Errorf("drains %q; want east by prod-east's target, west by its name (no target)", got)
	}
	if got := src.Input(Key{"ns", "db"}).Drains; got["east"] != aggregate.DrainAll || got["prod-east"] != aggregate.NotDrained {
		t.Errorf("db's input drains %v; want east drained all", got)
	}
}

// Whether the Links can be read, and why not, is in the drains the
// handlers are told: the halves' links_readable gauges.
func TestTheDrainsSayWhetherLinksAreReadable(t *testing.T) {
	meta := newMeta(link("east", "all", time.Now()))
	var allowed atomic.Bool
	meta.PrependReactor("list", LinkResource, func(clienttesting.Action) (bool, runtime.Object, error) {
		if allowed.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(linkGVR.GroupResource(), "", errors.New("RBAC: no rule"))
	})
	src, rec := startWithLinks(t, true, meta)
	if d := src.Drains(); d.LinksReadable || !strings.Contains(d.LinksUnreadable, "forbidden") {
		t.Fatalf("readable %v (%q); want not, forbidden", d.LinksReadable, d.LinksUnreadable)
	}
	allowed.Store(true)
	eventually(t, "readable", func() bool { d := src.Drains(); return d.LinksReadable && len(d.Clusters) == 1 })
	eventually(t, "the handler told", func() bool { d := rec.lastDrains(); return d != nil && d.LinksReadable && len(d.Clusters) == 1 })
}

// Links read at the first list, none drained: the handlers are told they
// are readable then, not at the next Link change (a node's pods said "not
// listed yet", links_readable 0, until the first drain).
func TestTheFirstListTellsTheLinksReadable(t *testing.T) {
	_, rec := startWithLinks(t, true, newMeta(link("east", "", time.Now())))
	eventually(t, "the handler told readable", func() bool { d := rec.lastDrains(); return d != nil && d.LinksReadable && len(d.Clusters) == 0 })
}

// A member service's own drain (a local service's, or one Linkerd copied
// onto a headless mirror) is a drain in force, counted with its time: the
// annotation's manager's, kept while its level stays.
func TestServiceDrainsAreDrainsInForce(t *testing.T) {
	written := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	drained := func(svc *corev1.Service, level string, at time.Time) *corev1.Service {
		svc.Annotations[aggregate.AnnotationDrain] = level
		svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "linkerd-service-mirror", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: at},
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:` + aggregate.AnnotationDrain + `":{}}}}`)}}
		return svc
	}
	local := fixture.LocalService("ns", "db")
	local.Annotations = map[string]string{aggregate.AnnotationDrain: "shared"}
	src := indexOf(drained(fixture.HeadlessMirror("ns", "db", "east"), "all", written), fixture.HeadlessMirror("ns", "db", "west"), local)
	rec := &recorder{changed: map[Key]int{}}
	src.AddHandler(rec)
	d := src.Drains()
	if len(d.Services) != 2 || d.Services[0].Service != "ns/db" || d.Services[0].Level != aggregate.DrainShared || d.Services[0].Cluster != "" ||
		d.Services[1].Service != "ns/db-east" || d.Services[1].Cluster != "east" || d.Services[1].Level != aggregate.DrainAll || !d.Services[1].Since.Equal(written) {
		t.Fatalf("service drains %+v", d.Services)
	}
	if c, s := d.Count(aggregate.DrainAll); c != 0 || s != 1 {
		t.Errorf("count all: %d clusters, %d services", c, s)
	}
	if !d.Oldest().Equal(written) {
		t.Errorf("oldest %v, want %v", d.Oldest(), written)
	}

	// Linkerd updates the mirror again (its managed time moves on): the
	// drain's time stays.
	again := drained(fixture.HeadlessMirror("ns", "db", "east"), "all", written.Add(time.Hour))
	again.Spec.Ports = []corev1.ServicePort{{Name: "peer", Port: 7000}}
	again.ResourceVersion = "9"
	src.serviceSinks[""].Upsert(again)
	if got := src.Drains().Services[1]; !got.Since.Equal(written) {
		t.Errorf("since after an update %v, want %v kept", got.Since, written)
	}
	if d := rec.lastDrains(); d == nil || len(d.Services) != 2 {
		t.Errorf("handler told %+v", d)
	}
	// Undrained: gone from the drains in force.
	plain := fixture.HeadlessMirror("ns", "db", "east")
	plain.ResourceVersion = "10"
	src.serviceSinks[""].Upsert(plain)
	if d := rec.lastDrains(); d == nil || len(d.Services) != 1 || d.Services[0].Service != "ns/db" {
		t.Errorf("after east's mirror undrained, handler told %+v", d)
	}
}
