package kubeclient

import (
	"context"
	"net/http"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// Configure sets what both halves need on a copy of the base configuration
// and wraps its transport in QuickReconnect, which tells Notify.
func TestConfigureSetsUpACopy(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:6443", UserAgent: "base"}
	var notified []error
	rc := Configure(base, Options{UserAgent: "half/1", QPS: 20, Burst: 40, Notify: func(err error) { notified = append(notified, err) }})
	if rc == base {
		t.Fatal("Configure changed the base configuration in place")
	}
	if base.ContentType != "" || base.UserAgent != "base" || base.QPS != 0 || base.WrapTransport != nil {
		t.Errorf("base configuration changed: %+v", base)
	}
	if rc.Host != base.Host || rc.ContentType != "application/vnd.kubernetes.protobuf" || rc.UserAgent != "half/1" || rc.QPS != 20 || rc.Burst != 40 {
		t.Errorf("got host %s, content type %q, user agent %q, QPS %g, burst %d", rc.Host, rc.ContentType, rc.UserAgent, rc.QPS, rc.Burst)
	}

	// Its transport retries a refused GET until the context ends, and
	// tells Notify of the refusal.
	rt := roundTripperOf(t, rc)
	ctx, cancel := context.WithTimeout(t.Context(), 3*RetryInterval)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+closedPort(t)+"/api", nil)
	start := time.Now()
	if _, err := rt.RoundTrip(req); !utilnet.IsConnectionRefused(err) {
		t.Errorf("GET: %v, want connection refused", err)
	}
	if took := time.Since(start); took < 2*RetryInterval {
		t.Errorf("a refused GET returned after %v, without retrying", took)
	}
	if len(notified) != 1 || !utilnet.IsConnectionRefused(notified[0]) {
		t.Errorf("notified %v, want the refusal once", notified)
	}
}

// Zero rate limits stay zero: client-go's defaults.
func TestConfigureLeavesDefaultRateLimits(t *testing.T) {
	rc := Configure(&rest.Config{}, Options{UserAgent: "half/1"})
	if rc.QPS != 0 || rc.Burst != 0 {
		t.Errorf("QPS %g, burst %d, want 0 and 0", rc.QPS, rc.Burst)
	}
}
