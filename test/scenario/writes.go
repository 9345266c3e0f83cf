package scenario

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Writes records every write to a set of Services and EndpointSlices from
// the moment it was made: what a quiet window (await.Quiet, T.Quiet) of the
// API must not see.
type Writes struct {
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu   sync.Mutex
	seen []string
}

// WatchWrites watches the Services (chosen by svcs' selectors) and the
// EndpointSlices (by slices') of namespace ns for writes. Each is listed and
// watched from the list's resourceVersion, so that nothing written after
// WatchWrites returns is missed; a watch that ends early counts as a write,
// since the window can then not be shown quiet. Stop ends the watches.
func WatchWrites(ctx context.Context, client kubernetes.Interface, ns string, svcs, slices metav1.ListOptions) (*Writes, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &Writes{cancel: cancel}
	svcWatch, err := listThenWatch(ctx, svcs, client.CoreV1().Services(ns).List, client.CoreV1().Services(ns).Watch)
	if err != nil {
		cancel()
		return nil, err
	}
	sliceWatch, err := listThenWatch(ctx, slices, client.DiscoveryV1().EndpointSlices(ns).List, client.DiscoveryV1().EndpointSlices(ns).Watch)
	if err != nil {
		svcWatch.Stop()
		cancel()
		return nil, err
	}
	for kind, wi := range map[string]watch.Interface{"Service": svcWatch, "EndpointSlice": sliceWatch} {
		w.done.Go(func() { w.follow(ctx, kind, wi) })
	}
	return w, nil
}

// listThenWatch watches from the resourceVersion of a list with opts.
func listThenWatch[L interface{ GetResourceVersion() string }](ctx context.Context, opts metav1.ListOptions,
	list func(context.Context, metav1.ListOptions) (L, error), watch func(context.Context, metav1.ListOptions) (watch.Interface, error)) (watch.Interface, error) {
	l, err := list(ctx, opts)
	if err != nil {
		return nil, err
	}
	opts.ResourceVersion = l.GetResourceVersion()
	return watch(ctx, opts)
}

func (w *Writes) follow(ctx context.Context, kind string, wi watch.Interface) {
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-wi.ResultChan():
			switch {
			case !ok:
				if ctx.Err() == nil {
					w.add("the watch of " + kind + "s ended")
				}
				return
			case ev.Type == watch.Bookmark:
			case ev.Type == watch.Error:
				w.add(fmt.Sprintf("the watch of %ss failed: %v", kind, ev.Object))
				return
			default:
				w.add(describe(ev, kind))
			}
		}
	}
}

// describe names a write: what happened to which object, at which
// resourceVersion, and the last writer its managed fields name.
func describe(ev watch.Event, kind string) string {
	o, err := meta.Accessor(ev.Object)
	if err != nil {
		return fmt.Sprintf("%s %s %T", ev.Type, kind, ev.Object)
	}
	s := fmt.Sprintf("%s %s %s (resourceVersion %s", ev.Type, kind, o.GetName(), o.GetResourceVersion())
	if mf := o.GetManagedFields(); len(mf) > 0 {
		last := mf[0]
		for _, f := range mf[1:] {
			if f.Time != nil && (last.Time == nil || f.Time.After(last.Time.Time)) {
				last = f
			}
		}
		s += fmt.Sprintf(", last %s by %s", strings.ToLower(string(last.Operation)), last.Manager)
	}
	return s + ")"
}

func (w *Writes) add(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, s)
}

// Check is the first write seen so far and how many followed, "" if none:
// a check for await.Quiet.
func (w *Writes) Check(context.Context) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch len(w.seen) {
	case 0:
		return ""
	case 1:
		return w.seen[0]
	}
	return fmt.Sprintf("%s, and %d more", w.seen[0], len(w.seen)-1)
}

// Stop ends the watches.
func (w *Writes) Stop() {
	w.cancel()
	w.done.Wait()
}
