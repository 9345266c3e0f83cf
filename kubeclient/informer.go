package kubeclient

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/watchlist"
)

// ListFunc and WatchFunc are a typed client's List and Watch for one
// namespace, with the informer's list options already applied.
type (
	ListFunc  func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	WatchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
)

// Informer is a shared informer of obj whose watch resumes where it stopped.
//
// A reflector whose watch ends (an API server restarting closes every watch,
// and one just started may close it again at once) lists again after a delay
// that doubles at each such end, jittered up to twice, and resets only after
// two quiet minutes: after a few restarts the informer stays stale for up to
// a minute after the API server is back. Here the reflector's watch is
// client-go's RetryWatcher, which re-establishes the stream from the last
// resource version it delivered, so the reflector sees one continuous watch.
// Where that version is gone (410: compacted away, or older than a restarted
// API server's watch cache), the watch lists again itself and delivers the
// difference from what it delivered before as events (deletions as the
// informer's store last held them), then resumes from the list: a relist
// without the reflector's delay.
//
// client says, as for informer factories' informers, whether the initial
// list may be a watch that streams it (fake clients cannot). A transform
// must keep objects of obj's type: the deletions a relist finds are
// delivered as the store last held them.
func Informer(client any, list ListFunc, watchFn WatchFunc, obj runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	lw := &listThenResume{ListWatch: cache.ListWatch{
		ListWithContextFunc:  cache.ListWithContextFunc(list),
		WatchFuncWithContext: cache.WatchFuncWithContext(watchFn),
	}}
	inf := cache.NewSharedIndexInformerWithOptions(lw, obj,
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
	// Clients that cannot stream a list are client-go's fakes, whose objects
	// carry no resource versions to resume from.
	if !watchlist.DoesClientNotSupportWatchListSemantics(client) {
		r := &relister{list: list, store: inf.GetStore(), typ: reflect.TypeOf(obj), delivered: map[string]bool{}}
		lw.ListWithContextFunc = r.listed
		lw.WatchFuncWithContext = r.watch(resumingWatch(watchFn))
	}
	return inf
}

// listThenResume lists with a LIST, not a watch that streams the list (the
// reflector's default since client-go 1.35): such a stream cannot resume,
// and an API server restarting during it would send the reflector into its
// backoff.
type listThenResume struct{ cache.ListWatch }

func (*listThenResume) IsWatchListSemanticsUnSupported() bool { return true }

func resumingWatch(watchFn WatchFunc) WatchFunc {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		// A watch that lists (streaming initial events) or starts from
		// "any version" has no position to resume from.
		if opts.ResourceVersion == "" || opts.ResourceVersion == "0" || opts.SendInitialEvents != nil {
			return watchFn(ctx, opts)
		}
		selectors := func(o metav1.ListOptions) metav1.ListOptions {
			o.LabelSelector, o.FieldSelector = opts.LabelSelector, opts.FieldSelector
			return o
		}
		return watchtools.NewRetryWatcherWithContext(ctx, opts.ResourceVersion, &cache.ListWatch{
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				w, err := watchFn(ctx, selectors(o))
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					// RetryWatcher would retry a refused start forever;
					// as an event, it ends the watch and the reflector
					// lists again.
					return expired(err), nil
				}
				return w, err
			},
		})
	}
}

// expired is a watch that delivers err as its only event.
func expired(err error) watch.Interface {
	ch := make(chan watch.Event, 1)
	status := metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: err.Error()}
	var api apierrors.APIStatus
	if errors.As(err, &api) {
		status = api.Status()
	}
	ch <- watch.Event{Type: watch.Error, Object: &status}
	close(ch)
	return watch.NewProxyWatcher(ch)
}
