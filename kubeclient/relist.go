package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// storeLag bounds the wait for an object the watch delivered to reach the
// informer's store (it passes a queue first) before a relist deletes it.
const storeLag = time.Second

// relister keeps the keys of every object an informer's list and watch
// delivered, so that a watch whose version is gone can list again and
// deliver the difference itself.
type relister struct {
	list  ListFunc
	store cache.Store  // the informer's; deleted objects are taken from it
	typ   reflect.Type // the informer's object type, a pointer

	mu        sync.Mutex
	delivered map[string]bool // keys of the objects delivered and not deleted
}

// listed is the informer's list: what it returns is what was delivered.
func (r *relister) listed(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := r.list(ctx, opts)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	keys := make(map[string]bool, len(items))
	for _, it := range items {
		if k, err := cache.MetaNamespaceKeyFunc(it); err == nil {
			keys[k] = true
		}
	}
	r.mu.Lock()
	r.delivered = keys
	r.mu.Unlock()
	return list, nil
}

func (r *relister) track(ev watch.Event) {
	if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
		return
	}
	k, err := cache.MetaNamespaceKeyFunc(ev.Object)
	if err != nil {
		return
	}
	r.mu.Lock()
	if ev.Type == watch.Deleted {
		delete(r.delivered, k)
	} else {
		r.delivered[k] = true
	}
	r.mu.Unlock()
}

// watch wraps resume (a watch that resumes from a version) into one that
// lists again when its version is gone.
func (r *relister) watch(resume WatchFunc) cache.WatchFuncWithContext {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		inner, err := resume(ctx, opts)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(ctx)
		w := &relistingWatch{r: r, opts: opts, resume: resume, out: make(chan watch.Event), cancel: cancel}
		go w.run(ctx, inner)
		return w, nil
	}
}

type relistingWatch struct {
	r      *relister
	opts   metav1.ListOptions
	resume WatchFunc
	out    chan watch.Event
	cancel context.CancelFunc
}

func (w *relistingWatch) Stop()                          { w.cancel() }
func (w *relistingWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *relistingWatch) run(ctx context.Context, inner watch.Interface) {
	defer close(w.out)
	defer func() { inner.Stop() }()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ev, ok = <-inner.ResultChan():
		}
		if !ok {
			return // the inner watch gave up: the reflector starts another
		}
		if !isGone(ev) {
			w.r.track(ev)
			if !w.send(ctx, ev) {
				return
			}
			continue
		}
		inner.Stop()
		events, rv, err := w.r.relist(ctx, w.opts)
		if err != nil {
			// Hand the 410 on: the reflector lists again itself.
			w.send(ctx, ev)
			return
		}
		for _, e := range events {
			w.r.track(e)
			if !w.send(ctx, e) {
				return
			}
		}
		o := w.opts
		o.ResourceVersion = rv
		if inner, err = w.resume(ctx, o); err != nil {
			return
		}
	}
}

func (w *relistingWatch) send(ctx context.Context, ev watch.Event) bool {
	select {
	case w.out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// relist lists with opts' selectors and returns, as watch events, the
// difference from what was delivered, and a bookmark at the list's version.
func (r *relister) relist(ctx context.Context, opts metav1.ListOptions) ([]watch.Event, string, error) {
	list, err := r.list(ctx, metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector})
	if err != nil {
		return nil, "", err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, "", err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, "", err
	}
	r.mu.Lock()
	before := make(map[string]bool, len(r.delivered))
	for k := range r.delivered {
		before[k] = true
	}
	r.mu.Unlock()

	events := make([]watch.Event, 0, len(items)+1)
	for _, it := range items {
		k, err := cache.MetaNamespaceKeyFunc(it)
		if err != nil {
			continue
		}
		t := watch.Added
		if before[k] {
			t = watch.Modified
			delete(before, k)
		}
		events = append(events, watch.Event{Type: t, Object: it})
	}
	for k := range before {
		gone, err := r.lastHeld(ctx, k)
		if err != nil {
			return nil, "", err
		}
		events = append(events, watch.Event{Type: watch.Deleted, Object: gone})
	}
	mark, err := r.object()
	if err != nil {
		return nil, "", err
	}
	if m, err := meta.Accessor(mark); err == nil {
		m.SetResourceVersion(lm.GetResourceVersion())
	}
	return append(events, watch.Event{Type: watch.Bookmark, Object: mark}), lm.GetResourceVersion(), nil
}

// lastHeld is the object under key as the informer's store holds it, as an
// API object of the informer's type, waiting for the store to catch up with
// what was delivered.
func (r *relister) lastHeld(ctx context.Context, key string) (runtime.Object, error) {
	deadline := time.Now().Add(storeLag)
	for {
		obj, ok, err := r.store.GetByKey(key)
		if err != nil {
			return nil, err
		}
		if ok {
			if o, isObj := obj.(runtime.Object); isObj && reflect.TypeOf(o) == r.typ {
				return o, nil
			}
			return nil, fmt.Errorf("the informer's store holds %T for %s, not %v", obj, key, r.typ)
		}
		if time.Now().After(deadline) {
			// Delivered but never stored: deleted since, or the informer's
			// queue is stuck. A bare object of the key deletes it either way.
			return r.keyed(key)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (r *relister) object() (runtime.Object, error) {
	o, ok := reflect.New(r.typ.Elem()).Interface().(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("%v is not a runtime.Object", r.typ)
	}
	return o, nil
}

// keyed is a bare object of the informer's type named key.
func (r *relister) keyed(key string) (runtime.Object, error) {
	o, err := r.object()
	if err != nil {
		return nil, err
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return nil, err
	}
	m.SetNamespace(ns)
	m.SetName(name)
	return o, nil
}

// isGone reports whether ev is the API server saying the watch's version is
// gone (410): compacted away, or older than its watch cache.
// By its code, as RetryWatcher decides which errors to hand on.
func isGone(ev watch.Event) bool {
	if ev.Type != watch.Error {
		return false
	}
	var status apierrors.APIStatus
	return errors.As(apierrors.FromObject(ev.Object), &status) && status.Status().Code == http.StatusGone
}
