// Package scenario is the shared test harness of the tests that run both
// halves against real clusters: one namespace of a source cluster, the Linkerd
// mirror simulator linking other clusters into it, the controller and CoreDNS
// processes started there, and waits that report the last state they saw.
//
// World needs no testing.T, so that commands (the demo, the benchmarks) can
// use it too; T is a World for one test.
package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/mirrorsim"
	"github.com/globalmirror/globalmirror/test/run"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Zone is the cluster domain every world answers in.
const Zone = "cluster.local."

// World is one namespace NS of the Source cluster: the mirror simulator for
// that namespace (started by the first Link) and the processes started in it.
type World struct {
	NS     string
	Source *localkube.Cluster
	// Dir receives the processes' logs and Corefiles.
	Dir string
	// Sim is the mirror simulator; nil until the first Link.
	Sim *mirrorsim.Simulator
	// Logger receives the simulator's messages; nil: warnings to stderr.
	Logger *slog.Logger
	// Links: the simulator keeps Linkerd's Links too (mirrorsim's
	// Options.Links), in the source cluster's linkerd-multicluster, which
	// every world of the cluster shares: set by one test at a time.
	Links bool

	mu      sync.Mutex
	procs   []*run.Process
	started int
}

// NewWorld is namespace ns of source, with logs in dir. It starts nothing.
func NewWorld(source *localkube.Cluster, ns, dir string) *World {
	return &World{NS: ns, Source: source, Dir: dir}
}

// Link mirrors cluster c's exported services into the world's namespace, as
// Linkerd's service mirror does, under the link name c.Name.
func (w *World) Link(ctx context.Context, c *localkube.Cluster, opts ...mirrorsim.LinkOption) error {
	return w.LinkAs(ctx, c.Name, c, opts...)
}

// LinkAs is Link under another link name (the suffix of the mirrors' names),
// starting the simulator on the first call.
func (w *World) LinkAs(ctx context.Context, name string, c *localkube.Cluster, opts ...mirrorsim.LinkOption) error {
	if w.Sim == nil {
		sim, err := mirrorsim.Start(context.Background(), w.Source.Config, mirrorsim.Options{Namespace: w.NS, Links: w.Links, Logger: cmp.Or(w.Logger, localkube.StderrLogger(false))})
		if err != nil {
			return err
		}
		w.Sim = sim
	}
	return w.Sim.Link(ctx, name, c.Config, opts...)
}

// next names the next process of kind: controller-1, coredns-2, ...
func (w *World) next(kind string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started++
	return fmt.Sprintf("%s-%d", kind, w.started)
}

func (w *World) add(p *run.Process) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.procs = append(w.procs, p)
}

// StartController runs the controller against the source cluster for the
// world's namespace (--namespaces is added to args) and waits until it is
// ready.
func (w *World) StartController(ctx context.Context, args ...string) (*run.Controller, error) {
	c, err := run.StartController(ctx, w.Dir, w.next("controller")+".log", w.Source.Kubeconfig,
		append([]string{"--namespaces=" + w.NS}, args...)...)
	if err != nil {
		return nil, err
	}
	w.add(c.Process)
	return c, nil
}

// StartCoreDNS runs CoreDNS with corefile, which may use {$SOURCE_KUBECONFIG}
// and {$NS} besides the ports run.StartCoreDNS fills (extraPorts are more),
// and waits until it is ready and answers.
func (w *World) StartCoreDNS(ctx context.Context, corefile string, extraPorts ...string) (*run.CoreDNS, error) {
	return w.RunCoreDNS(ctx, run.CoreDNSOptions{Corefile: corefile, ExtraPorts: extraPorts, WaitReady: true})
}

// RunCoreDNS runs CoreDNS with o in a directory of its own under Dir, adding
// SOURCE_KUBECONFIG and NS to o.Env: for fixed ports (o.Ports), a restart on
// the same ports, or not waiting for readiness (o.WaitReady false), which
// never comes while the API server is down.
func (w *World) RunCoreDNS(ctx context.Context, o run.CoreDNSOptions) (*run.CoreDNS, error) {
	o.Dir = filepath.Join(w.Dir, w.next("coredns"))
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	o.Env = append([]string{"SOURCE_KUBECONFIG=" + w.Source.Kubeconfig, "NS=" + w.NS}, o.Env...)
	c, err := run.StartCoreDNS(ctx, o)
	if err != nil {
		return nil, err
	}
	w.add(c.Process)
	return c, nil
}

// Stop stops every process the world started, in parallel, then the
// simulator (the mirrors stay, as with a stopped Linkerd). It reports
// processes that had to be killed.
func (w *World) Stop() error {
	w.mu.Lock()
	procs := w.procs
	w.mu.Unlock()
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.StopWithin(10 * time.Second) })
	}
	wg.Wait()
	if w.Sim != nil {
		w.Sim.Stop()
	}
	return errors.Join(errs...)
}

// LogTails are the last n bytes of every process's log, for a failure.
func (w *World) LogTails(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, p := range w.procs {
		fmt.Fprintf(&b, "==> %s <==\n%s\n", p.LogPath, p.Log(n))
	}
	return b.String()
}

// FQDN is name.<ns>.svc.cluster.local.
func (w *World) FQDN(name string) string { return name + "." + w.NS + ".svc." + Zone }

// ClusterIP waits up to timeout for Service name in the source cluster (an
// endpoint mirror the simulator may still be writing), with a ClusterIP
// other than those of replaced (a mirror written anew, the old one perhaps
// not deleted yet), and returns its ClusterIP.
func (w *World) ClusterIP(ctx context.Context, name string, timeout time.Duration, replaced ...string) (string, error) {
	var ip string
	err := await.Poll(ctx, timeout, 10*time.Millisecond, func(ctx context.Context) string {
		svc, err := w.Source.Client.CoreV1().Services(w.NS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if ip = svc.Spec.ClusterIP; slices.Contains(replaced, ip) {
			return "still the replaced " + ip
		}
		return ""
	})
	if err != nil {
		return "", fmt.Errorf("service %s/%s in %s: %w", w.NS, name, w.Source.Name, err)
	}
	return ip, nil
}
