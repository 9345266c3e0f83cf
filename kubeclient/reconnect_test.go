package kubeclient

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// closedPort is a loopback address nothing listens on: connections to it are
// refused.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// transportOf is what QuickReconnect wraps around a plain transport.
func transportOf(t *testing.T, notify func(error)) http.RoundTripper {
	t.Helper()
	rc := &rest.Config{}
	QuickReconnect(rc, notify)
	return roundTripperOf(t, rc)
}

// roundTripperOf is the transport client-go builds from rc.
func roundTripperOf(t *testing.T, rc *rest.Config) http.RoundTripper {
	t.Helper()
	tc, err := rc.TransportConfig()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := transport.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

type notes struct {
	mu  sync.Mutex
	got []error
}

func (n *notes) add(err error) { n.mu.Lock(); n.got = append(n.got, err); n.mu.Unlock() }

// A GET sent while the server refuses connections gets through once it
// listens, without an error, and the outage is notified once each way.
func TestGetWaitsForTheServer(t *testing.T) {
	addr := closedPort(t)
	var n notes
	rt := transportOf(t, n.add)
	started := make(chan struct{})
	go func() {
		// Refused for a few retries, then a server on the same port.
		time.Sleep(3 * RetryInterval)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			close(started)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })}
		t.Cleanup(func() { srv.Close() })
		close(started)
		_ = srv.Serve(l)
	}()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/api", nil)
	resp, err := rt.RoundTrip(req)
	<-started
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("status %d", resp.StatusCode)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.got) != 2 || !utilnet.IsConnectionRefused(n.got[0]) || n.got[1] != nil {
		t.Errorf("notified %v, want [connection refused, <nil>]", n.got)
	}
}

// Other methods are not retried: they may carry a body or an effect.
func TestOnlyGetIsRetried(t *testing.T) {
	rt := transportOf(t, nil)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, _ := http.NewRequestWithContext(t.Context(), m, "http://"+closedPort(t)+"/api", nil)
		if _, err := rt.RoundTrip(req); !utilnet.IsConnectionRefused(err) {
			t.Errorf("%s: %v, want connection refused at once", m, err)
		}
	}
}

// The caller's context still bounds a GET: the reflector stops, a lease
// renewal times out.
func TestGetEndsWithItsContext(t *testing.T) {
	rt := transportOf(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*RetryInterval)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+closedPort(t)+"/api", nil)
	if _, err := rt.RoundTrip(req); !utilnet.IsConnectionRefused(err) {
		t.Errorf("got %v, want the last connection refused", err)
	}
	if ctx.Err() == nil {
		t.Error("returned before its context ended")
	}
}
