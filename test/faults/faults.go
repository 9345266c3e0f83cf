// Package faults runs globalmirror under repeated faults and measures how it
// holds up. A mesh of local clusters (each linked to the others by the mirror
// simulator, each with two controller replicas and a CoreDNS with the global
// plugin) is queried continuously over UDP and TCP while faults are injected
// one after another, in an order a seed fixes: links and unlinks, pods scaled
// and flipped not ready, gateways down and up, kube-apiserver killed, etcd
// compacted under the informers, leaders killed and terminated, CoreDNS
// restarted while its API server is down, hostile objects. Every answer is
// compared with package truth's model of what the API server says at that
// moment. The run ends with an idle period (the controllers must write
// nothing) and a wire fuzz of one CoreDNS.
package faults

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/globalmirror/globalmirror/test/wirefuzz"
	"github.com/globalmirror/globalmirror/test/workload"
)

// Namespace is where the mesh's workloads live in every cluster.
const Namespace = "faults"

// Config says how long and what to run; no field has a default.
type Config struct {
	// Clusters of the mesh.
	Clusters []string
	// Seed fixes the order and the choices of the faults.
	Seed uint64
	// Duration of the fault phase.
	Duration time.Duration
	// Idle is how long the controllers must write nothing at the end.
	Idle time.Duration
	// Fuzz is how long the wire fuzz runs.
	Fuzz time.Duration
	// Dir receives the logs.
	Dir string
	// Log reports progress.
	Log *slog.Logger
}

// window is how long answers may lag the API server after a change before
// they count as wrong.
const window = 3 * time.Second

// prefixes give each cluster's pods their own documentation addresses.
var prefixes = []string{"198.51.100.0/25", "203.0.113.0/25", "192.0.2.0/25", "198.51.100.128/25", "203.0.113.128/25"}

// member is one cluster of the mesh and what runs for it.
type member struct {
	name string
	c    *localkube.Cluster
	db   *workload.Workload
	// world runs the cluster's simulator, controllers and CoreDNS.
	world *scenario.World
	ctrls []*run.Controller
	dns   *run.CoreDNS

	mu       sync.Mutex
	linked   map[string]bool // clusters linked into this one
	gateways map[string]bool // gateway up, by linked cluster
	replicas int
	notReady map[string]bool // pods flipped not ready
	// apiDown: the API server is down on purpose; dnsDown: CoreDNS is
	// restarting on purpose (SERVFAIL and refusals are expected).
	apiDown, dnsDown bool
}

// runner is one run.
type runner struct {
	cfg     Config
	env     *localkube.Env
	members []*member
	rng     *rand.Rand
	res     *Results
	truths  *truths
	probers *group
	pending sync.WaitGroup // mismatches being settled
	procs   *supervisor
	hostile map[string]bool // clusters with hostile objects in place
}

// Run runs the whole sequence and returns what it measured. An error means
// the run could not be carried out; what went wrong with globalmirror is in
// the Results.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if len(cfg.Clusters) < 2 || len(cfg.Clusters) > len(prefixes) {
		return nil, fmt.Errorf("faults: 2 to %d clusters, not %d", len(prefixes), len(cfg.Clusters))
	}
	r := &runner{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 15)), res: newResults(cfg), procs: newSupervisor(), hostile: map[string]bool{}}
	start := time.Now()
	defer r.tearDown()
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	r.res.SetUp = time.Since(start)

	r.truths = startTruths(ctx, r)
	r.probers = startProbers(ctx, r)
	if err := r.converged(ctx, "set-up", time.Now()); err != nil {
		return r.res, err
	}
	if err := r.faultPhase(ctx); err != nil {
		return r.res, err
	}
	r.res.Crashes = r.procs.crashes()

	if err := r.idleCheck(ctx); err != nil {
		return r.res, err
	}
	if err := r.foreignObjectsCheck(ctx); err != nil {
		return r.res, err
	}
	if err := r.fuzz(ctx); err != nil {
		return r.res, err
	}
	r.res.Crashes = r.procs.crashes()
	r.res.Total = time.Since(start)
	return r.res, nil
}

// tearDown stops everything, the API servers' clients first, so that the
// API servers stop without open watches.
func (r *runner) tearDown() {
	if r.probers != nil {
		r.probers.stop()
	}
	r.pending.Wait()
	if r.truths != nil {
		r.truths.stop()
	}
	r.procs.expectAll()
	for _, m := range r.members {
		if err := m.world.Stop(); err != nil {
			r.cfg.Log.Warn("stopping processes", "cluster", m.name, "err", err)
		}
	}
	if r.env != nil {
		if err := r.env.Stop(); err != nil {
			r.cfg.Log.Warn("stopping the clusters", "err", err)
		}
	}
}

// setUp starts the clusters, their workloads, the simulators (each linking
// every other cluster), two controllers and a CoreDNS per cluster.
func (r *runner) setUp(ctx context.Context) error {
	r.cfg.Log.Info("starting clusters", "clusters", r.cfg.Clusters)
	// The first cluster's control plane is highly available: three
	// kube-apiservers behind one address (localkube.Options.Replicated).
	env, err := localkube.Start(ctx, localkube.Options{Clusters: r.cfg.Clusters, Dir: filepath.Join(r.cfg.Dir, "clusters"),
		Logger: r.cfg.Log, Replicated: r.cfg.Clusters[:1]})
	if err != nil {
		return err
	}
	r.env = env
	for i, name := range r.cfg.Clusters {
		m := &member{name: name, c: env.Cluster(name), replicas: 3,
			linked: map[string]bool{}, gateways: map[string]bool{}, notReady: map[string]bool{}}
		m.world = scenario.NewWorld(m.c, Namespace, filepath.Join(r.cfg.Dir, name))
		m.world.Logger = r.cfg.Log.With("sim", name)
		if err := os.MkdirAll(m.world.Dir, 0o755); err != nil {
			return err
		}
		if m.db, err = workload.Create(ctx, m.c.Client, Namespace, "db", 3, workload.Options{
			Labels: map[string]string{workload.ExportedLabel: "true"}, IPv4: netip.MustParsePrefix(prefixes[i]),
		}); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.members = append(r.members, m)
	}
	for _, m := range r.members {
		for _, o := range r.members {
			if o != m {
				if err := r.link(ctx, m, o); err != nil {
					return err
				}
			}
		}
		for range 2 {
			if err := r.startController(ctx, m); err != nil {
				return err
			}
		}
		if err := r.startCoreDNS(ctx, m, true); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) link(ctx context.Context, m, o *member) error {
	if err := m.world.Link(ctx, o.c); err != nil {
		return err
	}
	m.locked(func() { m.linked[o.name], m.gateways[o.name] = true, true })
	return nil
}

// startController adds a controller replica to m; replicas elect a leader
// with the default timings, whose renew deadline (10 s) outlasts the API
// server outages injected (up to 4 s), as in a cluster.
func (r *runner) startController(ctx context.Context, m *member) error {
	c, err := m.world.StartController(ctx, "--leader-elect-namespace="+Namespace, "--leader-elect-id=globalmirror",
		"--kube-api-qps=100", "--kube-api-burst=200", "--log-level=debug")
	if err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	m.locked(func() { m.ctrls = append(m.ctrls, c) })
	r.procs.watch(m.name+" controller", c.Process)
	return nil
}

// corefile is each cluster's DNS: the global plugin before kubernetes.
var corefile = run.Corefile(run.GlobalStanza + run.KubernetesStanza)

// startCoreDNS (re)starts m's CoreDNS on the same port; waitReady waits for
// its first sync, which never comes while the API server is down.
func (r *runner) startCoreDNS(ctx context.Context, m *member, waitReady bool) error {
	opts := run.CoreDNSOptions{Corefile: corefile, WaitReady: waitReady}
	if m.dns != nil {
		opts.Ports = m.dns.Ports
	}
	c, err := m.world.RunCoreDNS(ctx, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	m.locked(func() { m.dns = c })
	r.procs.watch(m.name+" coredns", c.Process)
	return nil
}

// locked runs f with m's lock held.
func (m *member) locked(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

// with returns f's result, computed with m's lock held.
func with[T any](m *member, f func() T) T {
	m.mu.Lock()
	defer m.mu.Unlock()
	return f()
}

// controllers are m's controller replicas.
func (m *member) controllers() []*run.Controller {
	return with(m, func() []*run.Controller { return slices.Clone(m.ctrls) })
}

// dnsAddr is m's DNS address.
func (m *member) dnsAddr() string { return with(m, func() string { return m.dns.Addr }) }

func (m *member) state() (apiDown, dnsDown bool) {
	m.locked(func() { apiDown, dnsDown = m.apiDown, m.dnsDown })
	return apiDown, dnsDown
}

// converged waits until every member's simulator has seen every change
// of the API servers and has nothing left to write, then until every
// member's answers have matched the truth for a while, and records the
// longest an answer lagged the API's change that made it wrong meanwhile.
// Waiting for the simulators first means that what they write late (their
// informers relist on client-go's schedule after an API server's restart)
// counts under the fault that caused it, not the next one.
func (r *runner) converged(ctx context.Context, kind string, since time.Time) error {
	r.truths.resetLag()
	err := await.Poll(ctx, 90*time.Second, 200*time.Millisecond, func(ctx context.Context) string {
		for _, m := range r.members {
			if s := simulatorBehind(ctx, m); s != "" {
				return s
			}
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("after %s: the simulators did not catch up: %w", kind, err)
	}
	caughtUp := time.Now()
	err = await.Poll(ctx, 90*time.Second, 50*time.Millisecond, func(context.Context) string {
		for _, m := range r.members {
			if !r.truths.quiet(m, caughtUp, time.Second) {
				return r.truths.describe()
			}
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("after %s: answers did not match the API: %w", kind, err)
	}
	r.res.stale(kind, r.truths.lag())
	return nil
}

// simulatorBehind says what m's simulator has not followed yet, "" when it
// has followed every change and is idle.
func simulatorBehind(ctx context.Context, m *member) string {
	behind, err := m.world.Sim.Behind(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("%s's simulator: %v", m.name, err)
	case behind != "":
		return fmt.Sprintf("%s's simulator is behind: %s", m.name, behind)
	}
	idle, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if m.world.Sim.WaitIdle(idle) != nil {
		return m.name + "'s simulator is busy"
	}
	return ""
}

// fuzz sends random and malformed messages to the first cluster's CoreDNS,
// then checks it still answers and still runs.
func (r *runner) fuzz(ctx context.Context) error {
	m := r.members[0]
	names := []string{"db-global." + Namespace + ".svc.cluster.local.", "db-0-" + r.members[1].name + ".db-global." + Namespace + ".svc.cluster.local."}
	rep, err := wirefuzz.Run(ctx, wirefuzz.Options{Addr: m.dnsAddr(), Zone: "cluster.local.", Names: names, Seed: r.cfg.Seed, Duration: r.cfg.Fuzz})
	r.res.Fuzz = rep
	if err != nil {
		return fmt.Errorf("wire fuzz: %w", err)
	}
	if exited, werr := m.dns.Exited(); exited {
		r.res.FuzzCrash = fmt.Sprintf("CoreDNS exited (%v):\n%s", werr, m.dns.Log(3000))
		return nil
	}
	want := r.truths.world(m).Globals["db-global"].IPv4
	got, _, err := askA(m.dnsAddr(), "udp", names[0])
	if err != nil || !slices.Equal(got, want) {
		r.res.FuzzCrash = fmt.Sprintf("after the fuzz, db-global answers %v (%v), want %v", got, err, want)
	}
	return nil
}
