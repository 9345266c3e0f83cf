package kubeclient

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func svc(rv string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", ResourceVersion: rv}}
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return watch.Event{}
}

// A stream that ends (an API server restarting) is started again from the
// last version delivered, with the caller's selectors, and the caller's watch
// goes on.
func TestWatchResumesFromTheLastVersion(t *testing.T) {
	fake := newFakeWatches()
	w, err := resumingWatch(fake.watch)(t.Context(), metav1.ListOptions{ResourceVersion: "4", LabelSelector: "a=b"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first := <-fake.streams
	go first.Add(svc("5"))
	if ev := next(t, w); ev.Type != watch.Added {
		t.Fatalf("got %v", ev.Type)
	}
	first.Stop() // the stream ends
	second := <-fake.streams
	go second.Modify(svc("6"))
	if ev := next(t, w); ev.Type != watch.Modified || ev.Object.(*corev1.Service).ResourceVersion != "6" {
		t.Fatalf("got %v %v", ev.Type, ev.Object)
	}
	if asked := fake.asked(); len(asked) != 2 || asked[0].ResourceVersion != "4" || asked[1].ResourceVersion != "5" || asked[1].LabelSelector != "a=b" {
		t.Errorf("watches started with %+v, want versions 4 then 5 with selector a=b", asked)
	}
}

// A version compacted away ends the watch with 410 Gone, so that the
// reflector lists again, whether the API server says so in the stream or
// when the watch starts.
func TestCompactedVersionEndsTheWatch(t *testing.T) {
	watchFn := func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		return nil, apierrors.NewResourceExpired("too old resource version: 4 (9)")
	}
	w, err := resumingWatch(watchFn)(t.Context(), metav1.ListOptions{ResourceVersion: "4"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := next(t, w)
	if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != http.StatusGone {
		t.Fatalf("got %v %v, want an Error event with 410", ev.Type, ev.Object)
	}
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Error("the watch went on after 410")
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch did not end after 410")
	}
}

// A watch without a position (a list streamed as a watch, or from "any
// version") is passed through as it is.
func TestWatchWithoutVersionPassesThrough(t *testing.T) {
	fw := watch.NewFake()
	watchFn := func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil }
	for _, o := range []metav1.ListOptions{{}, {ResourceVersion: "0"}, {ResourceVersion: "7", SendInitialEvents: new(true)}} {
		if w, _ := resumingWatch(watchFn)(t.Context(), o); w != fw {
			t.Errorf("%+v: wrapped", o)
		}
	}
}

// fakeWatches is a WatchFunc that records each watch's options and hands
// its stream to the test.
type fakeWatches struct {
	mu      sync.Mutex
	opts    []metav1.ListOptions
	streams chan *watch.FakeWatcher
}

func newFakeWatches() *fakeWatches { return &fakeWatches{streams: make(chan *watch.FakeWatcher, 4)} }

func (f *fakeWatches) watch(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	f.opts = append(f.opts, o)
	f.mu.Unlock()
	w := watch.NewFake()
	f.streams <- w
	return w, nil
}

// asked is the options of every watch started so far.
func (f *fakeWatches) asked() []metav1.ListOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.opts)
}
