// Package integration runs the built controller (bin/globalmirror-controller)
// against real control planes: a source cluster where Linkerd's mirrors are
// written by the mirror simulator, and two target clusters, east and west,
// whose StatefulSet-like workloads get real EndpointSlices from their
// kube-controller-managers. The clusters are shared by the package's tests;
// each test has its own namespace, simulator and controller processes
// (test/scenario).
package integration

import (
	"os"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
)

var env *localkube.Env

func TestMain(m *testing.M) { os.Exit(localkube.Main(m, &env, "source", "east", "west")) }

// world is one test's world: a namespace in every cluster, east and west
// linked into source for it, and the controllers it started.
type world struct {
	*scenario.T
	t          *testing.T
	east, west *localkube.Cluster
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("starts control planes")
	}
	t.Parallel()
	w := &world{t: t, east: env.Cluster("east"), west: env.Cluster("west")}
	w.T = scenario.New(t, env.Cluster("source"), w.east, w.west)
	w.Timeout, w.Interval = convergeTimeout, 200*time.Millisecond
	return w
}

// startController runs one more controller for the world's namespace.
// Leader election uses short timings so that handovers are quick.
func (s *world) startController(extra ...string) *run.Controller {
	s.t.Helper()
	return s.StartController(append([]string{
		"--leader-elect-namespace=" + s.NS,
		"--leader-elect-id=globalmirror",
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--log-level=debug",
	}, extra...)...)
}
