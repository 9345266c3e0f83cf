package source

import (
	"context"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
)

var linkGVR = fixture.LinkGVR

func link(cluster, level string, since time.Time) *metav1.PartialObjectMetadata {
	return fixture.Link(cluster, level, since)
}

// startWithLinks starts a source whose API server serves Links (unless
// served is false) holding links, and a world of db (east, west) and kv
// (west).
func startWithLinks(t *testing.T, served bool, meta *metafake.FakeMetadataClient) (*Source, *recorder) {
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

func newMeta(objs ...runtime.Object) *metafake.FakeMetadataClient { return fixture.LinkClient(objs...) }

func drainsOf(src *Source) []string {
	var out []string
	for _, d := range src.Drains() {
		out = append(out, d.Cluster+"="+d.Level.String()+" "+d.Link)
	}
	return out
}

func TestALinksDrainReachesTheInputsOfItsClustersBases(t *testing.T) {
	since := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	meta := newMeta(link("east", "shared", since), link("west", "", since))
	src, rec := startWithLinks(t, true, meta)
	eventually(t, "east drained", func() bool { return len(src.Drains()) == 1 })
	if got := drainsOf(src); !slices.Equal(got, []string{"east=shared linkerd-multicluster/east"}) {
		t.Fatalf("drains %q", got)
	}
	if d := src.Drains()[0]; !d.Since.Equal(since) {
		t.Errorf("since %v, want the drain annotation's manager's time %v", d.Since, since)
	}
	if got := src.Input(Key{"ns", "db"}).Drains; got["east"] != aggregate.DrainShared || len(got) != 1 {
		t.Errorf("db's input drains %v", got)
	}
	rec.reset()

	// east to all: db changes, kv (west only) does not.
	res := meta.Resource(linkGVR).Namespace("linkerd-multicluster").(metafake.MetadataClient)
	all := link("east", "all", since)
	all.ResourceVersion = "2"
	if _, err := res.UpdateFake(all, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "east drained all", func() bool { return src.Input(Key{"ns", "db"}).Drains["east"] == aggregate.DrainAll })
	eventually(t, "db told", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return rec.changed[Key{"ns", "db"}] > 0 })
	if n := rec.reset()[Key{"ns", "kv"}]; n != 0 {
		t.Errorf("kv told %d times of east's drain; it has no member of east", n)
	}

	// An unknown value (a typo) keeps the drain the Link had, reported once.
	odd := link("east", "true", since)
	odd.ResourceVersion = "3"
	if _, err := res.UpdateFake(odd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	undrained := link("east", "", since)
	undrained.ResourceVersion = "4"
	if _, err := res.UpdateFake(undrained, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "east undrained", func() bool { return len(src.Drains()) == 0 })

	// West drained, then its Link deleted: undrained.
	west := link("west", "shared", since)
	west.ResourceVersion = "5"
	if _, err := res.UpdateFake(west, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "west drained", func() bool { return slices.Equal(drainsOf(src), []string{"west=shared linkerd-multicluster/west"}) })
	if err := res.Delete(context.Background(), "west", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "west undrained", func() bool { return len(src.Drains()) == 0 && src.Input(Key{"ns", "kv"}).Drains == nil })
}

// Without Linkerd's CRD the source syncs at once and drains nothing; the
// Links are read once they are served.
func TestLinksAbsentThenServed(t *testing.T) {
	src, _ := startWithLinks(t, false, newMeta(link("east", "all", time.Now())))
	if !src.LinksAbsent() || len(src.Drains()) != 0 {
		t.Fatalf("absent %v, drains %q", src.LinksAbsent(), drainsOf(src))
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
	if !src.LinksAbsent() || len(src.Drains()) != 0 {
		t.Fatalf("absent %v, drains %q", src.LinksAbsent(), drainsOf(src))
	}
	served.Store(true)
	eventually(t, "east drained once the Links are served", func() bool { return slices.Equal(drainsOf(src), []string{"east=all linkerd-multicluster/east"}) })
	if src.LinksAbsent() {
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
	if !src.LinksAbsent() || len(src.Drains()) != 0 {
		t.Fatalf("absent %v, drains %q", src.LinksAbsent(), drainsOf(src))
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
	l.replace([]metav1.PartialObjectMetadata{*link("east", "shared", since)})
	l.listed = true
	if kept := l.unreadable(); kept != 1 || !slices.Equal(drainsOf(src), []string{"east=shared linkerd-multicluster/east"}) || !src.LinksAbsent() {
		t.Errorf("unreadable after a list: kept %d, drains %q, absent %v; want east's kept", kept, drainsOf(src), src.LinksAbsent())
	}
	l.listed = false
	if kept := l.unreadable(); kept != 0 || len(src.Drains()) != 0 {
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
