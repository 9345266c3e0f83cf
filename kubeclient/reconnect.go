// Package kubeclient is how both halves read and reach the API server:
// Feed lists and watches one resource into a Sink, reading the API server's
// protobuf itself (watch.go follows an event from the socket to the sink;
// pages.go reads a list that does not stream); Configure sets up their
// clients; QuickReconnect retries a refused connection at once.
//
// client-go's own reflectors back off exponentially on "connection
// refused" (0.8 s doubling, jittered up to twice, capped at 30 s, reset only
// after two quiet minutes), which is right for thousands of kubelets but
// leaves a DNS server answering from a stale index for up to a minute after
// an API server that restarted a few times is back. QuickReconnect works
// below every client of the process (the feeds, leader election, writes):
// a GET refused at connect never reached the server and is sent again a
// moment later, within the caller's context; the caller sees a slow request
// rather than an error, and resumes within half a second of the API
// server's return.
package kubeclient

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// RetryInterval is the pause between attempts, jittered by up to as much
// again so that replicas do not reconnect in step.
const RetryInterval = 250 * time.Millisecond

// QuickReconnect makes every GET of rc's clients retry a refused connection
// until it connects or its context ends. notify, if not nil, is called with
// the error when connections start being refused and with nil when one gets
// through again, once per outage, to log it.
func QuickReconnect(rc *rest.Config, notify func(error)) {
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &retryRefused{next: next, notify: notify}
	})
}

type retryRefused struct {
	next   http.RoundTripper
	notify func(error)

	mu      sync.Mutex
	refused bool // the last attempt was refused
}

func (t *retryRefused) RoundTrip(req *http.Request) (*http.Response, error) {
	// Only a GET has no body to replay and no effect to repeat.
	if req.Method != http.MethodGet {
		return t.next.RoundTrip(req)
	}
	for {
		resp, err := t.next.RoundTrip(req)
		refused := err != nil && utilnet.IsConnectionRefused(err)
		t.state(refused, err)
		if !refused {
			return resp, err
		}
		pause := time.NewTimer(RetryInterval + rand.N(RetryInterval))
		select {
		case <-req.Context().Done():
			pause.Stop()
			return nil, err
		case <-pause.C:
		}
	}
}

// state notifies the first refusal and the first connection after refusals.
func (t *retryRefused) state(refused bool, err error) {
	if !refused && err != nil {
		return // neither refused nor through: another kind of failure
	}
	t.mu.Lock()
	changed := refused != t.refused
	t.refused = refused
	t.mu.Unlock()
	if changed && t.notify != nil {
		if refused {
			t.notify(err)
		} else {
			t.notify(nil)
		}
	}
}
