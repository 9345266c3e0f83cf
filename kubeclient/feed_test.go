package kubeclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
)

// recordingSink writes down what a Feed delivers.
type recordingSink struct {
	mu  sync.Mutex
	got []string
}

func (r *recordingSink) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}
func (r *recordingSink) Listing()                  { r.add("listing") }
func (r *recordingSink) Listed()                   { r.add("listed") }
func (r *recordingSink) Upsert(obj runtime.Object) { r.add("upsert " + nameOf(obj)) }
func (r *recordingSink) Delete(obj runtime.Object) { r.add("delete " + nameOf(obj)) }
func (r *recordingSink) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// currentSink has some objects current: the feed decodes only the others.
type currentSink struct {
	recordingSink
	current map[string]bool // name@rv
}

func (h *currentSink) Current(p *Peeked) bool {
	if h.current[p.Name+"@"+p.ResourceVersion] {
		h.add("current " + p.Name + "@" + p.ResourceVersion)
		return true
	}
	return false
}

func nameOf(obj runtime.Object) string {
	p := obj.(*corev1.Pod)
	return p.Name + "@" + p.ResourceVersion
}

func pod(name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv}}
}

func bookmark(rv string, end bool) *corev1.Pod {
	p := pod("", rv)
	if end {
		p.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return p
}

// protobufOf encodes obj as the API server sends it in protobuf: in its
// envelope, at its group version (test/fakeapi's Encode, which imports
// this package).
func protobufOf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	data, err := encodeProtobuf(obj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func encodeProtobuf(obj runtime.Object) ([]byte, error) {
	kinds, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		return nil, err
	}
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	return runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, kinds[0].GroupVersion()), obj)
}

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

// scriptedAPI answers a Feed's pages, streamed lists and watches: each call
// gets the next of its kind's script, and each call is written down. A
// streamed list not scripted is refused (422), as an API server that does
// not stream refuses it; a watch not scripted stays quiet until stopped.
type scriptedAPI struct {
	mu      sync.Mutex
	calls   []string
	pages   []func() (runtime.Object, error)
	streams []func() ([]byte, error)
	watches []func(context.Context) (io.ReadCloser, error)
}

func (a *scriptedAPI) record(call string) {
	a.mu.Lock()
	a.calls = append(a.calls, call)
	a.mu.Unlock()
}

func next[T any](a *scriptedAPI, script *[]T) (T, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var none T
	if len(*script) == 0 {
		return none, false
	}
	n := (*script)[0]
	*script = (*script)[1:]
	return n, true
}

// api is a's Pods.
func (a *scriptedAPI) api() API {
	return API{Kind: "Pod", New: func() runtime.Object { return &corev1.Pod{} },
		Page: func(_ context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			a.record(fmt.Sprintf("page limit=%d", o.Limit))
			page, ok := next(a, &a.pages)
			if !ok {
				return nil, fmt.Errorf("unscripted page")
			}
			list, err := page()
			if err != nil {
				return nil, err
			}
			body, err := encodeProtobuf(list)
			return io.NopCloser(bytes.NewReader(body)), err
		},
		Watch: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			if o.SendInitialEvents != nil {
				a.record(fmt.Sprintf("stream initial=%v", *o.SendInitialEvents))
				s, ok := next(a, &a.streams)
				if !ok {
					s = refused
				}
				body, err := s()
				return io.NopCloser(bytes.NewReader(body)), err
			}
			a.record("watch rv=" + o.ResourceVersion)
			w, ok := next(a, &a.watches)
			if !ok {
				return quiet(ctx), nil
			}
			return w(ctx)
		},
	}
}

func (a *scriptedAPI) called() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// quiet is a watch's body that sends nothing until ctx is done.
func quiet(ctx context.Context) io.ReadCloser {
	r, w := io.Pipe()
	context.AfterFunc(ctx, func() { w.CloseWithError(ctx.Err()) })
	return r
}

// events is a watch that delivers evs, then stays open.
func events(t testing.TB, evs ...watch.Event) func(context.Context) (io.ReadCloser, error) {
	body := watchFrames(t, evs...)
	return func(ctx context.Context) (io.ReadCloser, error) {
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), quiet(ctx)), io.NopCloser(nil)}, nil
	}
}

// ended is a watch that delivers evs, then ends, as every watch does when
// its API server restarts.
func ended(t testing.TB, evs ...watch.Event) func(context.Context) (io.ReadCloser, error) {
	body := watchFrames(t, evs...)
	return func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}

// frames is a streamed list of evs.
func frames(t testing.TB, evs ...watch.Event) func() ([]byte, error) {
	body := watchFrames(t, evs...)
	return func() ([]byte, error) { return body, nil }
}

// refused is an API server that does not stream lists (422).
func refused() ([]byte, error) {
	return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "",
		field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "not enabled")})
}

func gone() watch.Event {
	s := apierrors.NewResourceExpired("too old resource version").Status()
	return watch.Event{Type: watch.Error, Object: &s}
}

func page(rv string, items ...corev1.Pod) func() (runtime.Object, error) {
	return func() (runtime.Object, error) {
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: items}, nil
	}
}

// counter is a metric's counter.
type counter struct{ atomic.Int64 }

func (c *counter) Inc() { c.Add(1) }

func runFeed(t *testing.T, api API, sink Sink) *Feed {
	t.Helper()
	f := &Feed{Name: "test", API: api, Sink: sink}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go f.Run(ctx)
	return f
}

// sinkSees waits until the sink has seen want, in order, and nothing else.
func sinkSees(t *testing.T, sink *recordingSink, want ...string) {
	t.Helper()
	err := await.Poll(t.Context(), 5*time.Second, 5*time.Millisecond, func(context.Context) string {
		if got := sink.events(); !slices.Equal(got, want) {
			return fmt.Sprintf("sink saw\n  %s\nwant\n  %s", strings.Join(got, ", "), strings.Join(want, ", "))
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
}

// apiCalled waits until the API has been called as want says, in order: the
// sink hears "listed" before the feed starts its watch.
func apiCalled(t *testing.T, api *scriptedAPI, want ...string) {
	t.Helper()
	err := await.Poll(t.Context(), 5*time.Second, 5*time.Millisecond, func(context.Context) string {
		if got := api.called(); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
			return fmt.Sprintf("calls\n  %s\nwant\n  %s", strings.Join(got, ", "), strings.Join(want, ", "))
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFeedStreamsTheListThenFollowsFromItsVersion(t *testing.T) {
	api := &scriptedAPI{
		streams: []func() ([]byte, error){frames(t,
			watch.Event{Type: watch.Added, Object: pod("a", "3")},
			watch.Event{Type: watch.Bookmark, Object: bookmark("4", false)}, // progress, not the end
			watch.Event{Type: watch.Added, Object: pod("b", "5")},
			watch.Event{Type: watch.Bookmark, Object: bookmark("7", true)},
		)},
		watches: []func(context.Context) (io.ReadCloser, error){events(t,
			watch.Event{Type: watch.Modified, Object: pod("a", "8")},
			watch.Event{Type: watch.Deleted, Object: pod("b", "9")},
		)},
	}
	sink := &recordingSink{}
	f := runFeed(t, api.api(), sink)
	sinkSees(t, sink, "listing", "upsert a@3", "upsert b@5", "listed", "upsert a@8", "delete b@9")
	if !f.HasSynced() || f.lastPath() != Streamed {
		t.Errorf("synced %v, path %q after a streamed list", f.HasSynced(), f.lastPath())
	}
	apiCalled(t, api, "stream initial=true", "watch rv=7") // a streamed list, then a watch from its version
}

// Where the API server refuses a streamed list (1.31, 1.33), the feed lists
// through the list API, in one response; it asks again at its next list,
// and streams once the API server does (a control plane upgraded in
// place). Each list is counted by its path.
func TestFeedListsInPagesWhereTheAPIServerDoesNotStreamAndAsksAgainAtEachList(t *testing.T) {
	api := &scriptedAPI{
		streams: []func() ([]byte, error){refused, refused,
			frames(t, watch.Event{Type: watch.Added, Object: pod("a", "21")}, watch.Event{Type: watch.Bookmark, Object: bookmark("22", true)})},
		pages: []func() (runtime.Object, error){
			page("10", *pod("a", "3"), *pod("b", "4"), *pod("c", "6")),
			page("20", *pod("a", "11")), // the relist after 410
		},
		watches: []func(context.Context) (io.ReadCloser, error){events(t, gone()), events(t, gone())},
	}
	streamed, paged := &counter{}, &counter{}
	sink := &recordingSink{}
	f := &Feed{Name: "test", API: api.api(), Sink: sink, Counters: Counters{Streamed: streamed, Paged: paged}}
	go f.Run(t.Context())
	sinkSees(t, sink, "listing", "upsert a@3", "upsert b@4", "upsert c@6", "listed",
		"listing", "upsert a@11", "listed", "listing", "upsert a@21", "listed")
	apiCalled(t, api, "stream initial=true", "page limit=0",
		"watch rv=10", "stream initial=true", "page limit=0", "watch rv=20",
		"stream initial=true", "watch rv=22")
	if f.lastPath() != Streamed || streamed.Load() != 1 || paged.Load() != 2 {
		t.Errorf("path %q, %d lists streamed and %d paged; want streamed, 1 and 2", f.lastPath(), streamed.Load(), paged.Load())
	}
}

// A watch whose version is gone (410) lists again; the sink is told where
// the list starts and ends, to drop what the list no longer has.
func TestFeedListsAgainWhenTheVersionIsGone(t *testing.T) {
	api := &scriptedAPI{
		streams: []func() ([]byte, error){
			frames(t, watch.Event{Type: watch.Added, Object: pod("a", "3")}, watch.Event{Type: watch.Bookmark, Object: bookmark("5", true)}),
			frames(t, watch.Event{Type: watch.Added, Object: pod("b", "8")}, watch.Event{Type: watch.Bookmark, Object: bookmark("9", true)}),
		},
		watches: []func(context.Context) (io.ReadCloser, error){events(t, watch.Event{Type: watch.Modified, Object: pod("a", "6")}, gone())},
	}
	sink := &recordingSink{}
	runFeed(t, api.api(), sink)
	sinkSees(t, sink, "listing", "upsert a@3", "listed", "upsert a@6", "listing", "upsert b@8", "listed")
}

// A watch that ends (an API server restarting) is started again from the
// version of the last event delivered, a deletion's or a bookmark's too
// (each event is read afresh: nothing of the one before), and the feed goes
// on without listing.
func TestFeedResumesAWatchFromTheLastVersion(t *testing.T) {
	api := &scriptedAPI{
		pages: []func() (runtime.Object, error){page("4")},
		watches: []func(context.Context) (io.ReadCloser, error){
			ended(t, watch.Event{Type: watch.Added, Object: pod("a", "5")}),
			ended(t, watch.Event{Type: watch.Added, Object: pod("b", "6")}, watch.Event{Type: watch.Deleted, Object: pod("b", "7")}),
			ended(t, watch.Event{Type: watch.Added, Object: pod("c", "8")}, watch.Event{Type: watch.Bookmark, Object: bookmark("9", false)}),
			events(t, watch.Event{Type: watch.Modified, Object: pod("a", "10")}),
		},
	}
	sink := &recordingSink{}
	runFeed(t, api.api(), sink)
	sinkSees(t, sink, "listing", "listed", "upsert a@5", "upsert b@6", "delete b@7", "upsert c@8", "upsert a@10")
	apiCalled(t, api, "stream initial=true", "page limit=0", "watch rv=4", "watch rv=5", "watch rv=7", "watch rv=9")
}

// A version compacted away ends the watch with 410 Gone, whether the API
// server says so in the stream or when the watch starts: the feed lists
// again. Any other refusal is retried, from the same version.
func TestACompactedVersionEndsTheWatch(t *testing.T) {
	expired := apierrors.NewResourceExpired("too old resource version: 4 (9)")
	for name, watches := range map[string][]func(context.Context) (io.ReadCloser, error){
		"refused":     {func(context.Context) (io.ReadCloser, error) { return nil, expired }},
		"in the body": {events(t, gone())},
		"after a refusal": {
			func(context.Context) (io.ReadCloser, error) {
				return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil)
			},
			func(context.Context) (io.ReadCloser, error) { return nil, expired },
		},
	} {
		api := &scriptedAPI{watches: watches}
		f := &Feed{Name: "test", API: api.api(), Sink: &recordingSink{}}
		done := make(chan error, 1)
		go func() {
			gone, err := f.follow(t.Context(), "4")
			if err == nil && gone == nil {
				err = fmt.Errorf("no 410")
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v; want a 410, to list again", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the watch went on after 410", name)
		}
		if want := strings.Repeat("watch rv=4 ", len(watches)); strings.Join(api.called(), " ")+" " != want {
			t.Errorf("%s: calls %v, want %q", name, api.called(), want)
		}
	}
}

// heardGauge counts what it was told.
type heardGauge struct{ atomic.Int64 }

func (g *heardGauge) SetToCurrentTime() { g.Add(1) }

// A feed hears from the API server at each list and at each event of its
// watch, bookmarks included.
func TestFeedHearsFromListsAndBookmarks(t *testing.T) {
	api := &scriptedAPI{
		pages:   []func() (runtime.Object, error){page("4")},
		watches: []func(context.Context) (io.ReadCloser, error){events(t, watch.Event{Type: watch.Bookmark, Object: bookmark("5", false)})},
	}
	heard := &heardGauge{}
	f := &Feed{Name: "test", API: api.api(), Sink: &recordingSink{}, Counters: Counters{Heard: heard}}
	go f.Run(t.Context())
	if err := await.Poll(t.Context(), 5*time.Second, 5*time.Millisecond, func(context.Context) string {
		if n := heard.Load(); n < 2 {
			return fmt.Sprintf("heard %d times, want the list and the bookmark", n)
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
}

// skippingClock is a fake clock on which every wait ends at once, the clock
// moved on by its length: a feed runs through its waits as fast as it can,
// and what it does in a minute of the clock's time is counted without
// sleeping.
type skippingClock struct{ *testingclock.FakeClock }

func (c skippingClock) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.Step(d)
	return ch
}

// An API server whose every version is gone by the time a feed uses it (the
// watch after each list; in the second case the list too, which a real one
// serves at its latest version) gets a bounded number of lists a minute:
// relists wait, the wait doubling from 100 ms to 10 s.
func TestFeedListsABoundedNumberOfTimesAMinuteWhereEveryVersionIsGone(t *testing.T) {
	// At the shortest waits (jitter only lengthens them), lists start at
	// 0, 0.1, 0.3, 0.7, 1.5, 3.1, 6.3 and 12.7 s, then every 10 s.
	const maxLists = 12
	for name, wholeGone := range map[string]bool{"the list answers": false, "every list is gone": true} {
		t.Run(name, func(t *testing.T) {
			clk := skippingClock{testingclock.NewFakeClock(time.Unix(0, 0))}
			start := clk.Now()
			gone := apierrors.NewResourceExpired("too old resource version")
			var mu sync.Mutex
			var calls []string // list and watch, in order
			lists := 0         // lists started within a minute of the clock
			call := func(c string) {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, c)
				if c == "list" && clk.Since(start) < time.Minute {
					lists++
				}
			}
			api := API{Kind: "Pod", New: func() runtime.Object { return &corev1.Pod{} },
				Page: func(ctx context.Context, _ metav1.ListOptions) (io.ReadCloser, error) {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					call("list")
					if wholeGone {
						return nil, gone
					}
					list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: []corev1.Pod{*pod("a", "3")}}
					body, err := encodeProtobuf(list)
					return io.NopCloser(bytes.NewReader(body)), err
				},
				Watch: func(_ context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
					if o.SendInitialEvents != nil {
						_, err := refused()
						return nil, err
					}
					call("watch")
					return nil, gone
				},
			}
			f := &Feed{Name: "test", API: api, Sink: &recordingSink{}, clock: clk}
			ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logr.Discard()))
			done := make(chan struct{})
			go func() { f.Run(ctx); close(done) }()
			err := await.Poll(t.Context(), time.Minute, time.Millisecond, func(context.Context) string {
				mu.Lock()
				defer mu.Unlock()
				if lists <= maxLists && clk.Since(start) < time.Minute {
					return fmt.Sprintf("%d lists in %v of the clock", lists, clk.Since(start))
				}
				return ""
			})
			cancel()
			<-done
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if lists > maxLists {
				t.Errorf("%d lists in a minute of the API server's versions all gone; want at most %d", lists, maxLists)
			}
			cycle := "list watch "
			if wholeGone {
				cycle = "list "
			}
			got := strings.Join(calls, " ") + " "
			if n := strings.Count(got, "list"); !strings.HasPrefix(strings.Repeat(cycle, n), got) {
				t.Errorf("calls %q; want each list followed by its watch (%q)", got, cycle)
			}
		})
	}
}

// stepReader moves a fake clock on by d when read, then ends: a watch's
// body that ran for d.
type stepReader struct {
	clk skippingClock
	d   time.Duration
}

func (r stepReader) Read([]byte) (int, error) {
	r.clk.Step(r.d)
	return 0, io.EOF
}

// An API server that restarts refuses the resumption of every watch with
// 410 (its watch cache starts at its own revision): the feed lists again at
// once, however many restarts came before, each a few seconds apart as in
// a rolling upgrade of replicated API servers. A watch that ended at once
// before its resumption was refused is no restart: that relist waits, as
// the relists of a watch refused at once do.
func TestARelistAfterARestartDoesNotWait(t *testing.T) {
	const restarts = 30
	for name, tc := range map[string]struct{ watchRuns, outage time.Duration }{
		"a restart every 3 s": {3 * time.Second, 0},
		// Restarts a few seconds apart: the watch after a relist runs a
		// moment before the API server goes, and its resumption waits out
		// the outage (QuickReconnect's retries).
		"a restart right after a relist": {50 * time.Millisecond, 2 * time.Second},
		"watches ending at once":         {0, 0},
	} {
		watchRuns := tc.watchRuns
		t.Run(name, func(t *testing.T) {
			clk := skippingClock{testingclock.NewFakeClock(time.Unix(0, 0))}
			var mu sync.Mutex
			lists, watches := 0, 0
			api := API{Kind: "Pod", New: func() runtime.Object { return &corev1.Pod{} },
				Page: func(ctx context.Context, _ metav1.ListOptions) (io.ReadCloser, error) {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					mu.Lock()
					lists++
					mu.Unlock()
					body, err := encodeProtobuf(&corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}})
					return io.NopCloser(bytes.NewReader(body)), err
				},
				Watch: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
					if o.SendInitialEvents != nil {
						_, err := refused()
						return nil, err
					}
					mu.Lock()
					watches++
					mu.Unlock()
					if o.ResourceVersion == "9" { // the watch after a list: it runs, then its API server goes
						body, err := ended(t, watch.Event{Type: watch.Modified, Object: pod("a", "10")})(ctx)
						return io.NopCloser(io.MultiReader(body, stepReader{clk, watchRuns})), err
					}
					clk.Step(tc.outage)
					return events(t, gone())(ctx) // resumed on the restarted API server
				},
			}
			f := &Feed{Name: "test", API: api, Sink: &recordingSink{}, clock: clk}
			ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logr.Discard()))
			start := clk.Now()
			done := make(chan struct{})
			go func() { f.Run(ctx); close(done) }()
			err := await.Poll(t.Context(), time.Minute, time.Millisecond, func(context.Context) string {
				mu.Lock()
				defer mu.Unlock()
				if lists <= restarts {
					return fmt.Sprintf("%d lists", lists)
				}
				return ""
			})
			cancel()
			<-done
			if err != nil {
				t.Fatal(err)
			}
			// Each restart: the watch's run, then at most 150 ms before
			// its resumption (the wait of a watch whose body ended).
			mu.Lock()
			n := time.Duration(lists)
			mu.Unlock()
			waited := clk.Since(start) - n*(watchRuns+tc.outage)
			if watchRuns > 0 && waited > n*150*time.Millisecond {
				t.Errorf("%d restarts took %v of the clock beyond the watches' runs; want at most 150 ms each, no relist waiting", n, waited)
			}
			if watchRuns == 0 && waited < (n-8)*5*time.Second {
				t.Errorf("%d relists of watches that ended at once waited %v in all; want the relist wait, growing to 10 s", n, waited)
			}
		})
	}
}

// The end of a streamed list is a state change: the bookmark annotated as
// the end of the initial events ends a list only while the feed lists; on
// the watch after a list it is progress, and the sink hears nothing.
func TestABookmarkEndsAListOnlyWhileListing(t *testing.T) {
	for _, listing := range []bool{true, false} {
		sink := &recordingSink{}
		f := &Feed{Name: "test", API: API{Kind: "Pod"}, Sink: sink}
		rv, err := f.handle(listing, watch.Bookmark, nil, func() (runtime.Object, error) { return bookmark("7", true), nil })
		want, wantRV := []string{"listed"}, "7"
		if !listing {
			want, wantRV = nil, ""
		}
		if got := sink.events(); err != nil || rv != wantRV || !slices.Equal(got, want) {
			t.Errorf("listing %v: the end-of-list bookmark gave %q (%v), and the sink saw %v; want %q and %v", listing, rv, err, got, wantRV, want)
		}
	}
}
