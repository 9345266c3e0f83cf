package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
)

// linkerdServiceCIDRs hold an endpoint mirror's ClusterIP for each of
// 100,000 mirrored pods and more.
const linkerdServiceCIDRs = "10.96.0.0/12,fd00:10:96::/108"

// LinkerdMemoryResult is CoreDNS's memory in Linkerd's full shape: at each
// size, and through API server faults at the largest.
type LinkerdMemoryResult struct {
	// Paged: on an API server that does not stream lists, so that every
	// list is read in pages (Config.PagedAPIServer).
	Paged bool
	Steps []LinkerdMemoryStep
	// Large is the world grown on to Config.LinkerdLarge bases, but for the
	// endpoint mirrors' Services; nil if not.
	Large   *LinkerdMemoryStep
	Relists []RelistResult
	Storms  *StormReport
}

// LinkerdMemoryStep is CoreDNS's memory at one size of Linkerd's full shape.
type LinkerdMemoryStep struct {
	// World is what was measured: whether without the endpoint mirrors'
	// Services or with them headless.
	World            World
	Bases, Endpoints int
	RSS              *RSSResult
	// The controller's, converged: live heap as of its last collection
	// (go_memstats_next_gc_bytes ÷ 2 at GOGC=100) and VmRSS.
	ControllerLive float64
	ControllerRSS  int64
	// Starts are cold starts of global and of the kubernetes plugin, after
	// the machine settled (StartsQuiet).
	Starts      []StartResult
	StartsQuiet QuietResult
	// Reloads are Corefile reloads of global and of the kubernetes plugin,
	// where the API server streams lists.
	Reloads []ReloadResult
}

// LinkerdMemory measures CoreDNS's memory, with and without the global
// plugin, in Linkerd's full shape (a headless mirror per base and cluster
// and an endpoint mirror per pod), at each of sizes bases, ascending: what
// the plugin adds per mirrored endpoint is the slope between two sizes,
// which leaves out what does not grow with the world. apiserver, when set,
// is a kube-apiserver that does not stream lists: the lists are then paged,
// and the world is not stormed.
func LinkerdMemory(ctx context.Context, cfg Config, sizes []int, apiserver string) (*LinkerdMemoryResult, error) {
	dir := "linkerd-cluster"
	if apiserver != "" {
		dir = "linkerd-paged-cluster"
	}
	env, cluster, client, err := startCluster(ctx, filepath.Join(cfg.Dir, dir), linkerdServiceCIDRs, apiserver)
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	if apiserver != "" {
		if streams, err := localkube.StreamsLists(ctx, cluster.Client); err != nil || streams {
			return nil, fmt.Errorf("the paged API server %s streams lists (%v)", apiserver, err)
		}
	}
	w := World{Namespace: namespace, NoEndpointMirrorServices: cfg.NoEndpointMirrorServices, HeadlessEndpointMirrors: cfg.HeadlessEndpointMirrors}
	env2 := []string{"BENCH_KUBECONFIG=" + cluster.Kubeconfig}
	res := &LinkerdMemoryResult{Paged: apiserver != ""}
	loaded := 0
	// grow loads bases [loaded, n) of w and measures the controller and
	// CoreDNS at n.
	grow := func(w World, n int) (LinkerdMemoryStep, error) {
		t := time.Now()
		if err := w.Load(ctx, client, loaded, n, cfg.LoadWorkers); err != nil {
			return LinkerdMemoryStep{}, err
		}
		if err := w.LoadEndpointMirrors(ctx, client, loaded, n, cfg.LoadWorkers); err != nil {
			return LinkerdMemoryStep{}, err
		}
		cfg.Log("loaded Linkerd's shape of bases %d-%d in %v", loaded, n-1, time.Since(t).Round(time.Second))
		loaded = n
		live, crss, err := controllerMemory(ctx, cfg, cluster.Kubeconfig, n)
		if err != nil {
			return LinkerdMemoryStep{}, err
		}
		step := LinkerdMemoryStep{World: w, Bases: n, Endpoints: n * len(Clusters) * Pods, ControllerLive: live, ControllerRSS: crss}
		if cfg.ReloadOnly {
			t = time.Now()
			step.Reloads, err = w.Reloads(ctx, cfg.Dir, cluster, n, cfg.QuietLimit, env2, cfg.Log)
			cfg.Log("reloads at %d bases of Linkerd's shape in %v", n, time.Since(t).Round(time.Second))
			return step, err
		}
		if !cfg.StartOnly {
			t = time.Now()
			if step.RSS, err = w.RSS(ctx, cfg.Dir, n, cfg.RSSRounds, 10*time.Second, env2); err != nil {
				return step, err
			}
			cfg.Log("CoreDNS memory at %d bases of Linkerd's shape in %v", n, time.Since(t).Round(time.Second))
		}
		t = time.Now()
		if step.Starts, step.StartsQuiet, err = w.Starts(ctx, cfg.Dir, cluster, n, cfg.QuietLimit, env2, cfg.Log); err != nil {
			return step, err
		}
		cfg.Log("cold starts at %d bases of Linkerd's shape in %v", n, time.Since(t).Round(time.Second))
		if !cfg.StartOnly && !res.Paged {
			t = time.Now()
			step.Reloads, err = w.Reloads(ctx, cfg.Dir, cluster, n, cfg.QuietLimit, env2, cfg.Log)
			cfg.Log("reloads at %d bases of Linkerd's shape in %v", n, time.Since(t).Round(time.Second))
		}
		return step, err
	}
	for _, n := range sizes {
		step, err := grow(w, n)
		if err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, step)
	}
	if !cfg.StartOnly && !cfg.ReloadOnly {
		if res.Relists, err = w.Relist(ctx, cfg.Dir, cluster, loaded, env2, cfg.Log); err != nil {
			return res, err
		}
	}
	if cfg.LinkerdLarge > loaded {
		// Grown to about 100,000 mirrored endpoints without the endpoint
		// mirrors' Services (see World.NoEndpointMirrorServices): what
		// global adds is measured all the same; what the stock plugin holds
		// is not, there. Or with them headless, which it lists all the same.
		step, err := grow(World{Namespace: namespace, NoEndpointMirrorServices: !cfg.HeadlessEndpointMirrors,
			HeadlessEndpointMirrors: cfg.HeadlessEndpointMirrors}, cfg.LinkerdLarge)
		if err != nil {
			return res, err
		}
		res.Large = &step
	}
	if cfg.NoStorms || cfg.StartOnly || cfg.ReloadOnly || res.Paged {
		return res, nil
	}
	// Last: the storm world, in a namespace of its own, stays loaded.
	res.Storms, err = Storm(ctx, cfg, cluster.Kubeconfig, client, env2)
	return res, err
}

// ReportLinkerdMemory writes the steps and the slopes between the first and
// the last: bytes per mirrored endpoint of the kubernetes plugin alone and
// what global adds, live heap and RSS.
func ReportLinkerdMemory(out io.Writer, res *LinkerdMemoryResult) {
	defer ReportStorm(out, res.Storms)
	defer ReportRelist(out, res.Relists)
	steps := res.Steps
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("CoreDNS in Linkerd's full shape (a headless mirror per base and cluster, an endpoint mirror Service and slice per pod): " +
		"live heap after a collection forced through pprof 10 s after it answers the last names; " +
		"RSS at rest, 10 s after a second collection (what the runtime keeps is set when a collection ends marking, " +
		"so after the first the lists' garbage still counts; an idle CoreDNS gets there by itself, the runtime forcing a collection every 2 minutes), " +
		"and, in the slopes, RSS as it was before the first (loaded); medians:\n\n")
	p("| bases | mirrored endpoints | `kubernetes` only: heap | RSS | with `global`: heap | RSS | `global` only: heap | RSS |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runSteps(res) {
		s := r.step
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", thousands(s.Bases), thousands(s.Endpoints),
			mib(s.RSS.Off.heap()), mib(s.RSS.Off.rest()), mib(s.RSS.On.heap()), mib(s.RSS.On.rest()), mib(s.RSS.Alone.heap()), mib(s.RSS.Alone.rest()))
	}
	if len(steps) < 2 {
		return
	}
	a, b := steps[0], steps[len(steps)-1]
	sl := res.Slopes()
	p("\nPer mirrored endpoint, the slope from %s to %s endpoints:\n\n", thousands(a.Endpoints), thousands(b.Endpoints))
	p("| | live heap, B | RSS at rest, B | RSS loaded, B |\n|---|---:|---:|---:|\n")
	p("| the stock `kubernetes` plugin | %.0f | %.0f | %.0f |\n", sl.KubeHeap, sl.KubeRSS, sl.KubeRSSLoaded)
	p("| what `global` adds (with `global` − `kubernetes` only) | %.0f | %.0f | %.0f |\n", sl.GlobalHeap, sl.GlobalRSS, sl.GlobalRSSLoaded)
	p("| what `global` holds (`global` only) | %.0f | %.0f | %.0f |\n", sl.AloneHeap, sl.AloneRSS, sl.AloneRSSLoaded)
	p("| the controller (its own process; live heap as of its last collection; RSS 10 s after it converged) | %.0f | %.0f | |\n", sl.ControllerHeap, sl.ControllerRSS)
	if l := res.Large; l != nil {
		ls := res.LargeSlopes()
		p("\nGrown on to %s bases (%s mirrored endpoints), without the endpoint mirrors' Services, which global never receives: "+
			"`kubernetes` only %s heap, %s RSS; with `global` %s heap, %s RSS. Per mirrored endpoint, the slope from %s to %s endpoints:\n\n",
			thousands(l.Bases), thousands(l.Endpoints), mib(l.RSS.Off.heap()), mib(l.RSS.Off.rest()), mib(l.RSS.On.heap()), mib(l.RSS.On.rest()),
			thousands(b.Endpoints), thousands(l.Endpoints))
		p("| | live heap, B | RSS at rest, B | RSS loaded, B |\n|---|---:|---:|---:|\n")
		p("| what `global` adds (with `global` − `kubernetes` only) | %.0f | %.0f | %.0f |\n", ls.GlobalHeap, ls.GlobalRSS, ls.GlobalRSSLoaded)
		p("| what `global` holds (`global` only) | %.0f | %.0f | %.0f |\n", ls.AloneHeap, ls.AloneRSS, ls.AloneRSSLoaded)
		p("| the controller | %.0f | %.0f | |\n", ls.ControllerHeap, ls.ControllerRSS)
	}
}

// MemorySlopes are bytes per mirrored endpoint, the slope from the first
// size to the last.
type MemorySlopes struct {
	KubeHeap, KubeRSS     float64 // CoreDNS with the kubernetes plugin alone
	GlobalHeap, GlobalRSS float64 // what global adds to it
	// CoreDNS with the global plugin alone: what it holds, without the
	// kubernetes plugin's noise on both sides of a difference.
	AloneHeap, AloneRSS           float64
	ControllerHeap, ControllerRSS float64
	// RSS settle after the lists, before any collection forced: what the
	// lists left is still counted.
	KubeRSSLoaded, GlobalRSSLoaded, AloneRSSLoaded float64
}

// Slopes are the bytes per mirrored endpoint between the first and the last size.
func (res *LinkerdMemoryResult) Slopes() MemorySlopes {
	return slopes(res.Steps[0], res.Steps[len(res.Steps)-1])
}

// LargeSlopes are what global and the controller add per mirrored endpoint
// from the last full-shape size to Large (the stock plugin's Kube slopes are
// not comparable there, it misses the endpoint mirrors' Services, and go
// unreported).
func (res *LinkerdMemoryResult) LargeSlopes() MemorySlopes {
	return slopes(res.Steps[len(res.Steps)-1], *res.Large)
}

// slopes are the bytes per mirrored endpoint from step a to step b: what
// global adds is the slope with it less the slope without it.
func slopes(a, b LinkerdMemoryStep) MemorySlopes {
	d := float64(b.Endpoints - a.Endpoints)
	slope := func(block func(*RSSResult) RSSSamples, median func(RSSSamples) float64) float64 {
		return (median(block(b.RSS)) - median(block(a.RSS))) / d
	}
	off := func(r *RSSResult) RSSSamples { return r.Off }
	on := func(r *RSSResult) RSSSamples { return r.On }
	alone := func(r *RSSResult) RSSSamples { return r.Alone }
	s := MemorySlopes{
		KubeHeap: slope(off, RSSSamples.heap), KubeRSS: slope(off, RSSSamples.rest), KubeRSSLoaded: slope(off, RSSSamples.loaded),
		AloneHeap: slope(alone, RSSSamples.heap), AloneRSS: slope(alone, RSSSamples.rest), AloneRSSLoaded: slope(alone, RSSSamples.loaded),
		ControllerHeap: (b.ControllerLive - a.ControllerLive) / d, ControllerRSS: float64(b.ControllerRSS-a.ControllerRSS) / d,
	}
	s.GlobalHeap = slope(on, RSSSamples.heap) - s.KubeHeap
	s.GlobalRSS = slope(on, RSSSamples.rest) - s.KubeRSS
	s.GlobalRSSLoaded = slope(on, RSSSamples.loaded) - s.KubeRSSLoaded
	return s
}

// controllerMemory starts the controller on the world's first bases bases
// and, once it converged, returns its live heap as of its last collection
// and its VmRSS, 10 s later; then it stops it. Its slices answer the global
// names for the CoreDNS without the plugin, as RSS expects.
func controllerMemory(ctx context.Context, cfg Config, kubeconfig string, bases int) (float64, int64, error) {
	ctrl, err := startController(ctx, cfg, kubeconfig, namespace, fmt.Sprintf("linkerd-controller-%d.log", bases))
	if err != nil {
		return 0, 0, err
	}
	defer ctrl.Stop()
	if _, err := Converged(ctx, ctrl, bases, bases*Records, 20*time.Minute); err != nil {
		return 0, 0, err
	}
	if err := pause(ctx, 10*time.Second); err != nil {
		return 0, 0, err
	}
	s, err := run.Scrape(ctrl.BaseURL + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	rss, err := vmRSS(ctrl.PID())
	return s.Sum("go_memstats_next_gc_bytes") / 2, rss, err
}
