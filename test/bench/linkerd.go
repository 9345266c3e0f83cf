package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
)

// linkerdServiceCIDRs hold an endpoint mirror's ClusterIP for each of
// 100,000 mirrored pods and more.
const linkerdServiceCIDRs = "10.96.0.0/12,fd00:10:96::/108"

// LinkerdMemoryStep is CoreDNS's memory at one size of Linkerd's full shape.
type LinkerdMemoryStep struct {
	Bases, Endpoints int
	RSS              *RSSResult
}

// LinkerdMemory measures CoreDNS's memory, with and without the global
// plugin, in Linkerd's full shape (a headless mirror per base and cluster
// and an endpoint mirror per pod), at each of sizes bases, ascending: what
// the plugin adds per mirrored endpoint is the slope between two sizes,
// which leaves out what does not grow with the world.
func LinkerdMemory(ctx context.Context, cfg Config, sizes []int) ([]LinkerdMemoryStep, error) {
	env, err := localkube.Start(ctx, localkube.Options{
		Clusters: []string{"source"}, Dir: filepath.Join(cfg.Dir, "linkerd-cluster"), ServiceCIDRs: linkerdServiceCIDRs,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), StopOnSignal: true,
	})
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	cluster := env.Cluster("source")
	client, err := bulkClient(cluster.Config)
	if err != nil {
		return nil, err
	}
	w := World{Namespace: namespace}
	env2 := []string{"BENCH_KUBECONFIG=" + cluster.Kubeconfig}
	var steps []LinkerdMemoryStep
	loaded := 0
	for _, n := range sizes {
		t := time.Now()
		if err := w.Load(ctx, client, loaded, n, cfg.LoadWorkers); err != nil {
			return steps, err
		}
		if err := w.LoadEndpointMirrors(ctx, client, loaded, n, cfg.LoadWorkers); err != nil {
			return steps, err
		}
		cfg.Log("loaded Linkerd's full shape of bases %d-%d in %v", loaded, n-1, time.Since(t).Round(time.Second))
		loaded = n
		// The controller's slices answer the global names for the
		// CoreDNS without the plugin, as RSS expects.
		ctrl, err := run.StartController(ctx, cfg.Dir, fmt.Sprintf("linkerd-controller-%d.log", n), cluster.Kubeconfig,
			"--leader-elect=false", "--namespaces="+namespace,
			"--kube-api-qps="+strconv.Itoa(cfg.ControllerQPS), "--kube-api-burst="+strconv.Itoa(2*cfg.ControllerQPS))
		if err != nil {
			return steps, err
		}
		if _, err := Converged(ctx, ctrl, n, 20*time.Minute); err != nil {
			ctrl.Stop()
			return steps, err
		}
		ctrl.Stop()
		t = time.Now()
		rss, err := w.RSS(ctx, cfg.Dir, n, cfg.RSSRounds, 10*time.Second, env2)
		if err != nil {
			return steps, err
		}
		cfg.Log("CoreDNS memory at %d bases of Linkerd's full shape in %v", n, time.Since(t).Round(time.Second))
		steps = append(steps, LinkerdMemoryStep{Bases: n, Endpoints: n * len(Clusters) * Pods, RSS: rss})
	}
	return steps, nil
}

// ReportLinkerdMemory writes the steps and the slopes between the first and
// the last: bytes per mirrored endpoint of the kubernetes plugin alone and
// what global adds, live heap and RSS.
func ReportLinkerdMemory(out io.Writer, steps []LinkerdMemoryStep) {
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("CoreDNS in Linkerd's full shape (a headless mirror per base and cluster, an endpoint mirror Service and slice per pod), " +
		"10 s after it answers the last names, live heap after a GC forced through pprof; medians:\n\n")
	p("| bases | mirrored endpoints | `kubernetes` only: heap | RSS | with `global`: heap | RSS |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range steps {
		p("| %s | %s | %s | %s | %s | %s |\n", thousands(s.Bases), thousands(s.Endpoints),
			mib(medianFloat(s.RSS.OffHeap)), mib(float64(medianInt(s.RSS.Off))), mib(medianFloat(s.RSS.OnHeap)), mib(float64(medianInt(s.RSS.On))))
	}
	if len(steps) < 2 {
		return
	}
	a, b := steps[0], steps[len(steps)-1]
	d := float64(b.Endpoints - a.Endpoints)
	slope := func(x, y float64) float64 { return (y - x) / d }
	offHeap := slope(medianFloat(a.RSS.OffHeap), medianFloat(b.RSS.OffHeap))
	onHeap := slope(medianFloat(a.RSS.OnHeap), medianFloat(b.RSS.OnHeap))
	offRSS := slope(float64(medianInt(a.RSS.Off)), float64(medianInt(b.RSS.Off)))
	onRSS := slope(float64(medianInt(a.RSS.On)), float64(medianInt(b.RSS.On)))
	p("\nPer mirrored endpoint, the slope from %s to %s endpoints:\n\n", thousands(a.Endpoints), thousands(b.Endpoints))
	p("| | live heap, B | RSS, B |\n|---|---:|---:|\n")
	p("| the stock `kubernetes` plugin | %.0f | %.0f |\n", offHeap, offRSS)
	p("| what `global` adds | %.0f | %.0f |\n", onHeap-offHeap, onRSS-offRSS)
}

func medianFloat(v []float64) float64 { return Median(v) }
