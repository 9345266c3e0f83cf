package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Config is what `make bench` sets.
type Config struct {
	Sizes             []int         // globals per throughput step, ascending; the first is also the controller scale step
	Rounds            int           // interleaved throughput rounds
	Duration          time.Duration // one quiet dnsperf run
	LatencyDuration   time.Duration // one verbose dnsperf run (latency percentiles)
	TransportDuration time.Duration // UDP and TCP clients asking under CPU contention (TransportLatency); 0: none
	Changes           int           // programming latency changes
	Idle              time.Duration // controller idle window
	RSSRounds         int
	LinkerdSizes      []int  // bases of Linkerd's full shape whose memory and relists are measured, ascending; none: skipped
	PagedAPIServer    string // a kube-apiserver that does not stream lists, on which Linkerd's shape is measured again; empty: not
	LinkerdLarge      int    // bases the Linkerd world then grows to, without the endpoint mirrors' Services; 0: none
	NoStorms          bool   // leave out the storms after the Linkerd world
	StartOnly         bool   // of Linkerd's shape, measure the cold starts only: no memory, relists or storms
	ReloadOnly        bool   // of Linkerd's shape, measure the Corefile reloads only
	GoBenchCount      int
	ServerCPUs        string        // CoreDNS under load: taskset list
	ClientCPUs        string        // dnsperf
	Warmup            time.Duration // one unrecorded run per block before the rounds
	QuietLimit        float64       // CPUs the machine may use before the rounds start
	QuietMax          time.Duration // longest wait for that
	NoPinOthers       bool          // leave the control planes on every CPU during the rounds
	ControllerQPS     int
	// ControllerWorkers is the controller's --workers; 0: its default.
	ControllerWorkers int
	LoadWorkers       int
	Profile           bool // CPU profiles of CoreDNS per block at the largest size
	GoCmd             string
	Dir               string // logs, query files, profiles
	Log               func(format string, args ...any)

	// World's, at every size of Linkerd's shape; HeadlessEndpointMirrors
	// at the grown world (LinkerdLarge) too.
	NoEndpointMirrorServices, HeadlessEndpointMirrors bool
}

// Results is everything the report shows.
type Results struct {
	Config     Config
	Machine    Machine
	Started    time.Time
	Elapsed    time.Duration
	Phases     []Phase
	Loads      []Load
	Throughput []*ThroughputResult
	Latency    *LatencyResult
	Transport  *TransportResult
	Scale      []ScaleStep
	RSS        *RSSResult
	Linkerd    *LinkerdMemoryResult
	// LinkerdPaged is Linkerd's shape on PagedAPIServer.
	LinkerdPaged *LinkerdMemoryResult
	PassThrough  *PassThroughResult
	GoBench      []GoBench
	Profiles     []string
}

// Phase is a timed part of the run.
type Phase struct {
	Name    string
	Elapsed time.Duration
}

// Load is the bulk creation of mirrors.
type Load struct {
	From, To int
	Objects  int
	Elapsed  time.Duration
}

// ScaleStep is one controller measurement.
type ScaleStep struct {
	What   string
	Wall   time.Duration // 0: not timed
	Writes Writes
	Want   string // what the writes should be, for the report
}

// namespace of the world.
const namespace = "bench"

// Run runs every phase and returns the results; on error, what it has so far.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	res := &Results{Config: cfg, Started: time.Now()}
	t := res.Started
	// phase records the phase begun at t and begins the next: t is now.
	phase := func(name string) {
		res.Phases = append(res.Phases, Phase{name, time.Since(t)})
		cfg.Log("%s: %v", name, time.Since(t).Round(100*time.Millisecond))
		t = time.Now()
	}
	if cfg.GoBenchCount > 0 {
		if err := CompileTests(ctx, cfg.GoCmd, cfg.Dir, "./plugin/global", "./aggregate"); err != nil {
			return res, err
		}
		phase("compile Go benchmarks")
	}

	env, cluster, client, err := startCluster(ctx, filepath.Join(cfg.Dir, "cluster"), "", "")
	if err != nil {
		return res, err
	}
	defer env.Stop()
	phase("start the cluster")
	res.Machine = Describe(ctx, cfg.GoCmd, cluster.Client)

	w := World{Namespace: namespace}
	env2 := []string{"BENCH_KUBECONFIG=" + cluster.Kubeconfig}

	var ctrl *run.Controller
	defer func() {
		if ctrl != nil {
			ctrl.Stop()
		}
	}()
	loaded := 0
	for si, n := range cfg.Sizes {
		// Mirrors for this size, with the controller stopped: it then starts
		// from what is there, as after a deployment or a restart.
		if ctrl != nil {
			ctrl.Stop() // idempotent: the deferred Stop is harmless
		}
		t = time.Now()
		if err := w.Load(ctx, client, loaded, n, cfg.LoadWorkers); err != nil {
			return res, err
		}
		res.Loads = append(res.Loads, Load{From: loaded, To: n, Objects: 2 * len(Clusters) * (n - loaded), Elapsed: time.Since(t)})
		phase(fmt.Sprintf("load mirrors of bases %d-%d", loaded, n-1))

		ctrl, err = startController(ctx, cfg, cluster.Kubeconfig, namespace, fmt.Sprintf("controller-%d.log", n))
		if err != nil {
			return res, err
		}
		if _, err := Converged(ctx, ctrl, n, n*Records, 20*time.Minute); err != nil {
			return res, err
		}
		wall := time.Since(t)
		writes, err := Settle(ctx, ctrl, 2*time.Second, time.Minute)
		if err != nil {
			return res, err
		}
		what, want := fmt.Sprintf("%s bases, no global objects → converged", thousands(n)), fmt.Sprintf("%s (a Service and a slice per base)", thousands(2*n))
		if loaded > 0 {
			what = fmt.Sprintf("restart on %s bases (%s converged, %s new) → converged", thousands(n), thousands(loaded), thousands(n-loaded))
			want = fmt.Sprintf("%s (nothing for the converged ones)", thousands(2*(n-loaded)))
		}
		res.Scale = append(res.Scale, ScaleStep{What: what, Wall: wall, Writes: writes, Want: want})
		phase(fmt.Sprintf("controller converges on %d bases", n))
		idleFrom := time.Now()
		loaded = n

		tp, srv, err := w.throughputStep(ctx, cfg, n, env2, si == len(cfg.Sizes)-1, res)
		if err != nil {
			return res, err
		}
		res.Throughput = append(res.Throughput, tp)
		phase(fmt.Sprintf("throughput at %d globals", n))

		if si == 0 {
			err = w.controllerChecks(ctx, cfg, client, ctrl, srv, idleFrom, writes, res)
			if err == nil {
				t = time.Now()
				res.Latency, err = w.latencyStep(ctx, cfg, client, ctrl, n, env2, res)
				phase("programming latency")
			}
			if err == nil && cfg.TransportDuration > 0 {
				res.Transport, err = w.transportStep(ctx, cfg, n, env2)
				phase("UDP and TCP latency under CPU contention")
			}
		}
		srv.Stop()
		if err != nil {
			return res, err
		}
	}

	t = time.Now()
	res.RSS, err = w.RSS(ctx, cfg.Dir, loaded, cfg.RSSRounds, 10*time.Second, env2)
	if err != nil {
		return res, err
	}
	phase(fmt.Sprintf("CoreDNS RSS at %d globals", loaded))

	ctrl.Stop()
	if err := env.Stop(); err != nil {
		cfg.Log("stopping the cluster: %v", err)
	}
	phase("stop the cluster")

	if len(cfg.LinkerdSizes) > 0 {
		res.Linkerd, err = LinkerdMemory(ctx, cfg, cfg.LinkerdSizes, "")
		if err != nil {
			return res, err
		}
		phase("memory and relists in Linkerd's full shape")
		if cfg.PagedAPIServer != "" {
			res.LinkerdPaged, err = LinkerdMemory(ctx, cfg, cfg.LinkerdSizes, cfg.PagedAPIServer)
			if err != nil {
				return res, err
			}
			phase("memory and relists in Linkerd's full shape, lists in pages")
		}
	}
	res.PassThrough, err = PassThrough(ctx, cfg, cfg.Sizes[0])
	if err != nil {
		return res, err
	}
	phase("names that are not global")
	res.Machine.LoadEnd = LoadAvg()

	if cfg.GoBenchCount > 0 {
		for _, s := range []GoBenchSpec{
			{Pkg: "./plugin/global", Pattern: "^BenchmarkServeDNS$", Count: cfg.GoBenchCount},
			{Pkg: "./plugin/global", Pattern: "^BenchmarkServeDNSScale$", Count: cfg.GoBenchCount},
			{Pkg: "./aggregate", Pattern: ".", Count: cfg.GoBenchCount},
			{Pkg: "./plugin/global", Pattern: "^BenchmarkIndexMemory$", Benchtime: "1x", Count: 1},
			{Pkg: "./plugin/global", Pattern: "^BenchmarkNonMemberMemory$", Benchtime: "1x", Count: 1},
			CurveSpec,
		} {
			b, err := RunGoBench(ctx, cfg.Dir, s)
			if errors.Is(err, errNoBenchmarks) {
				cfg.Log("warning: %v", err) // renamed or removed: report the rest
				continue
			}
			if err != nil {
				return res, err
			}
			res.GoBench = append(res.GoBench, b...)
		}
		phase("Go benchmarks")
	}
	res.Elapsed = time.Since(res.Started)
	return res, nil
}

// benchControllers are the only kube-controller-manager controllers the
// benchmark's clusters need (the `default` ServiceAccount localkube waits
// for, and namespaces): the harness writes every slice itself, and the
// others' work on its hundreds of thousands of objects kept both CPUs busy
// for many minutes after they were written.
var benchControllers = []string{"namespace-controller", "serviceaccount-controller", "serviceaccount-token-controller"}

// startCluster starts a control plane of one cluster, "source", in dir, with
// serviceCIDRs (empty: localkube's) and the kube-apiserver apiserver (empty:
// localkube's), and returns it with an unthrottled BulkClient of it, for
// loading and changing mirrors.
func startCluster(ctx context.Context, dir, serviceCIDRs, apiserver string) (*localkube.Env, *localkube.Cluster, kubernetes.Interface, error) {
	env, err := localkube.Start(ctx, localkube.Options{
		Clusters: []string{"source"}, Dir: dir, ServiceCIDRs: serviceCIDRs, APIServer: apiserver,
		Controllers: benchControllers, Profiling: true,
		Logger: localkube.StderrLogger(false), StopOnSignal: true,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	cluster := env.Cluster("source")
	client, err := BulkClient(cluster.Config, -1)
	if err != nil {
		env.Stop()
		return nil, nil, nil, err
	}
	return env, cluster, client, nil
}

// BulkClient is a protobuf client for writing a world: qps requests a
// second (a burst as large), or unthrottled where qps < 0.
func BulkClient(c *rest.Config, qps float32) (kubernetes.Interface, error) {
	c = rest.CopyConfig(c)
	c.QPS, c.Burst = qps, max(0, int(qps))
	c.ContentType = "application/vnd.kubernetes.protobuf"
	return kubernetes.NewForConfig(c)
}

// throughputStep starts the pinned CoreDNS with every block for n globals and
// runs the interleaved rounds; the server stays up for the caller.
func (w World) throughputStep(ctx context.Context, cfg Config, n int, env []string, largest bool, res *Results) (*ThroughputResult, *CoreDNS, error) {
	blocks, hosts, err := w.Blocks(cfg.Dir, n)
	if err != nil {
		return nil, nil, err
	}
	srv, err := StartCoreDNS(ctx, cfg.Dir, fmt.Sprintf("throughput-%d", n), throughputCorefile, cfg.ServerCPUs,
		[]string{"GLOBAL_PORT", "KUBE_PORT", "HOSTS_PORT"}, append(slices.Clone(env), "BENCH_HOSTS="+hosts))
	if err != nil {
		return nil, nil, err
	}
	perf := Dnsperf{CPUs: cfg.ClientCPUs, Clients: 4, Inflight: 100}
	tp, err := Throughput(ctx, srv, n, blocks, perf, cfg)
	if err == nil && cfg.Profile && largest {
		var paths []string
		paths, err = profileBlocks(ctx, srv, blocks, perf, cfg)
		res.Profiles = append(res.Profiles, paths...)
	}
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	return tp, srv, nil
}

// controllerChecks: no writes while idle, exactly one for one endpoint change.
func (w World) controllerChecks(ctx context.Context, cfg Config, client kubernetes.Interface, ctrl *run.Controller, srv *CoreDNS, idleFrom time.Time, base Writes, res *Results) error {
	if rest := cfg.Idle - time.Since(idleFrom); rest > 0 {
		cfg.Log("controller idle: %v more", rest.Round(time.Second))
		if err := pause(ctx, rest); err != nil {
			return err
		}
	}
	idle, err := ControllerWrites(ctrl)
	if err != nil {
		return err
	}
	res.Scale = append(res.Scale, ScaleStep{
		What:   fmt.Sprintf("idle %v (DNS throughput runs meanwhile)", time.Since(idleFrom).Round(time.Second)),
		Writes: idle.Minus(base), Want: "0",
	})

	kube := srv.PortAddr("KUBE_PORT")
	change := func(extra ...Endpoint) (Writes, error) {
		before, err := ControllerWrites(ctrl)
		if err != nil {
			return nil, err
		}
		if _, _, err := w.SetExtra(ctx, client, 0, 0, extra...); err != nil {
			return nil, err
		}
		if err := scenario.AwaitRecords(ctx, kube, w.FQDN(Global(0)), Records+len(extra), time.Minute); err != nil {
			return nil, err
		}
		after, err := Settle(ctx, ctrl, 3*time.Second, time.Minute)
		return after.Minus(before), err
	}
	one, err := change(Endpoint{Hostname: Base(0) + "-x", Addr: ChangeAddr(changeAddrs - 1)})
	if err != nil {
		return err
	}
	res.Scale = append(res.Scale, ScaleStep{What: "one endpoint added to one mirror slice", Writes: one, Want: "1"})
	_, err = change() // back to the loaded state, uncounted
	return err
}

// TransportAlone measures UDP and TCP under CPU contention alone, on a
// cluster of its own holding the mirrors of bases bases.
func TransportAlone(ctx context.Context, cfg Config, bases int) (*TransportResult, error) {
	env, cluster, w, err := clusterOfMirrors(ctx, cfg, "transport-cluster", bases)
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	return w.transportStep(ctx, cfg, bases, []string{"BENCH_KUBECONFIG=" + cluster.Kubeconfig})
}

// clusterOfMirrors starts a cluster of its own in cfg.Dir/dir holding the
// mirrors of bases bases, for a part measured on its own; the caller stops
// env.
func clusterOfMirrors(ctx context.Context, cfg Config, dir string, bases int) (*localkube.Env, *localkube.Cluster, World, error) {
	w := World{Namespace: namespace}
	env, cluster, client, err := startCluster(ctx, filepath.Join(cfg.Dir, dir), "", "")
	if err != nil {
		return nil, nil, w, err
	}
	if err := w.Load(ctx, client, 0, bases, cfg.LoadWorkers); err != nil {
		env.Stop()
		return nil, nil, w, err
	}
	return env, cluster, w, nil
}

// transportStep measures UDP and TCP latency (TransportLatency) of the
// global block answering the first global, on a CoreDNS of its own that,
// as in a cluster, runs on every CPU.
func (w World) transportStep(ctx context.Context, cfg Config, n int, env []string) (*TransportResult, error) {
	name := w.FQDN(Global(0))
	srv, err := StartCoreDNS(ctx, cfg.Dir, fmt.Sprintf("transport-%d", n), answererBlocks, "", []string{"GLOBAL_PORT", "KUBE_PORT"}, env,
		probe{"GLOBAL_PORT", name, Records})
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	return TransportLatency(ctx, srv.PortAddr("GLOBAL_PORT"), name, Records, 4, cfg.TransportDuration, runtime.NumCPU())
}

func (w World) latencyStep(ctx context.Context, cfg Config, client kubernetes.Interface, ctrl *run.Controller, n int, env []string, res *Results) (*LatencyResult, error) {
	last := w.FQDN(Global(n - 1))
	srv, err := StartCoreDNS(ctx, cfg.Dir, fmt.Sprintf("latency-%d", n), answererBlocks, "" /* every CPU, as in a cluster */, []string{"GLOBAL_PORT", "KUBE_PORT"}, env,
		probe{"GLOBAL_PORT", last, Records}, probe{"KUBE_PORT", last, Records})
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	before, err := ControllerWrites(ctrl)
	if err != nil {
		return nil, err
	}
	lat, err := w.ProgrammingLatency(ctx, client, srv.PortAddr("GLOBAL_PORT"), srv.PortAddr("KUBE_PORT"), srv.MetricsURL, cfg.Changes, n, cfg.Log)
	if err != nil {
		return nil, err
	}
	after, err := Settle(ctx, ctrl, 2*time.Second, time.Minute)
	if err != nil {
		return nil, err
	}
	res.Scale = append(res.Scale, ScaleStep{
		What: fmt.Sprintf("%d endpoint changes (programming latency)", cfg.Changes), Writes: after.Minus(before),
		Want: strconv.Itoa(cfg.Changes),
	})
	return lat, nil
}
