package scenario

import (
	"context"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/workload"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// T is a World for one test: its namespace is named after the test, its
// processes and simulator stop when the test ends, and the tails of their
// logs are logged if it failed. Its methods fail the test instead of
// returning errors.
type T struct {
	*World
	t *testing.T
	// Timeout bounds every wait (default 60 s); Interval is the pause
	// between two tries (default 20 ms).
	Timeout, Interval time.Duration
}

// New is the world of test t in the source cluster, in the namespace
// Namespace(t), with links to the clusters in link.
func New(t *testing.T, source *localkube.Cluster, link ...*localkube.Cluster) *T {
	t.Helper()
	return NewIn(t, source, Namespace(t), link...)
}

// NewIn is New in namespace ns: for tests whose answers depend on the
// length of the names.
func NewIn(t *testing.T, source *localkube.Cluster, ns string, link ...*localkube.Cluster) *T {
	t.Helper()
	s := &T{World: NewWorld(source, ns, t.TempDir()), t: t, Timeout: 60 * time.Second, Interval: 20 * time.Millisecond}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", s.NS, s.LogTails(6000))
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	for _, c := range link {
		s.Link(c)
	}
	return s
}

var nonDNS = regexp.MustCompile(`[^a-z0-9]+`)

// Namespace is a namespace name from t's name: TestFollowsMembers/Scale
// gives followsmembers-scale.
func Namespace(t *testing.T) string {
	ns := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-")
	return strings.TrimRight(ns[:min(len(ns), 50)], "-")
}

// Link links cluster c into the world (see World.Link).
func (s *T) Link(c *localkube.Cluster) {
	s.t.Helper()
	s.LinkAs(c.Name, c)
}

// LinkAs links cluster c into the world under the link name name.
func (s *T) LinkAs(name string, c *localkube.Cluster) {
	s.t.Helper()
	if err := s.World.LinkAs(s.t.Context(), name, c); err != nil {
		s.t.Fatal(err)
	}
}

// StartController runs a controller for the namespace (see
// World.StartController).
func (s *T) StartController(args ...string) *run.Controller {
	s.t.Helper()
	c, err := s.World.StartController(s.t.Context(), args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// StartCoreDNS runs CoreDNS for the namespace (see World.StartCoreDNS).
func (s *T) StartCoreDNS(corefile string, extraPorts ...string) *run.CoreDNS {
	s.t.Helper()
	c, err := s.World.StartCoreDNS(s.t.Context(), corefile, extraPorts...)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// Eventually polls check until it returns "" and fails the test with its
// last answer after Timeout.
func (s *T) Eventually(what string, check func(ctx context.Context) string) {
	s.t.Helper()
	if err := await.Poll(s.t.Context(), s.Timeout, s.Interval, check); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// AnswerBoth waits until name/qtype answers want over UDP, then over TCP,
// within one Timeout, and returns how long the UDP answer took.
func (s *T) AnswerBoth(addr, name string, qtype uint16, want string) time.Duration {
	s.t.Helper()
	took, err := AwaitBoth(s.t.Context(), addr, name, qtype, want, s.Timeout, s.Interval)
	if err != nil {
		s.t.Fatal(err)
	}
	return took
}

// Workload creates a StatefulSet-like workload in cluster c, in the world's
// namespace, exported, with pod addresses from prefix.
func (s *T) Workload(c *localkube.Cluster, name string, replicas int, prefix string) *workload.Workload {
	s.t.Helper()
	w, err := workload.Create(s.t.Context(), c.Client, s.NS, name, replicas, workload.Options{
		Labels: map[string]string{workload.ExportedLabel: "true"},
		IPv4:   netip.MustParsePrefix(prefix),
	})
	if err != nil {
		s.t.Fatalf("%s/%s in %s: %v", s.NS, name, c.Name, err)
	}
	return w
}

// ClusterIP waits for Service name in the source cluster, with a ClusterIP
// other than replaced's, and returns it: for Linkerd's endpoint mirrors, the
// address of a mirrored pod.
func (s *T) ClusterIP(name string, replaced ...string) string {
	s.t.Helper()
	ip, err := s.World.ClusterIP(s.t.Context(), name, s.Timeout, replaced...)
	if err != nil {
		s.t.Fatal(err)
	}
	return ip
}

// PodIP is the first address of pod ord of w.
func (s *T) PodIP(w *workload.Workload, ord int) string {
	s.t.Helper()
	ips, err := w.PodIPs(ord)
	if err != nil {
		s.t.Fatal(err)
	}
	return ips[0]
}

// Quiet watches for window what must not happen and fails the test on the
// first sign of it: check is called every Interval (see await.Quiet).
func (s *T) Quiet(what string, window time.Duration, check func(ctx context.Context) string) {
	s.t.Helper()
	if err := await.Quiet(s.t.Context(), window, s.Interval, check); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// WatchWrites records from now on every write to the Services and
// EndpointSlices of the world's namespace in the source cluster that svcs
// and slices select (see scenario.WatchWrites), until the test ends.
func (s *T) WatchWrites(svcs, slices metav1.ListOptions) *Writes {
	s.t.Helper()
	w, err := WatchWrites(s.t.Context(), s.Source.Client, s.NS, svcs, slices)
	if err != nil {
		s.t.Fatalf("watch writes in %s: %v", s.NS, err)
	}
	s.t.Cleanup(w.Stop)
	return w
}
