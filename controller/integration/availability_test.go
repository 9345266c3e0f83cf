package integration

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/workload"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestSteadyStateWritesNothing: once converged, a minute of unchanged members
// causes no write, counted by the controller's own metric and watched on the
// API; the test fails at the first one. The resourceVersions of the global
// objects confirm it at the end.
func TestSteadyStateWritesNothing(t *testing.T) {
	s := newWorld(t)
	src, east, west := s.dbEverywhere("db", 3)
	c := s.startController()
	s.expectGlobal("db-global", "db", dbPorts, 1, nine(src, east, west)...)
	before := s.settle(c, 2*time.Second) // the last events of convergence drain
	rvs := s.resourceVersions("db-global")

	s.Quiet("steady state", 60*time.Second, s.noWrites(c, before, s.WatchWrites(managed, managed)))

	if now := s.resourceVersions("db-global"); now != rvs {
		t.Errorf("global objects changed in steady state:\n was %s\n now %s", rvs, now)
	}
	if n, err := metric(c, "globalmirror_syncs_total", `result="error"`); err != nil || n != 0 {
		t.Errorf("failed syncs = %v (%v)", n, err)
	}
	// The client-go metrics land in the same registry.
	for _, family := range []string{"globalmirror_sync_duration_seconds_count", "globalmirror_globals", "globalmirror_endpoints",
		"globalmirror_lists_total", "globalmirror_api_heard_timestamp_seconds", "workqueue_adds_total", "rest_client_requests_total", "leader_election_master_status"} {
		if n, err := metric(c, family); err != nil || n == 0 {
			t.Errorf("%s = %v (%v), want > 0", family, n, err)
		}
	}
	if n, _ := metric(c, "globalmirror_endpoints"); n != 9 {
		t.Errorf("globalmirror_endpoints = %v, want 9", n)
	}
	// Every list took the path of the API server's release.
	streams, err := localkube.StreamsListsAsReleased(t.Context(), s.Source.Client)
	must(t, err)
	for path, taken := range map[kubeclient.Path]bool{kubeclient.Streamed: streams, kubeclient.Paged: !streams} {
		if n, err := metric(c, "globalmirror_lists_total", `path="`+string(path)+`"`); err != nil || (n > 0) != taken {
			t.Errorf("globalmirror_lists_total{path=%q} = %v (%v); the API server streams lists: %v", path, n, err, streams)
		}
	}
}

// TestRestart kills the controller (no cleanup, no lease release), changes
// the members while it is down, and starts a new one, which converges; a
// restart over unchanged state writes nothing.
func TestRestart(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	src, east, west := s.dbEverywhere("db", 3)
	c := s.startController()
	// Killed as soon as it wrote something, likely before it finished.
	s.Eventually("first write", func(context.Context) string {
		if s.writes(c) == 0 {
			return "no write yet"
		}
		return ""
	})
	c.Kill()
	c = s.startController()
	s.expectGlobal("db-global", "db", dbPorts, 1, nine(src, east, west)...)

	c.Kill()
	must(t, east.Scale(ctx, 4))
	must(t, src.SetReady(ctx, "db-2", false))
	c = s.startController()
	s.expectGlobal("db-global", "db", dbPorts, 1, append(nine(src, east, west, "db-2"), remote(east, 3, "east", true))...)

	c.Stop()
	rvs := s.resourceVersions("db-global")
	writes := s.WatchWrites(managed, managed)
	c = s.startController()
	waitLeading(t, s, c)
	s.Quiet("a restart over converged state", 3*time.Second, s.noWrites(c, 0, writes))
	s.Eventually("the new leader synced db", func(context.Context) string {
		if n, err := metric(c, "globalmirror_syncs_total", `result="success"`); err != nil || n == 0 {
			return fmt.Sprintf("successful syncs = %v (%v)", n, err)
		}
		return ""
	})
	if now := s.resourceVersions("db-global"); now != rvs {
		t.Errorf("restart changed the global objects:\n was %s\n now %s", rvs, now)
	}
}

// TestLeaderHandover runs two controllers: only the leader writes; when it
// dies, the standby takes over within the lease duration and converges.
func TestLeaderHandover(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	src, east, west := s.dbEverywhere("db", 2)
	a, b := s.startController(), s.startController()
	members := func(e *workload.Workload, w *workload.Workload) []expect {
		return []expect{local(src, 0, true), local(src, 1, true), remote(e, 0, "east", true), remote(e, 1, "east", true),
			remote(w, 0, "west", true), remote(w, 1, "west", true)}
	}
	s.expectGlobal("db-global", "db", dbPorts, 1, members(east, west)...)

	leader, standby := a, b
	if isLeader(t, b) {
		leader, standby = b, a
	}
	if !isLeader(t, leader) || isLeader(t, standby) {
		t.Fatalf("want exactly one leader: a=%v b=%v", isLeader(t, a), isLeader(t, b))
	}
	if n := s.writes(standby); n != 0 {
		t.Errorf("the standby wrote %v times", n)
	}

	leader.Kill()
	killed := time.Now()
	must(t, west.Scale(ctx, 3))
	s.expectGlobal("db-global", "db", dbPorts, 1, append(members(east, west), remote(west, 2, "west", true))...)
	took := time.Since(killed)
	t.Logf("standby converged %v after the leader was killed (lease 4s)", took.Round(100*time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("takeover took %v, far beyond the 4s lease", took)
	}
	if !isLeader(t, standby) {
		t.Error("the standby did not become leader")
	}
}

// TestTerminateHandsOver: SIGTERM (what Kubernetes sends on a rollout or
// eviction) stops the leader cleanly: exit status 0, the Lease released, and
// the standby leading within 2 s of the exit, not after the lease expires.
func TestTerminateHandsOver(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	src, east, west := s.dbEverywhere("db", 2)
	a, b := s.startController("--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s"), s.startController("--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s")
	members := []expect{local(src, 0, true), local(src, 1, true), remote(east, 0, "east", true), remote(east, 1, "east", true),
		remote(west, 0, "west", true), remote(west, 1, "west", true)}
	s.expectGlobal("db-global", "db", dbPorts, 1, members...)
	leader, standby := a, b
	if isLeader(t, b) {
		leader, standby = b, a
	}
	leases := s.Source.Client.CoordinationV1().Leases(s.NS)
	lease, err := leases.Get(ctx, "globalmirror", metav1.GetOptions{})
	must(t, err)
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" {
		t.Fatal("the Lease has no holder while a controller leads")
	}

	sent := time.Now()
	leader.Stop() // SIGTERM, then SIGKILL after 10 s
	exited := time.Now()
	if _, err := leader.Exited(); err != nil {
		t.Errorf("the leader exited with %v after SIGTERM, want status 0", err)
	}
	if log := leader.Log(20000); strings.Contains(log, "level=ERROR") {
		t.Errorf("the leader logged an error on SIGTERM:\n%s", log)
	}
	lease, err = leases.Get(ctx, "globalmirror", metav1.GetOptions{})
	must(t, err)
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h == holder {
		t.Errorf("the Lease is still held by the stopped leader %q", h)
	}
	if err := await.Poll(ctx, 2*time.Second-time.Since(exited), 20*time.Millisecond, func(context.Context) string {
		if !isLeader(t, standby) {
			return "the standby is not leading"
		}
		return ""
	}); err != nil {
		t.Fatalf("2 s after the leader exited: %v", err)
	}
	t.Logf("SIGTERM → leader exited in %v; standby leading %v after the exit (lease 15s)",
		exited.Sub(sent).Round(time.Millisecond), time.Since(exited).Round(time.Millisecond))

	// The new leader does the work.
	must(t, west.Scale(ctx, 3))
	s.expectGlobal("db-global", "db", dbPorts, 1, append(members, remote(west, 2, "west", true))...)
}

func isLeader(t *testing.T, c *run.Controller) bool {
	t.Helper()
	n, err := metric(c, "leader_election_master_status")
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func waitLeading(t *testing.T, s *world, c *run.Controller) {
	t.Helper()
	s.Eventually("leadership", func(context.Context) string {
		if !isLeader(t, c) {
			return "not leader"
		}
		return ""
	})
}

// TestLargeAndIPv6Members: a 250-endpoint member fills three slices at the
// default maximum of 100, and a dual-stack member's IPv6 endpoints get their
// own slice.
func TestLargeAndIPv6Members(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	big, err := workload.Create(ctx, s.Source.Client, s.NS, "big", 250, workload.Options{Labels: exported, IPv4: sourceV4})
	must(t, err)
	bigEast, err := workload.Create(ctx, s.east.Client, s.NS, "big", 1, workload.Options{Labels: exported, IPv4: eastV4})
	must(t, err)
	v6opts := workload.Options{Labels: exported, IPv4: netip.MustParsePrefix("203.0.113.128/25"), IPv6: netip.MustParsePrefix("2001:db8:1::/64")}
	v6, err := workload.Create(ctx, s.Source.Client, s.NS, "v6", 2, v6opts)
	must(t, err)
	v6East, err := workload.Create(ctx, s.east.Client, s.NS, "v6", 1, workload.Options{Labels: exported, IPv4: netip.MustParsePrefix("203.0.113.0/25")})
	must(t, err)
	s.startController()

	want := append(all(250, func(i int) expect { return local(big, i, true) }), remote(bigEast, 0, "east", true))
	s.expectGlobal("big-global", "big", dbPorts, 3, want...)

	v6addr := func(ord int) expect {
		return func(context.Context, *world) (endpoint, error) {
			ips, err := v6.PodIPs(ord)
			if err != nil {
				return endpoint{}, err
			}
			return endpoint{fmt.Sprintf("v6-%d", ord), ips[1], true}, nil
		}
	}
	s.expectGlobal("v6-global", "v6", dbPorts, 2, local(v6, 0, true), local(v6, 1, true), v6addr(0), v6addr(1), remote(v6East, 0, "east", true))
}
