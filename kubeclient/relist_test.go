package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// minimal is what a stripping transform keeps of a Service (as the
// controller's does of its slices).
func minimal(s *corev1.Service) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: s.Labels, ResourceVersion: s.ResourceVersion}}
}

func labelled(name, rv string) *corev1.Service {
	s := svc(rv)
	s.Name, s.Labels = name, map[string]string{"base": name}
	return s
}

// A watch whose version is gone lists again itself and delivers the
// difference (deletions as the store last held them), then
// resumes from the list: the informer catches up at once, where its
// reflector would list again only after its backoff.
func TestGoneVersionRelistsWithinTheWatch(t *testing.T) {
	var (
		mu    sync.Mutex
		lists []metav1.ListOptions
		fake  = newFakeWatches()
	)
	list := func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		lists = append(lists, o)
		if len(lists) == 1 {
			return &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "10"},
				Items: []corev1.Service{*labelled("a", "5"), *labelled("b", "6")}}, nil
		}
		return &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "20"},
			Items: []corev1.Service{*labelled("a", "15"), *labelled("c", "18")}}, nil
	}
	inf := Informer(nil, list, fake.watch, &corev1.Service{}, 0)
	if err := inf.SetTransform(func(obj any) (any, error) {
		if s, ok := obj.(*corev1.Service); ok {
			return minimal(s), nil
		}
		return obj, nil
	}); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan *corev1.Service, 4)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if m, ok := obj.(*corev1.Service); ok {
			deleted <- m
		}
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go inf.RunWithContext(ctx)

	first := <-fake.streams
	first.Add(labelled("d", "11"))
	keys := func() []string { k := inf.GetStore().ListKeys(); slices.Sort(k); return k }
	waitFor(t, func() bool { return slices.Equal(keys(), []string{"ns/a", "ns/b", "ns/d"}) }, keys)

	gone := time.Now()
	first.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 11 (19)"})
	waitFor(t, func() bool { return slices.Equal(keys(), []string{"ns/a", "ns/c"}) }, keys)
	if took := time.Since(gone); took > 500*time.Millisecond {
		t.Errorf("caught up %v after the 410; the reflector's own relist waits at least 800 ms", took)
	}
	for range 2 {
		select {
		case m := <-deleted:
			if m.Labels["base"] != m.Name {
				t.Errorf("deleted %s with labels %v, want the labels it was stored with", m.Name, m.Labels)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a deletion was not delivered")
		}
	}
	if a, _, _ := inf.GetStore().GetByKey("ns/a"); a.(*corev1.Service).ResourceVersion != "15" {
		t.Errorf("a is at version %s after the relist, want 15", a.(*corev1.Service).ResourceVersion)
	}

	second := <-fake.streams
	second.Add(labelled("e", "21"))
	waitFor(t, func() bool { return slices.Equal(keys(), []string{"ns/a", "ns/c", "ns/e"}) }, keys)
	mu.Lock()
	defer mu.Unlock()
	if len(lists) != 2 || lists[1].ResourceVersion != "" {
		t.Errorf("lists %+v, want the informer's and one relist of the latest version", lists)
	}
	if watches := fake.asked(); watches[len(watches)-1].ResourceVersion != "20" {
		t.Errorf("watching from %q after the relist, want 20", watches[len(watches)-1].ResourceVersion)
	}
	if v := inf.LastSyncResourceVersion(); v != "21" {
		t.Errorf("the reflector is at version %s, want 21", v)
	}
}

func waitFor(t *testing.T, ok func() bool, state func() []string) {
	t.Helper()
	if err := await.Poll(t.Context(), 5*time.Second, 5*time.Millisecond, func(context.Context) string {
		if !ok() {
			return fmt.Sprintf("store holds %v", state())
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
}
