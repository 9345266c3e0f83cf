package kubeclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// watchFrames encodes events as the API server streams a protobuf watch:
// each object in its protobuf envelope, in a WatchEvent, length-delimited.
func watchFrames(t testing.TB, evs ...watch.Event) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok || info.StreamSerializer == nil {
		t.Fatal("no protobuf stream serializer")
	}
	var out bytes.Buffer
	w := info.StreamSerializer.Framer.NewFrameWriter(&out)
	for _, ev := range evs {
		raw := protobufOf(t, ev.Object)
		if err := info.StreamSerializer.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}}, w); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// framesOf is Frames of Pods whose every watch reads body.
func framesOf(body []byte) *Frames {
	return &Frames{kind: "Pod", decoder: scheme.Codecs.UniversalDeserializer(),
		open: func(context.Context, metav1.ListOptions) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(body)), nil
		}}
}

func TestAStreamedListReadInFramesDecodesOnlyWhatItsSinkDoesNotHold(t *testing.T) {
	body := watchFrames(t,
		watch.Event{Type: watch.Added, Object: pod("a", "3")}, // held: not decoded
		watch.Event{Type: watch.Added, Object: pod("b", "4")}, // held at another version
		watch.Event{Type: watch.Deleted, Object: pod("c", "2")},
		watch.Event{Type: watch.Bookmark, Object: bookmark("4", false)},
		watch.Event{Type: watch.Bookmark, Object: bookmark("5", true)},
		watch.Event{Type: watch.Added, Object: pod("d", "6")}, // after the list: the watch's
	)
	sink := &heldSink{holds: map[string]bool{"a@3": true, "b@2": true}}
	f := &Feed{Name: "test", Sink: sink, Stream: true, Frames: framesOf(body)}
	rv, err := f.list(t.Context())
	if err != nil || rv != "5" {
		t.Fatalf("listed at %q (%v), want 5", rv, err)
	}
	want := []string{"listing", "held a@3", "upsert b@4", "delete c@2", "listed"}
	if got := sink.events(); strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("sink saw\n  %s\nwant\n  %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	if f.Held() != 1 {
		t.Errorf("%d held, want 1", f.Held())
	}
}

// countingSink holds everything at version "7", allocating nothing.
type countingSink struct{ held int }

func (*countingSink) Listing()              {}
func (*countingSink) Listed()               {}
func (*countingSink) Upsert(runtime.Object) {}
func (*countingSink) Delete(runtime.Object) {}
func (c *countingSink) Held(p *Peeked) bool {
	if p.ResourceVersion != "7" {
		return false
	}
	if v, ok := p.Label("app"); !ok || v != "db" {
		return false
	}
	c.held++
	return true
}

func TestAnObjectItsSinkHoldsCostsAStreamedListNoAllocation(t *testing.T) {
	list := func(n int) []byte {
		evs := make([]watch.Event, 0, n+1)
		for i := range n {
			p := pod("db-"+strings.Repeat("x", i%40), "7")
			p.Labels = map[string]string{"app": "db", "team": "storage"}
			p.Spec.Containers = []corev1.Container{{Name: "db", Image: "postgres:17"}}
			evs = append(evs, watch.Event{Type: watch.Added, Object: p})
		}
		return watchFrames(t, append(evs, watch.Event{Type: watch.Bookmark, Object: bookmark("8", true)})...)
	}
	allocs := func(n int) float64 {
		sink := &countingSink{}
		f := &Feed{Name: "test", Sink: sink, Stream: true, Frames: framesOf(list(n))}
		a := testing.AllocsPerRun(5, func() {
			if _, err := f.list(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
		if sink.held != 6*n { // AllocsPerRun runs it once more, first
			t.Fatalf("%d of %d held", sink.held, 6*n)
		}
		return a
	}
	few, many := allocs(100), allocs(1100)
	// What a list costs whatever its length (its request, the end's
	// bookmark, the frame buffer growing) is the same in both.
	if perObject := (many - few) / 1000; perObject > 0.01 {
		t.Errorf("a held object cost %.2f allocations (%v for 100, %v for 1,100 objects)", perObject, few, many)
	}
}

func TestAStreamedListEndsWithTheWatchsError(t *testing.T) {
	status := apierrors.NewResourceExpired("too old resource version").Status()
	f := &Feed{Name: "test", Sink: &recordingSink{}, Stream: true,
		Frames: framesOf(watchFrames(t, watch.Event{Type: watch.Error, Object: &status}))}
	if _, err := f.list(t.Context()); !apierrors.IsResourceExpired(err) {
		t.Errorf("got %v, want the 410 sent", err)
	}
	whole := watchFrames(t, watch.Event{Type: watch.Added, Object: pod("a", "3")})
	for name, body := range map[string][]byte{"ended": whole, "cut in a frame": whole[:len(whole)-3], "empty": nil} {
		f := &Feed{Name: "test", Sink: &recordingSink{}, Stream: true, Frames: framesOf(body)}
		if _, err := f.streamFrames(t.Context()); err == nil || errors.Is(err, errNotFrames) {
			t.Errorf("%s: got %v, want the list's end missed", name, err)
		}
	}
}

func TestAStreamNotInFramesIsWatchedThroughClientGo(t *testing.T) {
	api := &scriptedAPI{watches: []func(metav1.ListOptions) (watch.Interface, error){
		events(watch.Event{Type: watch.Added, Object: pod("a", "3")}, watch.Event{Type: watch.Bookmark, Object: bookmark("5", true)}),
	}}
	sink := &recordingSink{}
	f := &Feed{Name: "test", Sink: sink, Stream: true, Watch: api.watch,
		Frames: framesOf([]byte(`{"type":"ADDED","object":{"kind":"Pod"}}` + "\n"))}
	if rv, err := f.list(t.Context()); err != nil || rv != "5" {
		t.Fatalf("listed at %q (%v), want 5", rv, err)
	}
	if !f.noFrames.Load() {
		t.Error("the feed would read frames again")
	}
	if got := strings.Join(sink.events(), ", "); got != "listing, listing, upsert a@3, listed" {
		t.Errorf("sink saw %s", got)
	}
}

func TestPeekedReadsTheLabelsAsked(t *testing.T) {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-0-east-x", Namespace: "prod", ResourceVersion: "12",
		Labels: map[string]string{"kubernetes.io/service-name": "db-0-east", "mirror.linkerd.io/headless-mirror-svc-name": "db-east", "empty": ""}}}
	data := protobufOf(t, sl)
	for _, borrowed := range []bool{false, true} {
		p, ok, err := peekMeta(data, "EndpointSlice", borrowed)
		if !ok || err != nil || p.Namespace != "prod" || p.Name != "db-0-east-x" || p.ResourceVersion != "12" {
			t.Fatalf("peeked %+v (%v, %v)", p, ok, err)
		}
		for key, want := range sl.Labels {
			if v, ok := p.Label(key); !ok || v != want {
				t.Errorf("label %s: %q (%v), want %q", key, v, ok, want)
			}
		}
		if v, ok := p.Label("app"); ok {
			t.Errorf("a label it has not: %q", v)
		}
	}
	if _, ok, _ := peekMeta(data, "Service", true); ok {
		t.Error("an EndpointSlice peeked as a Service")
	}
}

// Whatever a stream holds, reading it ends in a list or an error, never a
// panic, and never in more than the frames it holds.
func FuzzStreamedFrames(f *testing.F) {
	labelled := pod("a", "3")
	labelled.Labels = map[string]string{"app": "db"}
	f.Add(watchFrames(f, watch.Event{Type: watch.Added, Object: labelled}, watch.Event{Type: watch.Bookmark, Object: bookmark("5", true)}))
	f.Add(watchFrames(f, watch.Event{Type: watch.Deleted, Object: pod("b", "7")}))
	f.Add([]byte{0, 0, 0, 2, 0x0a, 0x00})
	f.Add(watchFrames(f, watch.Event{Type: watch.Bookmark, Object: bookmark("", true)}))
	f.Fuzz(func(t *testing.T, body []byte) {
		sink := &countingSink{}
		feed := &Feed{Name: "fuzz", Sink: sink, Stream: true, Frames: framesOf(body)}
		rv, err := feed.streamFrames(context.Background())
		if err == nil && rv == "" {
			t.Error("a list ended without a version")
		}
		if sink.held > len(body)/8 {
			t.Errorf("%d objects held from %d bytes", sink.held, len(body))
		}
	})
}
