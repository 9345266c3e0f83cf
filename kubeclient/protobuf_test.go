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
)

// bodyAPI is Pods whose every page and watch reads body.
func bodyAPI(body []byte) API {
	read := func(context.Context, metav1.ListOptions) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(body)), nil
	}
	return API{Kind: "Pod", New: func() runtime.Object { return &corev1.Pod{} }, Page: read, Watch: read}
}

func TestAStreamedListDecodesOnlyWhatItsSinkFindsNotCurrent(t *testing.T) {
	body := watchFrames(t,
		watch.Event{Type: watch.Added, Object: pod("a", "3")}, // current: not decoded
		watch.Event{Type: watch.Added, Object: pod("b", "4")}, // present at another version
		watch.Event{Type: watch.Deleted, Object: pod("c", "2")},
		watch.Event{Type: watch.Bookmark, Object: bookmark("4", false)},
		watch.Event{Type: watch.Bookmark, Object: bookmark("5", true)},
		watch.Event{Type: watch.Added, Object: pod("d", "6")}, // after the list: the watch's
	)
	sink := &currentSink{current: map[string]bool{"a@3": true, "b@2": true}}
	current := &counter{}
	f := &Feed{Name: "test", API: bodyAPI(body), Sink: sink, Counters: Counters{Current: current}}
	rv, err := f.stream(t.Context())
	if err != nil || rv != "5" {
		t.Fatalf("listed at %q (%v), want 5", rv, err)
	}
	want := []string{"listing", "current a@3", "upsert b@4", "delete c@2", "listed"}
	if got := sink.events(); strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("sink saw\n  %s\nwant\n  %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	if current.Load() != 1 {
		t.Errorf("%d current, want 1", current.Load())
	}
}

func TestAPagedListDecodesOnlyWhatItsSinkFindsNotCurrent(t *testing.T) {
	a, b := pod("a", "3"), pod("b", "4")
	a.Labels = map[string]string{"app": "db"}
	b.Spec.Containers = []corev1.Container{{Name: "db", Image: "postgres:17"}}
	body := protobufOf(t, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: []corev1.Pod{*a, *b}})
	sink := &currentSink{current: map[string]bool{"a@3": true, "b@2": true}}
	decoded := &decodedSink{currentSink: sink}
	f := &Feed{Name: "test", API: bodyAPI(body), Sink: decoded}
	rv, err := f.pages(t.Context())
	if err != nil || rv != "9" {
		t.Fatalf("listed at %q (%v), want 9", rv, err)
	}
	want := []string{"listing", "current a@3", "upsert b@4", "listed"}
	if got := sink.events(); strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("sink saw\n  %s\nwant\n  %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	if len(decoded.objs) != 1 || decoded.objs[0].Spec.Containers[0].Image != "postgres:17" {
		t.Errorf("decoded %+v, want b in full", decoded.objs)
	}
}

// decodedSink keeps what it is given.
type decodedSink struct {
	*currentSink
	objs []*corev1.Pod
}

func (d *decodedSink) Upsert(obj runtime.Object) {
	d.objs = append(d.objs, obj.(*corev1.Pod))
	d.currentSink.Upsert(obj)
}

// countingSink has everything current at version "7" labelled app=db, allocating
// nothing.
type countingSink struct{ current int }

func (*countingSink) Listing()              {}
func (*countingSink) Listed()               {}
func (*countingSink) Upsert(runtime.Object) {}
func (*countingSink) Delete(runtime.Object) {}
func (c *countingSink) Current(p *Peeked) bool {
	if p.ResourceVersion != "7" {
		return false
	}
	if v, ok := p.Label("app"); !ok || v != "db" {
		return false
	}
	c.current++
	return true
}

func currentPods(n int) []corev1.Pod {
	pods := make([]corev1.Pod, n)
	for i := range pods {
		p := pod("db-"+strings.Repeat("x", i%40), "7")
		p.Labels = map[string]string{"app": "db", "team": "storage"}
		p.Spec.Containers = []corev1.Container{{Name: "db", Image: "postgres:17"}}
		pods[i] = *p
	}
	return pods
}

// What is current in the sink costs a list nothing, streamed or paged: however many
// objects, the same allocations (its request, its end, buffers growing).
func TestAnObjectCurrentInItsSinkCostsAListNoAllocation(t *testing.T) {
	streamed := func(n int) []byte {
		var evs []watch.Event
		for _, p := range currentPods(n) {
			evs = append(evs, watch.Event{Type: watch.Added, Object: &p})
		}
		return watchFrames(t, append(evs, watch.Event{Type: watch.Bookmark, Object: bookmark("8", true)})...)
	}
	paged := func(n int) []byte {
		return protobufOf(t, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "8"}, Items: currentPods(n)})
	}
	for path, body := range map[Path]func(int) []byte{Streamed: streamed, Paged: paged} {
		allocs := func(n int) float64 {
			sink := &countingSink{}
			f := &Feed{Name: "test", API: bodyAPI(body(n)), Sink: sink}
			list := map[Path]func(context.Context) (string, error){Streamed: f.stream, Paged: f.pages}[path]
			a := testing.AllocsPerRun(5, func() {
				if _, err := list(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
			if sink.current != 6*n { // AllocsPerRun runs it once more, first
				t.Fatalf("%s: %d of %d current", path, sink.current, 6*n)
			}
			return a
		}
		few, many := allocs(100), allocs(1100)
		if perObject := (many - few) / 1000; perObject > 0.01 {
			t.Errorf("%s: a current object cost %.2f allocations (%v for 100, %v for 1,100 objects)", path, perObject, few, many)
		}
	}
}

func TestAStreamedListEndsWithTheWatchsError(t *testing.T) {
	status := apierrors.NewResourceExpired("too old resource version").Status()
	f := &Feed{Name: "test", API: bodyAPI(watchFrames(t, watch.Event{Type: watch.Error, Object: &status})), Sink: &recordingSink{}}
	if _, err := f.stream(t.Context()); !apierrors.IsResourceExpired(err) {
		t.Errorf("got %v, want the 410 sent", err)
	}
	whole := watchFrames(t, watch.Event{Type: watch.Added, Object: pod("a", "3")})
	for name, body := range map[string][]byte{"ended": whole, "cut in a frame": whole[:len(whole)-3], "empty": nil,
		"not protobuf": []byte(`{"type":"ADDED","object":{"kind":"Pod"}}` + "\n")} {
		f := &Feed{Name: "test", API: bodyAPI(body), Sink: &recordingSink{}}
		if _, err := f.stream(t.Context()); err == nil || errors.Is(err, errStreamUnsupported) {
			t.Errorf("%s: got %v, want the list's end missed", name, err)
		}
	}
}

func TestABrokenPageIsAnError(t *testing.T) {
	whole := protobufOf(t, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "8"}, Items: currentPods(3)})
	noVersion := protobufOf(t, &corev1.PodList{Items: currentPods(1)})
	for name, body := range map[string][]byte{"cut": whole[:len(whole)-5], "empty": nil, "without a version": noVersion,
		"not protobuf": []byte(`{"kind":"PodList","items":[]}`)} {
		f := &Feed{Name: "test", API: bodyAPI(body), Sink: &recordingSink{}}
		if rv, err := f.pages(t.Context()); err == nil {
			t.Errorf("%s: listed at %q", name, rv)
		}
	}
}

// A list in one response is bounded only by what the response holds; each
// of its objects, by maxMessage.
func TestAListInOneResponseMayBeLargerThanAnObject(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	pods := currentPods(maxMessage/len(big) + 10)
	for i := range pods {
		pods[i].Annotations = map[string]string{"big": big}
	}
	body := protobufOf(t, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "8"}, Items: pods})
	if len(body) <= maxMessage {
		t.Fatalf("a list of %d bytes", len(body))
	}
	sink := &countingSink{}
	f := NewFeed("test", bodyAPI(body), sink)
	if rv, err := f.pages(t.Context()); err != nil || rv != "8" || sink.current != len(pods) {
		t.Errorf("listed %d of %d objects at %q (%v), want all at 8", sink.current, len(pods), rv, err)
	}
	huge := protobufOf(t, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "8"},
		Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{"big": strings.Repeat(big, maxMessage/len(big)+1)}}}}})
	if rv, err := NewFeed("test", bodyAPI(huge), &recordingSink{}).pages(t.Context()); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("an object larger than maxMessage listed at %q (%v)", rv, err)
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

// Whatever a stream contains, reading it ends in a list or an error, never a
// panic, and never in more than the frames it contains.
func FuzzStreamedList(f *testing.F) {
	labelled := pod("a", "7")
	labelled.Labels = map[string]string{"app": "db"}
	f.Add(watchFrames(f, watch.Event{Type: watch.Added, Object: labelled}, watch.Event{Type: watch.Bookmark, Object: bookmark("5", true)}))
	f.Add(watchFrames(f, watch.Event{Type: watch.Deleted, Object: pod("b", "7")}))
	f.Add([]byte{0, 0, 0, 2, 0x0a, 0x00})
	f.Add(watchFrames(f, watch.Event{Type: watch.Bookmark, Object: bookmark("", true)}))
	f.Fuzz(func(t *testing.T, body []byte) {
		sink := &countingSink{}
		feed := &Feed{Name: "fuzz", API: bodyAPI(body), Sink: sink}
		rv, err := feed.stream(context.Background())
		if err == nil && rv == "" {
			t.Error("a list ended without a version")
		}
		if sink.current > len(body)/8 {
			t.Errorf("%d objects current from %d bytes", sink.current, len(body))
		}
	})
}

// Whatever a page contains, reading it ends in a list or an error, never a
// panic, and never in more objects than it contains.
func FuzzListPage(f *testing.F) {
	labelled := pod("a", "7")
	labelled.Labels = map[string]string{"app": "db"}
	f.Add(protobufOf(f, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: []corev1.Pod{*labelled, *pod("b", "3")}}))
	f.Add(protobufOf(f, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}}))
	f.Add(append(append([]byte{}, protobufMagic...), 0x12, 0x04, 0x12, 0x02, 0x0a, 0x00))
	f.Fuzz(func(t *testing.T, body []byte) {
		sink := &countingSink{}
		feed := &Feed{Name: "fuzz", API: bodyAPI(body), Sink: sink}
		_, err := feed.page(context.Background(), new([]byte), new(Peeked))
		if sink.current > len(body)/8 {
			t.Errorf("%d objects current from %d bytes (%v)", sink.current, len(body), err)
		}
	})
}

// sparseSink decodes pods labelled sparse=yes itself, from their message.
type sparseSink struct{ *decodedSink }

func (s *sparseSink) UpsertSparse(p *Peeked) bool {
	if v, _ := p.Label("sparse"); v != "yes" {
		return false
	}
	var whole corev1.Pod
	if err := whole.Unmarshal(p.Message()); err != nil {
		return false
	}
	s.Upsert(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: whole.Name + " sparsely", ResourceVersion: whole.ResourceVersion},
		Spec: corev1.PodSpec{Containers: whole.Spec.Containers}})
	return true
}

// A SparseSink's own decoding stands for the feed's, on every path; the
// objects it declines are decoded whole, and those current not at all.
func TestASparseSinkDecodesWhatItChooses(t *testing.T) {
	a, b, c := pod("a", "3"), pod("b", "4"), pod("c", "5")
	b.Labels = map[string]string{"sparse": "yes"}
	b.Spec.Containers = []corev1.Container{{Name: "db", Image: "postgres:17"}}
	streamed := watchFrames(t, watch.Event{Type: watch.Added, Object: a}, watch.Event{Type: watch.Added, Object: b},
		watch.Event{Type: watch.Added, Object: c}, watch.Event{Type: watch.Bookmark, Object: bookmark("5", true)})
	paged := protobufOf(t, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []corev1.Pod{*a, *b, *c}})
	for path, body := range map[Path][]byte{Streamed: streamed, Paged: paged} {
		sink := &sparseSink{&decodedSink{currentSink: &currentSink{current: map[string]bool{"a@3": true}}}}
		f := &Feed{Name: "test", API: bodyAPI(body), Sink: sink}
		list := map[Path]func(context.Context) (string, error){Streamed: f.stream, Paged: f.pages}[path]
		if rv, err := list(t.Context()); err != nil || rv != "5" {
			t.Fatalf("%s: listed at %q (%v), want 5", path, rv, err)
		}
		want := "listing, current a@3, upsert b sparsely@4, upsert c@5, listed"
		if got := strings.Join(sink.events(), ", "); got != want {
			t.Errorf("%s: sink saw\n  %s\nwant\n  %s", path, got, want)
		}
		if got := sink.objs[0].Spec.Containers; len(got) != 1 || got[0].Image != "postgres:17" {
			t.Errorf("%s: b decoded sparsely from its message as %+v", path, got)
		}
	}
}
