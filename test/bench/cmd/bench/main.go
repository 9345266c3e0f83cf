// Command bench runs globalmirror's benchmarks (`make bench`) and writes the
// results as markdown to stdout and to -out. Run it from the repository root
// with GLOBALMIRROR_KUBE_ASSETS and GLOBALMIRROR_BIN set, as make does.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/globalmirror/globalmirror/controller/options"
	"github.com/globalmirror/globalmirror/test/bench"
	"github.com/globalmirror/globalmirror/test/localkube"
)

func main() {
	cfg := bench.Config{}
	sizes := flag.String("sizes", "1000,10000", "globals per throughput step, ascending; the first also runs the controller checks and programming latency")
	flag.IntVar(&cfg.Rounds, "rounds", 5, "interleaved dnsperf rounds per size")
	cfg.Duration = 10 * time.Second
	// A bare number is seconds, as in BENCH_DURATION=10.
	flag.Func("duration", "one dnsperf run (QPS, CPU per query): a duration or whole seconds (default 10s)", func(v string) (err error) {
		if n, err := strconv.Atoi(v); err == nil {
			cfg.Duration = time.Duration(n) * time.Second
			return nil
		}
		cfg.Duration, err = time.ParseDuration(v)
		return err
	})
	flag.DurationVar(&cfg.LatencyDuration, "latency-duration", 5*time.Second, "one verbose dnsperf run (latency percentiles); 0: none")
	flag.DurationVar(&cfg.TransportDuration, "transport-duration", 20*time.Second, "UDP and TCP clients asking under CPU contention; 0: none")
	paged := flag.String("paged-apiserver", "", "a kube-apiserver that does not stream lists, on which Linkerd's shape is measured again (default: the 1.33 of $"+localkube.APIServersEnv+"); none: not")
	flag.IntVar(&cfg.Changes, "changes", 200, "endpoint changes for programming latency")
	flag.DurationVar(&cfg.Idle, "idle", time.Minute, "controller idle window (overlaps the first size's throughput runs)")
	flag.IntVar(&cfg.RSSRounds, "rss-rounds", 2, "CoreDNS RSS samples with the plugin off and on")
	flag.IntVar(&cfg.GoBenchCount, "gobench-count", 3, "go test -count for the micro-benchmarks; 0: skip them")
	flag.StringVar(&cfg.ServerCPUs, "server-cpus", "0", "taskset CPU list for CoreDNS under load")
	flag.StringVar(&cfg.ClientCPUs, "client-cpus", "1", "taskset CPU list for dnsperf")
	flag.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "one unrecorded dnsperf run per block before the rounds; 0: none")
	flag.Float64Var(&cfg.QuietLimit, "quiet-limit", 0.3, "before the rounds, wait until the machine uses fewer CPUs than this over 3s; 0: don't wait")
	flag.DurationVar(&cfg.QuietMax, "quiet-max", 3*time.Minute, "the longest wait for -quiet-limit")
	flag.BoolVar(&cfg.NoPinOthers, "no-pin-others", false, "leave the control planes and the controller on every CPU during the rounds (by default they move to -client-cpus)")
	flag.IntVar(&cfg.ControllerWorkers, "controller-workers", 0, "the controller's --workers; 0: its and the chart's default")
	flag.IntVar(&cfg.ControllerQPS, "controller-qps", int(options.Default().KubeAPIQPS), "the controller's --kube-api-qps (burst twice that); default: the controller's and the chart's (-1: no client-side limit)")
	flag.IntVar(&cfg.LoadWorkers, "load-workers", 16, "concurrent writes while loading mirrors")
	flag.BoolVar(&cfg.Profile, "profile", false, "record CoreDNS CPU profiles per block at the largest size")
	flag.StringVar(&cfg.GoCmd, "go", "go", "the go command")
	flag.StringVar(&cfg.Dir, "dir", filepath.Join(os.TempDir(), "globalmirror-bench"), "work directory: logs, query files, dnsperf output, profiles")
	out := flag.String("out", "test/bench/RESULTS.md", "markdown results file")
	linkerd := flag.String("linkerd-memory", "", "only measure CoreDNS's memory in Linkerd's full shape at these bases (e.g. 667,2000), print it and exit")
	stormOnly := flag.Bool("storm", false, "only run the storms in the largest users' shape, print them and exit")
	curveOnly := flag.Bool("curve", false, "only run BenchmarkCurve, write curves.json beside -out and exit")
	flag.BoolVar(&cfg.NoStorms, "no-storms", false, "with -linkerd-memory: leave out the storms")
	flag.BoolVar(&cfg.NoEndpointMirrorServices, "no-endpoint-mirror-services", false, "Linkerd's shape without the endpoint mirrors' Services at every size (global never receives them; the API server writes them ever slower)")
	flag.BoolVar(&cfg.HeadlessEndpointMirrors, "headless-endpoint-mirrors", false, "Linkerd's shape with the endpoint mirrors' Services without a ClusterIP at every size, -linkerd-large's too (the objects the stock plugin lists, without the API server's address allocation)")
	flag.IntVar(&cfg.LinkerdLarge, "linkerd-large", 11112, "bases Linkerd's shape then grows to (100,008 mirrored endpoints), without the endpoint mirrors' Services, to measure what global adds there; 0: none")
	linkerdSizes := flag.String("linkerd-sizes", "667,2000", "bases of Linkerd's full shape whose memory and relists the full run measures; empty: none")
	linkerdPaged := flag.Bool("linkerd-paged", false, "with -linkerd-memory: on -paged-apiserver, every list in pages")
	transportOnly := flag.Bool("transport", false, "only measure UDP and TCP under CPU contention at the first -sizes, print it and exit")
	passOnly := flag.Bool("passthrough", false, "only measure the names that are not global through global in front of kubernetes and through kubernetes alone, at the first -sizes, print it and exit")
	reloadOnly := flag.Bool("reload", false, "only measure Corefile reloads of global and of the kubernetes plugin in Linkerd's shape at -linkerd-sizes and -linkerd-large (streamed), print them and exit")
	startOnly := flag.Bool("start", false, "only measure cold starts of CoreDNS in Linkerd's shape at -linkerd-sizes and -linkerd-large, streamed and on -paged-apiserver, print them and exit")
	merge := flag.Bool("merge", false, "with -linkerd-memory -linkerd-paged, -transport, -start, -reload, -passthrough or -storm: replace that part's section of -out and its floors in results.json (dated) with this run's")
	flag.Parse()
	resultsJSON := filepath.Join(filepath.Dir(*out), "results.json") // the floors, beside -out
	startsJSON := filepath.Join(filepath.Dir(*out), "starts.json")   // the cold starts test/benchplot draws
	curveOut := filepath.Join(filepath.Dir(*out), "curves.json")     // BenchmarkCurve's points, test/benchplot draws too
	var err error
	switch *paged {
	case "none":
	case "":
		if cfg.PagedAPIServer, err = localkube.Release("1.33"); err != nil {
			fail(fmt.Errorf("-paged-apiserver: %w; or -paged-apiserver=none", err))
		}
	default:
		cfg.PagedAPIServer = *paged
	}
	cfg.Sizes = parseSizes(*sizes)
	if *linkerdSizes != "" {
		cfg.LinkerdSizes = parseSizes(*linkerdSizes)
	}
	check(os.RemoveAll(cfg.Dir))
	check(os.MkdirAll(cfg.Dir, 0o755))
	start := time.Now()
	cfg.Log = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench %6s  %s\n", time.Since(start).Round(time.Second), fmt.Sprintf(format, args...))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// checkRun fails on a run's error, pointing at its logs.
	checkRun := func(err error) {
		if err != nil {
			fail(fmt.Errorf("%w (logs in %s)", err, cfg.Dir))
		}
	}
	merged := func(err error) {
		check(err)
		cfg.Log("merged into %s and results.json", *out)
	}
	// writeFile writes to path what write writes.
	writeFile := func(path string, write func(io.Writer) error) {
		var b bytes.Buffer
		check(write(&b))
		check(os.WriteFile(path, b.Bytes(), 0o644))
		cfg.Log("wrote %s", path)
	}

	cfg.Log("work directory %s", cfg.Dir)
	switch {
	case *linkerd != "":
		sizes := parseSizes(*linkerd)
		apiserver := ""
		if *linkerdPaged {
			apiserver = cfg.PagedAPIServer
		}
		res, err := bench.LinkerdMemory(ctx, cfg, sizes, apiserver)
		checkRun(err)
		bench.ReportLinkerdMemory(os.Stdout, res)
		if *merge && !*linkerdPaged {
			fail(fmt.Errorf("-merge merges a paged run only: add -linkerd-paged"))
		} else if *merge {
			merged(bench.MergePaged(*out, resultsJSON, res, start))
		}
	case *startOnly:
		cfg.StartOnly = true
		streamed, err := bench.LinkerdMemory(ctx, cfg, cfg.LinkerdSizes, "")
		checkRun(err)
		var paged *bench.LinkerdMemoryResult
		if cfg.PagedAPIServer != "" {
			paged, err = bench.LinkerdMemory(ctx, cfg, cfg.LinkerdSizes, cfg.PagedAPIServer)
			checkRun(err)
		}
		bench.ReportStarts(os.Stdout, streamed, paged)
		check(bench.WriteStartPoints(startsJSON, streamed, paged))
		if *merge {
			command := fmt.Sprintf("bench -start -linkerd-sizes=%s -linkerd-large=%d -no-endpoint-mirror-services=%v -headless-endpoint-mirrors=%v -merge", *linkerdSizes, cfg.LinkerdLarge, cfg.NoEndpointMirrorServices, cfg.HeadlessEndpointMirrors)
			merged(bench.MergeStarts(*out, resultsJSON, streamed, paged, start, command))
		}
	case *passOnly:
		res, err := bench.PassThrough(ctx, cfg, cfg.Sizes[0])
		checkRun(err)
		bench.ReportPassThrough(os.Stdout, res)
		if *merge {
			merged(bench.MergePassThrough(*out, resultsJSON, res, start, fmt.Sprintf("bench -passthrough -sizes=%d -rounds=%d -duration=%s -merge", cfg.Sizes[0], cfg.Rounds, cfg.Duration)))
		}
	case *reloadOnly:
		cfg.ReloadOnly = true
		res, err := bench.LinkerdMemory(ctx, cfg, cfg.LinkerdSizes, "")
		checkRun(err)
		bench.ReportReloads(os.Stdout, res)
		if *merge {
			command := fmt.Sprintf("bench -reload -linkerd-sizes=%s -linkerd-large=%d -no-endpoint-mirror-services=%v -headless-endpoint-mirrors=%v -merge", *linkerdSizes, cfg.LinkerdLarge, cfg.NoEndpointMirrorServices, cfg.HeadlessEndpointMirrors)
			merged(bench.MergeReloads(*out, resultsJSON, res, start, command))
		}
	case *transportOnly:
		if cfg.TransportDuration <= 0 {
			fail(fmt.Errorf("-transport needs a -transport-duration"))
		}
		res, err := bench.TransportAlone(ctx, cfg, cfg.Sizes[0])
		checkRun(err)
		bench.ReportTransport(os.Stdout, res)
		if *merge {
			merged(bench.MergeTransport(*out, resultsJSON, res, cfg.Sizes[0], start))
		}
	case *stormOnly:
		rep, err := bench.StormAlone(ctx, cfg)
		bench.ReportStorm(os.Stdout, rep)
		checkRun(err)
		if *merge {
			merged(bench.MergeStorms(*out, resultsJSON, rep, start))
		}
	case *curveOnly:
		check(bench.CompileTests(ctx, cfg.GoCmd, cfg.Dir, "./plugin/global"))
		bs, err := bench.RunGoBench(ctx, cfg.Dir, bench.CurveSpec)
		check(err)
		writeFile(curveOut, func(w io.Writer) error { return bench.WriteCurve(w, bench.Curve(bs)) })
	default:
		res, err := bench.Run(ctx, cfg)
		checkRun(err)
		writeFile(*out, func(w io.Writer) error {
			bench.Report(io.MultiWriter(os.Stdout, w), res)
			return nil
		})
		// The floors as JSON beside the report, for programs.
		writeFile(resultsJSON, func(w io.Writer) error { return bench.ReportJSON(w, res) })
		if res.Linkerd != nil {
			check(bench.WriteStartPoints(startsJSON, res.Linkerd, res.LinkerdPaged))
		}
		writeFile(curveOut, func(w io.Writer) error { return bench.WriteCurve(w, bench.Curve(res.GoBench)) })
	}
}

// parseSizes reads a list of sizes, or fails.
func parseSizes(s string) []int {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > bench.MaxBases || (len(out) > 0 && n <= out[len(out)-1]) {
			fail(fmt.Errorf("-sizes %q: want ascending counts between 1 and %d", s, bench.MaxBases))
		}
		out = append(out, n)
	}
	return out
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
