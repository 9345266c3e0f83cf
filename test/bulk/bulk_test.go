package bulk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/bulk"
	"github.com/globalmirror/globalmirror/test/localkube"
	"golang.org/x/net/http2"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

func TestRetryableIsATimeoutOrALostConnection(t *testing.T) {
	gr := schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}
	for err, want := range map[error]bool{
		apierrors.NewTimeoutError("the server was too slow", 1):                                   true,
		apierrors.NewServerTimeout(gr, "delete", 1):                                               true,
		apierrors.NewTooManyRequests("slow down", 1):                                              true,
		fmt.Errorf("delete: %w", http2.StreamError{StreamID: 63147, Code: http2.ErrCodeInternal}): true,
		fmt.Errorf("stream error: stream ID 63147; INTERNAL_ERROR"):                               true,
		io.ErrUnexpectedEOF:                                                     true,
		apierrors.NewNotFound(gr, "s"):                                          false,
		apierrors.NewForbidden(gr, "s", errors.New("no")):                       false,
		apierrors.NewInvalid(schema.GroupKind{Kind: "EndpointSlice"}, "s", nil): false,
		errors.New("admission webhook said no"):                                 false,
	} {
		if got := bulk.Retryable(err); got != want {
			t.Errorf("Retryable(%v) = %v, want %v", err, got, want)
		}
	}
}

// timingOut is a collection of slices whose every first request for a name
// times out, as on a busy API server: a create after it has written, a
// delete after it has deleted, a list page before it answers.
type timingOut struct {
	*fake.Clientset
	ns    string
	mu    sync.Mutex
	tried map[string]bool
}

func (c *timingOut) once(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !c.tried[key]
	c.tried[key] = true
	return first
}

var timedOut = apierrors.NewTimeoutError("request did not complete within 1s", 0)

func (c *timingOut) Create(ctx context.Context, s *discoveryv1.EndpointSlice, o metav1.CreateOptions) (*discoveryv1.EndpointSlice, error) {
	got, err := c.DiscoveryV1().EndpointSlices(c.ns).Create(ctx, s, o)
	if err == nil && c.once("create "+s.Name) {
		return nil, timedOut
	}
	return got, err
}

func (c *timingOut) List(ctx context.Context, o metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
	if c.once("list " + o.Continue) {
		return nil, timedOut
	}
	return c.DiscoveryV1().EndpointSlices(c.ns).List(ctx, o)
}

func (c *timingOut) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	err := c.DiscoveryV1().EndpointSlices(c.ns).Delete(ctx, name, o)
	if err == nil && c.once("delete "+name) {
		return timedOut
	}
	return err
}

func TestEveryRequestIsRetriedAfterATimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("backs off for seconds: not a -short test")
	}
	ctx := t.Context()
	c := &timingOut{Clientset: fake.NewClientset(), ns: "ns", tried: map[string]bool{}}
	for i := range 3 {
		if err := bulk.Create(ctx, c.Create, slice("ns", i)); err != nil {
			t.Fatalf("create after a timeout that wrote: %v", err)
		}
	}
	n, err := bulk.DeleteAll(ctx, c, "")
	if err != nil || n != 3 {
		t.Fatalf("DeleteAll = %d, %v; want 3 deleted", n, err)
	}
	if left, _ := c.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{}); len(left.Items) != 0 {
		t.Fatalf("%d slices left", len(left.Items))
	}
	if err := bulk.Create(ctx, c.Create, slice("ns", 0)); err != nil {
		t.Fatal(err)
	}
	if err := bulk.Create(ctx, c.Create, slice("ns", 0)); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating a slice that was there before the first try: %v, want AlreadyExists", err)
	}
}

func slice(ns string, i int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("s%05d", i), Namespace: ns, Labels: map[string]string{"bulk": "test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for p := range 3 {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}).Next()
		for range p {
			a = a.Next()
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a.String()}})
	}
	return s
}

// worldSlices is how many slices TestNoRequestOutgrowsTheServersTimeout
// writes: enough that one DeleteCollection of them outlasts the API
// server's timeout it sets, as the node test's fleet outlasts a minute.
const worldSlices = 4000

// TestNoRequestOutgrowsTheServersTimeout holds the bulk requests to their
// promise against a real API server whose request timeout is a second: one
// DeleteCollection of the world times out there, while writing it, listing
// it and deleting it all through this package succeed.
func TestNoRequestOutgrowsTheServersTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane")
	}
	dir := t.TempDir()
	env, err := localkube.Start(t.Context(), localkube.Options{Clusters: []string{"bulk"}, Dir: dir,
		Logger: localkube.TestLogger(t), StopOnSignal: true, RequestTimeout: time.Second})
	if err != nil {
		t.Fatalf("localkube: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(localkube.LogTails(dir, 30))
		}
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	c := env.Cluster("bulk")
	ctx := t.Context()
	client := fastClient(t, c.Config)
	load := func(ns string) {
		t.Helper()
		if err := bulk.Create(ctx, client.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(bulk.Workers)
		for i := range worldSlices {
			g.Go(func() error { return bulk.Create(gctx, client.DiscoveryV1().EndpointSlices(ns).Create, slice(ns, i)) })
		}
		if err := g.Wait(); err != nil {
			t.Fatalf("writing %d slices: %v", worldSlices, err)
		}
	}

	// The premise: this world is large enough that one request for all of
	// it outlasts the server's timeout.
	load("whole")
	began := time.Now()
	err = client.DiscoveryV1().EndpointSlices("whole").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if !bulk.Retryable(err) {
		t.Fatalf("one DeleteCollection of %d slices: %v after %v, want the server's timeout", worldSlices, err, time.Since(began))
	}
	t.Logf("one DeleteCollection of %d slices: %v after %v", worldSlices, err, time.Since(began).Round(time.Millisecond))

	load("bounded")
	names, err := bulk.Names(ctx, client.DiscoveryV1().EndpointSlices("bounded"), "bulk=test")
	if err != nil || len(names) != worldSlices {
		t.Fatalf("Names = %d names, %v; want %d", len(names), err, worldSlices)
	}
	n, err := bulk.DeleteAll(ctx, client.DiscoveryV1().EndpointSlices("bounded"), "bulk=test")
	if err != nil || n != worldSlices {
		t.Fatalf("DeleteAll = %d, %v; want %d deleted", n, err, worldSlices)
	}
	if left, err := bulk.Names(ctx, client.DiscoveryV1().EndpointSlices("bounded"), ""); err != nil || len(left) != 0 {
		t.Fatalf("after DeleteAll: %d slices left (%v)", len(left), err)
	}
}

func fastClient(t *testing.T, c *rest.Config) kubernetes.Interface {
	c = rest.CopyConfig(c)
	c.QPS, c.Burst = 1000, 1000
	k, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
