// Package bulk holds the harness's API requests whose number grows with a
// test's world: lists read in pages, creates and deletes one object each with
// a bounded number in flight, and every request retried when the API server,
// or the connection to it, timed out. No request grows with the world, so
// none can outlast the API server's request timeout however slow the machine:
// kube-apiserver deletes a collection with one worker, and one DeleteCollection
// of 8,000 slices ran past its 60 s on a fresh 2-core machine.
package bulk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/pager"
	"k8s.io/client-go/util/retry"
)

// PageSize is the most objects one list asks for.
const PageSize = 500

// Workers is how many requests Delete keeps in flight by default: the
// client's rate limiter paces them beyond that.
const Workers = 8

// backoff is the wait between tries of one request: seven tries over about
// two minutes, as long as a fresh machine's API server was seen busy.
var backoff = wait.Backoff{Steps: 7, Duration: time.Second, Factor: 2, Jitter: 0.1}

// Retryable reports whether err says that a request timed out or lost its
// connection, so that the same request may succeed when sent again: the
// server's own timeout (504, or 500 ServerTimeout), 429, an HTTP/2 stream
// reset (how a timed-out request ends on a stream the server gave up on),
// and a connection that ended or timed out under it.
func Retryable(err error) bool {
	var stream http2.StreamError
	var netErr net.Error
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		errors.As(err, &stream) || strings.Contains(fmt.Sprint(err), "stream error: stream ID") ||
		utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) ||
		errors.As(err, &netErr) && netErr.Timeout()
}

// Retry calls f until it returns nil or an error that is not Retryable,
// backing off between tries, and stops when ctx ends.
func Retry(ctx context.Context, f func(context.Context) error) error {
	return retry.OnError(backoff, func(err error) bool { return ctx.Err() == nil && Retryable(err) },
		func() error { return f(ctx) })
}

// Create creates obj with create, retried; an object already there after a
// try that timed out is the one that try wrote.
func Create[T any](ctx context.Context, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) error {
	tried := false
	return Retry(ctx, func(ctx context.Context) error {
		_, err := create(ctx, obj, metav1.CreateOptions{})
		if tried && apierrors.IsAlreadyExists(err) {
			return nil
		}
		tried = true
		return err
	})
}

// Collection is a typed client of one resource in one namespace, as
// client-go's are: CoreV1().Services(ns), DiscoveryV1().EndpointSlices(ns).
type Collection[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Names lists the names of c's objects that match selector, PageSize at a
// time, each page retried. A page whose continue token expired is an error,
// not a list of everything at once.
func Names[L runtime.Object](ctx context.Context, c Collection[L], selector string) ([]string, error) {
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		var page runtime.Object
		err := Retry(ctx, func(ctx context.Context) (err error) {
			page, err = c.List(ctx, opts)
			return err
		})
		return page, err
	})
	p.PageSize, p.FullListIfExpired = PageSize, false
	var names []string
	err := p.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(o runtime.Object) error {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		names = append(names, m.GetName())
		return nil
	})
	return names, err
}

// Delete deletes the named objects of c, workers at a time, each retried; one
// already gone counts as deleted.
func Delete[L runtime.Object](ctx context.Context, c Collection[L], names []string, workers int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, name := range names {
		g.Go(func() error {
			err := Retry(gctx, func(ctx context.Context) error { return c.Delete(ctx, name, metav1.DeleteOptions{}) })
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %s: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// DeleteAll deletes every object of c that matches selector (Names, then
// Delete with Workers) and says how many it deleted.
func DeleteAll[L runtime.Object](ctx context.Context, c Collection[L], selector string) (int, error) {
	names, err := Names(ctx, c, selector)
	if err != nil {
		return 0, err
	}
	return len(names), Delete(ctx, c, names, Workers)
}
