package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/miekg/dns"
)

// The blocks whose cold start is measured, each alone in its CoreDNS with the
// ready plugin: global answering the globals, and the stock kubernetes
// plugin answering the mirrors' own names, as a cluster DNS without
// globalmirror would.
var (
	startGlobalCorefile     = run.Server("DNS_PORT", startReady+benchStanza("global"))
	startKubernetesCorefile = run.Server("DNS_PORT", startReady+benchStanza("kubernetes"))
)

const startReady = "    ready 127.0.0.1:{$READY_PORT}\n"

// StartResult is the cold starts of one block at one size.
type StartResult struct {
	Block string // "global" or "kubernetes"
	// Names it is asked for once Ready: every global, or every mirror.
	Names   int
	Samples []StartSample
}

// StartSample is one cold start, timed from the exec of the process.
type StartSample struct {
	// Ready: /ready first answered 200 (polled every startPoll). Complete:
	// the answer that made the last name right, every name asked from Ready
	// on, the wrong ones again until right.
	Ready, Complete time.Duration
	// WrongAtReady are the names not answered right when first asked, right
	// after Ready; UnansweredAtReady those of them not answered at all (no
	// server listening yet, or no reply within 2 s).
	WrongAtReady, UnansweredAtReady int
	// VmRSS: the largest from the exec until startSettle after Complete,
	// and the median over the last startSteady of that.
	PeakRSS, SteadyRSS int64
	// What the API server sent for this start's Services and
	// EndpointSlices, by its own metrics: list responses and watch events
	// (a streamed list's objects are watch events).
	ListBytes, ListObjects float64
}

const (
	startPoll   = 10 * time.Millisecond
	startSettle = 15 * time.Second
	startSteady = 5 * time.Second
	// startRounds: cold starts of each block at each size, interleaved.
	startRounds = 3
)

// startQuietMax is the longest wait for a quiet machine before the starts:
// after a world of 100,000 endpoints is written, the control plane works on
// it for a while.
const startQuietMax = 10 * time.Minute

// Starts starts CoreDNS with global alone and with kubernetes alone,
// alternately, startRounds times each, on the world's first bases bases,
// once the machine is quiet (less than quietLimit CPUs busy, or
// startQuietMax passed: the result says which).
func (w World) Starts(ctx context.Context, dir string, cluster *localkube.Cluster, bases int, quietLimit float64, env []string, logf func(string, ...any)) ([]StartResult, QuietResult, error) {
	q, err := WaitQuiet(ctx, quietLimit, 3*time.Second, startQuietMax)
	if err != nil {
		return nil, q, err
	}
	logf("cold starts at %d bases: the machine settled after %v (%.2f CPUs busy: %s)", bases, q.Waited.Round(time.Second), q.Busy, q.Top)
	globals, mirrors := w.askedNames(bases)
	out := []StartResult{{Block: "global", Names: len(globals)}, {Block: "kubernetes", Names: len(mirrors)}}
	for r := range startRounds {
		for i := range out {
			block := &out[i]
			corefile, names, records := startGlobalCorefile, globals, w.Records()
			if block.Block == "kubernetes" {
				corefile, names, records = startKubernetesCorefile, mirrors, Pods
			}
			name := fmt.Sprintf("start-%s-%d-%d", block.Block, bases, r)
			s, err := w.startOnce(ctx, dir, name, corefile, cluster, names, records, env)
			if err != nil {
				return out, q, fmt.Errorf("%s: %w", name, err)
			}
			logf("cold start of %s at %d bases: Ready %v, every name right %v (%d wrong at Ready, %d unanswered), RSS peak %s, steady %s, %s and %.0f objects listed",
				block.Block, bases, s.Ready.Round(time.Millisecond), s.Complete.Round(time.Millisecond), s.WrongAtReady, s.UnansweredAtReady,
				mib(float64(s.PeakRSS)), mib(float64(s.SteadyRSS)), mib(s.ListBytes), s.ListObjects)
			block.Samples = append(block.Samples, s)
		}
	}
	return out, q, nil
}

// askedNames are the names each block is asked for in bases bases: every
// global, and every headless mirror's own name; the last ones first, the
// names a plugin listing in order gets to last.
func (w World) askedNames(bases int) (globals, mirrors []string) {
	for i := bases - 1; i >= 0; i-- {
		globals = append(globals, w.FQDN(Global(i)))
		for c := len(w.clusters()) - 1; c >= 0; c-- {
			mirrors = append(mirrors, w.FQDN(w.Mirror(i, c)))
		}
	}
	return globals, mirrors
}

func (w World) startOnce(ctx context.Context, dir, name, corefile string, cluster *localkube.Cluster, names []string, records int, env []string) (StartSample, error) {
	var s StartSample
	before, err := apiserverLists(ctx, cluster)
	if err != nil {
		return s, err
	}
	began := time.Now()
	srv, err := run.StartCoreDNS(ctx, run.CoreDNSOptions{
		Corefile: adminBlock + corefile, Dir: dir, Name: name, Env: env,
		ExtraPorts: []string{"ADMIN_PORT", "PPROF_PORT"}, NoWait: true,
	})
	if err != nil {
		return s, err
	}
	defer srv.Stop()

	// VmRSS from the exec on, every startPoll; a failed reading is left out.
	stopSampling := sampleEvery(ctx, startPoll, func() (int64, error) { return vmRSS(srv.PID()) })
	defer stopSampling()

	// Ready: /ready answers 200, asked every startPoll.
	rctx, cancel := context.WithDeadline(ctx, began.Add(3*time.Minute))
	err = run.WaitHTTPEvery(rctx, "http://"+srv.PortAddr("READY_PORT")+"/ready", srv.Process, startPoll)
	s.Ready = time.Since(began)
	cancel()
	if err != nil {
		return s, err
	}
	if s.Complete, s.WrongAtReady, s.UnansweredAtReady, err = askUntilRight(ctx, srv.Addr, names, hasRecords(records, nil), began, 3*time.Minute); err != nil {
		return s, err
	}
	if err := pause(ctx, startSettle); err != nil {
		return s, err
	}
	rss, _ := stopSampling()
	if len(rss) == 0 {
		return s, errors.New("no VmRSS sampled")
	}
	s.PeakRSS = slices.Max(rss)
	steady := int(startSteady / startPoll)
	s.SteadyRSS = medianInt(rss[max(0, len(rss)-steady):])

	after, err := apiserverLists(ctx, cluster)
	if err != nil {
		return s, err
	}
	s.ListBytes, s.ListObjects = after.bytes-before.bytes, after.objects-before.objects
	return s, nil
}

// hasRecords is right for an answer with records A records; with ttl, only
// if their TTL is *ttl.
func hasRecords(records int, ttl *uint32) func(*dns.Msg) bool {
	return func(r *dns.Msg) bool {
		return r.Rcode == dns.RcodeSuccess && len(r.Answer) == records && (ttl == nil || r.Answer[0].Header().Ttl == *ttl)
	}
}

// askUntilRight asks every name once over UDP, from startWorkers clients,
// then the wrong ones again until each is answered right. It returns when
// the last was right (after began), how many were wrong at the first ask,
// and how many of those got no answer.
func askUntilRight(ctx context.Context, addr string, names []string, right func(*dns.Msg) bool, began time.Time, timeout time.Duration) (time.Duration, int, int, error) {
	const startWorkers = 8
	var complete time.Duration
	wrongAtReady, unanswered := -1, 0
	deadline := began.Add(timeout)
	for todo := names; len(todo) > 0; {
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("%d of %d names still wrong after %v, %s among them", len(todo), len(names), timeout, todo[0])
		}
		var mu sync.Mutex
		var wrong []string
		var wg sync.WaitGroup
		for k := range startWorkers {
			wg.Go(func() {
				for i := k; i < len(todo); i += startWorkers {
					r, err := dnsq.Ask("udp", addr, todo[i], dns.TypeA, 0)
					at := time.Since(began)
					mu.Lock()
					switch {
					case err == nil && right(r):
						complete = max(complete, at)
					case err != nil && wrongAtReady < 0:
						unanswered++
						fallthrough
					default:
						wrong = append(wrong, todo[i])
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if wrongAtReady < 0 {
			wrongAtReady = len(wrong)
		}
		todo = wrong
		if len(todo) > 0 {
			if err := pause(ctx, startPoll); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	return complete, wrongAtReady, unanswered, nil
}

// listCost is the API server's running totals of what it sent of Services
// and EndpointSlices: list responses and watch events.
type listCost struct{ bytes, objects float64 }

func apiserverLists(ctx context.Context, cluster *localkube.Cluster) (listCost, error) {
	raw, err := cluster.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return listCost{}, fmt.Errorf("the API server's metrics: %w", err)
	}
	s, err := run.ParseSamples(strings.NewReader(string(raw)))
	if err != nil {
		return listCost{}, err
	}
	// Labels differ by release: resource="services" (1.36), kind="Service"
	// (1.33), resource_prefix="/services/specs" (1.33's cache).
	ours := func(labels string) bool {
		return strings.Contains(labels, "services") || strings.Contains(labels, "endpointslices") ||
			strings.Contains(labels, `kind="Service"`) || strings.Contains(labels, `kind="EndpointSlice"`)
	}
	var c listCost
	for series, v := range s {
		name, labels, _ := strings.Cut(series, "{")
		if !ours(labels) {
			continue
		}
		switch name {
		case "apiserver_response_sizes_sum":
			if strings.Contains(labels, `verb="LIST"`) {
				c.bytes += v
			}
		case "apiserver_watch_events_sizes_sum":
			c.bytes += v
		case "apiserver_watch_events_total", "apiserver_cache_list_returned_objects_total", "apiserver_storage_list_returned_objects_total":
			c.objects += v
		}
	}
	return c, nil
}

// startSection is the title of the cold starts' section in RESULTS.md.
const startSection = "## 6. Cold starts"

// runStep is one size of one run of Linkerd's shape.
type runStep struct {
	step  LinkerdMemoryStep
	paged bool
}

// runSteps are every size of runs, each run's grown world (Large) after
// its steps.
func runSteps(runs ...*LinkerdMemoryResult) []runStep {
	var out []runStep
	for _, l := range runs {
		if l == nil {
			continue
		}
		for _, s := range l.Steps {
			out = append(out, runStep{step: s, paged: l.Paged})
		}
		if l.Large != nil {
			out = append(out, runStep{step: *l.Large, paged: l.Paged})
		}
	}
	return out
}

// shape is noEM without the endpoint mirrors' Services, headless with them
// headless, else empty.
func (s runStep) shape(noEM, headless string) string {
	switch {
	case s.step.World.NoEndpointMirrorServices:
		return noEM
	case s.step.World.HeadlessEndpointMirrors:
		return headless
	}
	return ""
}

func (s runStep) label() string {
	l := thousands(s.step.Endpoints) + " mirrored endpoints" + s.shape(" (no endpoint mirror Services)", " (endpoint mirror Services headless)")
	if s.paged {
		l += pagedLabel
	}
	return l
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// ReportStarts writes the cold starts of a streamed and a paged run.
func ReportStarts(out io.Writer, streamed, paged *LinkerdMemoryResult) {
	steps := runSteps(streamed, paged)
	if len(steps) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("\n%s\n\n", startSection)
	p("A fresh `bin/coredns` with one block, `global` alone (asked for every global) or the stock `kubernetes` plugin alone "+
		"(asked for every headless mirror's own name, as a cluster DNS without globalmirror answers), and the `ready` plugin; "+
		"Linkerd's full shape as in section 3, the controller's objects there. %d starts of each, interleaved. "+
		"From the exec: **Ready**, `/ready` first 200 (polled every %v); **every name right**, the answer that made the last name right, "+
		"every name asked over UDP from Ready on (8 clients), the wrong ones again until right; **wrong at Ready**, the names "+
		"not right when first asked, and of them, in brackets, those not answered at all (nothing listening yet, or no reply in 2 s). VmRSS sampled every %v: the **peak** from the exec until %v after every name was right, "+
		"**steady** the median of its last %v. **Listed**: what the API server sent of Services and EndpointSlices for the start "+
		"(its `apiserver_response_sizes` of lists, `apiserver_watch_events_sizes` and `_total`, "+
		"`apiserver_cache_list_returned_objects_total`, `apiserver_storage_list_returned_objects_total`): the least of the starts (the API server's own periodic lists add to some), bytes as written to the connection, "+
		"so a paged list's are gzip-compressed (client-go asks for it) and a streamed list's are not (watch events never are). "+
		"Medians, the range in brackets.\n\n![Cold start: Ready against mirrored endpoints](%s)\n\n",
		startRounds, startPoll, startPoll, startSettle, startSteady, startPlot)
	p("| lists | mirrored endpoints | block | Ready | every name right | wrong at Ready | RSS peak | steady | peak ÷ steady | listed | objects |\n")
	p("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range steps {
		lists := "streamed (1.36)"
		if s.paged {
			lists = "paged (1.33)"
		}
		endpoints := thousands(s.step.Endpoints) + s.shape("†", "‡")
		for _, r := range s.step.Starts {
			ready := field(r.Samples, func(x StartSample) float64 { return float64(x.Ready) })
			complete := field(r.Samples, func(x StartSample) float64 { return float64(x.Complete) })
			wrong := field(r.Samples, func(x StartSample) string { return fmt.Sprintf("%d (%d)", x.WrongAtReady, x.UnansweredAtReady) })
			ratio := field(r.Samples, func(x StartSample) float64 { return float64(x.PeakRSS) / float64(x.SteadyRSS) })
			p("| %s | %s | `%s` | %s (%s–%s) | %s (%s–%s) | %s of %s | %s | %s | %.2f× (max %.2f×) | %s | %s |\n",
				lists, endpoints, r.Block,
				secs(dur(Median(ready))), secs(dur(slices.Min(ready))), secs(dur(slices.Max(ready))),
				secs(dur(Median(complete))), secs(dur(slices.Min(complete))), secs(dur(slices.Max(complete))),
				strings.Join(wrong, ", "), thousands(r.Names),
				mib(Median(field(r.Samples, func(x StartSample) float64 { return float64(x.PeakRSS) }))),
				mib(Median(field(r.Samples, func(x StartSample) float64 { return float64(x.SteadyRSS) }))),
				Median(ratio), slices.Max(ratio),
				mib(slices.Min(field(r.Samples, func(x StartSample) float64 { return x.ListBytes }))),
				thousands(int(slices.Min(field(r.Samples, func(x StartSample) float64 { return x.ListObjects })))))
		}
	}
	p("\nBefore the starts of each size the harness waited for the machine to settle (less than %.1f CPUs busy over 3 s, at most %v): ", steps[0].step.StartsQuiet.Limit, startQuietMax)
	p("%s.\n", strings.Join(field(steps, func(s runStep) string {
		q := s.step.StartsQuiet
		w := fmt.Sprintf("%s, %v (%.2f CPUs busy)", s.label(), q.Waited.Round(time.Second), q.Busy)
		if !q.Quiet {
			w += ", **not quiet**: " + q.Top
		}
		return w
	}), "; "))
	p("\n† Without the endpoint mirrors' Services, which `global` never receives: the stock plugin lists fewer objects there than in Linkerd's full shape, so the ratio is the stricter for it.\n")
	p("‡ The endpoint mirrors' Services without a ClusterIP: the stock plugin lists them as in Linkerd's full shape; the API server allocates no address for them (1.36's allocator takes longer for each one it holds: 18,000 took it a quarter of an hour here).\n")
}

// startFloorPrefix begins the name of every cold start floor.
const startFloorPrefix = "cold start: "

// startFloors are issue 42's: Ready at most half the stock plugin's and
// within 2 s (18,000 endpoints) or 5 s (100,000), every global right at
// Ready, and peak RSS while starting at most 1.3× steady.
func startFloors(streamed, paged *LinkerdMemoryResult) []floor {
	var fs []floor
	if len(runSteps(streamed, paged)) == 0 {
		for _, lists := range []string{"", pagedLabel} {
			fs = append(fs, unmeasured(startFloorPrefix+"global Ready ≤ 2 s, 18,000 mirrored endpoints"+lists, 2, "s", true),
				unmeasured(startFloorPrefix+"global Ready ≤ 5 s, 100,008 mirrored endpoints (no endpoint mirror Services)"+lists, 5, "s", true))
		}
		return fs
	}
	for _, s := range runSteps(streamed, paged) {
		var g, k *StartResult
		for i := range s.step.Starts {
			switch r := &s.step.Starts[i]; r.Block {
			case "global":
				g = r
			case "kubernetes":
				k = r
			}
		}
		if g == nil || len(g.Samples) == 0 {
			continue
		}
		ready := field(g.Samples, func(x StartSample) float64 { return float64(x.Ready) })
		at := s.label()
		if k != nil && len(k.Samples) > 0 {
			kready := field(k.Samples, func(x StartSample) float64 { return float64(x.Ready) })
			ratio := Median(ready) / Median(kready)
			fs = append(fs, within(startFloorPrefix+"global Ready ≤ 0.5× the stock kubernetes plugin's, "+at,
				fmt.Sprintf("%.2f× (%s vs %s, medians)", ratio, secs(dur(Median(ready))), secs(dur(Median(kready)))), ratio, 0.5, "ratio", true))
		}
		if bound := map[int]float64{18000: 2, 100008: 5}[s.step.Endpoints]; bound > 0 {
			slowest := slices.Max(ready) / float64(time.Second)
			fs = append(fs, within(fmt.Sprintf(startFloorPrefix+"global Ready ≤ %.0f s, %s", bound, at),
				fmt.Sprintf("%.2f s, the slowest of %d", slowest, len(ready)), slowest, bound, "s", true))
		}
		wrong := field(g.Samples, func(x StartSample) float64 { return float64(x.WrongAtReady) })
		fs = append(fs, within(startFloorPrefix+"globals not right when asked at Ready: 0, "+at,
			fmt.Sprintf("%s of %s", joinFloats(wrong, "%.0f"), thousands(g.Names)), slices.Max(wrong), 0, "names", true))
		ratio := field(g.Samples, func(x StartSample) float64 { return float64(x.PeakRSS) / float64(x.SteadyRSS) })
		fs = append(fs, within(startFloorPrefix+"global's peak RSS ≤ 1.3× steady, "+at,
			fmt.Sprintf("%.2f×, the largest of %d", slices.Max(ratio), len(ratio)), slices.Max(ratio), 1.3, "ratio", true))
	}
	return fs
}

// StartPoint is one plotted cold start: the medians of one block at one size.
type StartPoint struct {
	Block     string  `json:"block"`
	Paged     bool    `json:"paged"`
	Endpoints int     `json:"endpoints"`
	ReadyS    float64 `json:"ready_s"`
	CompleteS float64 `json:"complete_s"`
}

// startPlot is the plot test/benchplot draws of starts.json, beside RESULTS.md.
const startPlot = "start-time.svg"

// WriteStartPoints writes starts.json, which test/benchplot draws.
func WriteStartPoints(path string, streamed, paged *LinkerdMemoryResult) error {
	var points []StartPoint
	for _, s := range runSteps(streamed, paged) {
		for _, r := range s.step.Starts {
			points = append(points, StartPoint{Block: r.Block, Paged: s.paged, Endpoints: s.step.Endpoints,
				ReadyS:    Median(field(r.Samples, func(x StartSample) float64 { return x.Ready.Seconds() })),
				CompleteS: Median(field(r.Samples, func(x StartSample) float64 { return x.Complete.Seconds() }))})
		}
	}
	b, err := json.MarshalIndent(struct{ Points []StartPoint }{points}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
