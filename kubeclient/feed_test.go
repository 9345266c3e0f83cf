package kubeclient

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
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

// scriptedAPI answers a Feed's lists and watches: each watch gets the next
// of watches, and the options of every call are written down.
type scriptedAPI struct {
	mu      sync.Mutex
	calls   []string
	lists   []func(metav1.ListOptions) (runtime.Object, error)
	watches []func(metav1.ListOptions) (watch.Interface, error)
}

func (a *scriptedAPI) list(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
	a.mu.Lock()
	a.calls = append(a.calls, fmt.Sprintf("list limit=%d continue=%s", o.Limit, o.Continue))
	if len(a.lists) == 0 {
		a.mu.Unlock()
		return nil, fmt.Errorf("unscripted list")
	}
	next := a.lists[0]
	a.lists = a.lists[1:]
	a.mu.Unlock()
	return next(o)
}

func (a *scriptedAPI) watch(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	a.mu.Lock()
	stream := o.SendInitialEvents != nil && *o.SendInitialEvents
	a.calls = append(a.calls, fmt.Sprintf("watch rv=%s stream=%v", o.ResourceVersion, stream))
	if len(a.watches) == 0 {
		a.mu.Unlock()
		return watch.NewFake(), nil // quiet until stopped
	}
	next := a.watches[0]
	a.watches = a.watches[1:]
	a.mu.Unlock()
	return next(o)
}

func (a *scriptedAPI) called() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// events is a watch that delivers evs, then stays open.
func events(evs ...watch.Event) func(metav1.ListOptions) (watch.Interface, error) {
	return func(metav1.ListOptions) (watch.Interface, error) {
		w := watch.NewFakeWithChanSize(len(evs), false)
		for _, ev := range evs {
			w.Action(ev.Type, ev.Object)
		}
		return w, nil
	}
}

func gone() watch.Event {
	s := apierrors.NewResourceExpired("too old resource version").Status()
	return watch.Event{Type: watch.Error, Object: &s}
}

func page(cont, rv string, items ...corev1.Pod) func(metav1.ListOptions) (runtime.Object, error) {
	return func(metav1.ListOptions) (runtime.Object, error) {
		return &corev1.PodList{ListMeta: metav1.ListMeta{Continue: cont, ResourceVersion: rv}, Items: items}, nil
	}
}

func runFeed(t *testing.T, api *scriptedAPI, stream bool) (*Feed, *recordingSink) {
	t.Helper()
	sink := &recordingSink{}
	f := &Feed{Name: "test", List: api.list, Watch: api.watch, Sink: sink, Stream: stream, PageSize: 2}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go f.Run(ctx)
	return f, sink
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

func TestFeedStreamsTheListThenFollowsFromItsVersion(t *testing.T) {
	api := &scriptedAPI{watches: []func(metav1.ListOptions) (watch.Interface, error){
		events(
			watch.Event{Type: watch.Added, Object: pod("a", "3")},
			watch.Event{Type: watch.Bookmark, Object: bookmark("4", false)}, // progress, not the end
			watch.Event{Type: watch.Added, Object: pod("b", "5")},
			watch.Event{Type: watch.Bookmark, Object: bookmark("7", true)},
		),
		events(
			watch.Event{Type: watch.Modified, Object: pod("a", "8")},
			watch.Event{Type: watch.Deleted, Object: pod("b", "9")},
		),
	}}
	f, sink := runFeed(t, api, true)
	sinkSees(t, sink, "listing", "upsert a@3", "upsert b@5", "listed", "upsert a@8", "delete b@9")
	if !f.HasSynced() {
		t.Error("not synced after the list")
	}
	if calls := api.called(); !slices.Equal(calls[:2], []string{"watch rv= stream=true", "watch rv=7 stream=false"}) {
		t.Errorf("calls %v: want a streamed list, then a watch from the list's version", calls)
	}
}

func TestFeedListsInPagesWhereItCannotStream(t *testing.T) {
	refused := func(metav1.ListOptions) (watch.Interface, error) {
		return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "",
			field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "not enabled")})
	}
	api := &scriptedAPI{
		watches: []func(metav1.ListOptions) (watch.Interface, error){refused, events(gone())},
		lists: []func(metav1.ListOptions) (runtime.Object, error){
			page("c1", "", *pod("a", "3"), *pod("b", "4")),
			// The pages' version was compacted away: the list starts over.
			func(metav1.ListOptions) (runtime.Object, error) {
				return nil, apierrors.NewResourceExpired("continue expired")
			},
			page("c1", "", *pod("a", "3"), *pod("b", "4")),
			page("", "10", *pod("c", "6")),
			page("", "20", *pod("a", "11")), // the relist after 410
		},
	}
	_, sink := runFeed(t, api, true)
	sinkSees(t, sink, "listing", "upsert a@3", "upsert b@4", "listing", "upsert a@3", "upsert b@4", "upsert c@6", "listed",
		"listing", "upsert a@11", "listed")
	want := []string{"watch rv= stream=true", "list limit=2 continue=", "list limit=2 continue=c1", "list limit=2 continue=",
		"list limit=2 continue=c1", "watch rv=10 stream=false", "list limit=2 continue=", "watch rv=20 stream=false"}
	if calls := api.called(); !slices.Equal(calls, want) {
		t.Errorf("calls\n  %v\nwant (streaming tried once, never again)\n  %v", calls, want)
	}
}

// A watch whose version is gone (410) lists again; the sink is told where
// the list starts and ends, to drop what the list no longer holds.
func TestFeedListsAgainWhenTheVersionIsGone(t *testing.T) {
	api := &scriptedAPI{watches: []func(metav1.ListOptions) (watch.Interface, error){
		events(watch.Event{Type: watch.Added, Object: pod("a", "3")}, watch.Event{Type: watch.Bookmark, Object: bookmark("5", true)}),
		events(watch.Event{Type: watch.Modified, Object: pod("a", "6")}, gone()),
		events(watch.Event{Type: watch.Added, Object: pod("b", "8")}, watch.Event{Type: watch.Bookmark, Object: bookmark("9", true)}),
	}}
	_, sink := runFeed(t, api, true)
	sinkSees(t, sink, "listing", "upsert a@3", "listed", "upsert a@6", "listing", "upsert b@8", "listed")
}
