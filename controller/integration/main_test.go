// Package integration runs the built controller (bin/globalmirror-controller)
// against real control planes: a source cluster where Linkerd's mirrors are
// written by the mirror simulator, and two target clusters, east and west,
// whose StatefulSet-like workloads get real EndpointSlices from their
// kube-controller-managers. The clusters are shared by the package's tests;
// each test has its own namespace, simulator and controller processes.
package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/mirrorsim"
	"github.com/globalmirror/globalmirror/test/run"
	"k8s.io/client-go/kubernetes"
)

var env *localkube.Env

func TestMain(m *testing.M) { os.Exit(localkube.Main(m, &env, "source", "east", "west")) }

// scenario is one test's world: a namespace in every cluster, a mirror
// simulator linking east and west into source for that namespace, and the
// controllers it started.
type scenario struct {
	t                  *testing.T
	ns                 string
	source, east, west *localkube.Cluster
	sim                *mirrorsim.Simulator
	controllers        []*run.Controller
	dir                string
	logNames           int
}

var nonDNS = regexp.MustCompile(`[^a-z0-9]+`)

func newScenario(t *testing.T) *scenario {
	t.Helper()
	if testing.Short() {
		t.Skip("starts control planes")
	}
	t.Parallel()
	ns := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-")
	if len(ns) > 50 {
		ns = ns[:50]
	}
	s := &scenario{t: t, ns: ns, source: env.Cluster("source"), east: env.Cluster("east"), west: env.Cluster("west"), dir: t.TempDir()}
	sim, err := mirrorsim.Start(context.Background(), s.source.Config, mirrorsim.Options{
		Namespace: ns,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.sim = sim
	t.Cleanup(sim.Stop)
	for _, c := range []*localkube.Cluster{s.east, s.west} {
		if err := sim.Link(t.Context(), c.Name, c.Config); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range s.controllers {
				t.Logf("%s log tail:\n%s", c.LogPath, c.Log(6000))
			}
		}
		for _, c := range s.controllers {
			c.Stop()
		}
	})
	return s
}

// startController runs one more controller for the scenario's namespace.
// Leader election uses short timings so that handovers are quick.
func (s *scenario) startController(extra ...string) *run.Controller {
	s.t.Helper()
	args := append([]string{
		"--namespaces=" + s.ns,
		"--leader-elect-namespace=" + s.ns,
		"--leader-elect-id=globalmirror",
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--log-level=debug",
	}, extra...)
	s.logNames++
	c, err := run.StartController(s.t.Context(), s.dir, fmt.Sprintf("controller-%d.log", s.logNames), s.source.Kubeconfig, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.controllers = append(s.controllers, c)
	return c
}

func (s *scenario) client() kubernetes.Interface { return s.source.Client }
