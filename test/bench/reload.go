package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/miekg/dns"
)

// ReloadResult is the Corefile reloads of one block at one size.
type ReloadResult struct {
	Block string // "global", "kubernetes" or "chart"
	Names int
	// Edits names what each reload changed, in order.
	Edits   []string
	Samples []ReloadSample
}

// ReloadSample is one reload by SIGUSR1 of a Corefile whose feeds are
// unchanged: for global and kubernetes alone, the block's TTL; for the
// chart's block, one of chartEdits.
type ReloadSample struct {
	// Handover: from the signal to the first answer of the reloaded
	// instance (with the new TTL, or the chart block's new marker), asked
	// every millisecond.
	Handover time.Duration
	// Complete: from the signal to the answer that made the last name right
	// (with the new TTL, where that changed), every name asked from the
	// handover on, the wrong ones again until right.
	Complete time.Duration
	// Asked and Bad: queries a client asked throughout, from the signal
	// until Complete, over UDP, and those answered wrong, SERVFAIL or not
	// at all.
	Asked, Bad int64
	// NotReady and Refused of ReadySamples: /ready (every startPoll)
	// answered but not 200, or refused (the ready plugin closes its
	// listener as a reload begins and opens the new instance's once every
	// plugin's startup has returned).
	NotReady, Refused, ReadySamples int64
	// RefusedFor is the longest run of refused samples, first to last.
	RefusedFor time.Duration
	// Lists: the full lists the plugin sent (coredns_global_lists_total);
	// the stock plugin counts none.
	Lists float64
	// What the API server sent of Services and EndpointSlices for the
	// reload, as for cold starts (apiserverLists).
	ListBytes, ListObjects float64
}

// reloadRounds: reloads of each block at each size.
const reloadRounds = 3

// chartBlock is the chart's default server block (values.yaml) as the
// bench can run it: kubeconfigs instead of the pod's account, ports of its
// own, and neither forward nor loop, whose probe and misses would leave
// the machine. The chaos plugin's version.bind is the bench's marker of
// which instance answers: gen is its generation; ttl is global's, cache
// the cache plugin's and kttl the kubernetes plugin's.
func chartBlock(gen, ttl, cache, kttl int) string {
	return fmt.Sprintf(`    errors
    health 127.0.0.1:{$HEALTH_PORT} {
        lameduck 15s
    }
%s    chaos gen-%d
    global cluster.local {
        kubeconfig {$BENCH_KUBECONFIG}
        ttl %d
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig {$BENCH_KUBECONFIG}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        startup_timeout 60s
        ttl %d
    }
    prometheus 127.0.0.1:{$METRICS_PORT}
    cache %d
    reload
    loadbalance
`, startReady, gen, ttl, kttl, cache)
}

// chartEdits are the chart block's reloads, each a change an operator
// makes: global's TTL, the cache's, the kubernetes plugin's TTL.
var chartEdits = []struct {
	what             string
	ttl, cache, kttl int
}{
	{"global's ttl 5 → 6", 6, 30, 30},
	{"cache 30 → 20", 6, 20, 30},
	{"kubernetes' ttl 30 → 31", 6, 20, 31},
}

// Reloads starts CoreDNS with global alone, with kubernetes alone and with
// the chart's block, each reloaded reloadRounds times once every name is
// right, on the world's first bases bases.
func (w World) Reloads(ctx context.Context, dir string, cluster *localkube.Cluster, bases int, quietLimit float64, env []string, logf func(string, ...any)) ([]ReloadResult, error) {
	if quietLimit > 0 {
		if _, err := WaitQuiet(ctx, quietLimit, 3*time.Second, startQuietMax); err != nil {
			return nil, err
		}
	}
	globals, mirrors := w.askedNames(bases)
	records := map[string]int{}
	for _, n := range globals {
		records[n] = w.Records()
	}
	for _, n := range mirrors {
		records[n] = Pods
	}
	out := []ReloadResult{{Block: "global", Names: len(globals)}, {Block: "kubernetes", Names: len(mirrors)},
		{Block: "chart", Names: len(globals) + len(mirrors)}}
	for i := range out {
		block := &out[i]
		var names []string
		var corefile func(r int) string // r: the reload, -1 the start
		var ttl func(r int) *uint32
		switch block.Block {
		case "global", "kubernetes":
			names = globals
			if block.Block == "kubernetes" {
				names = mirrors
			}
			corefile = func(r int) string {
				stanza := strings.Replace(benchStanza(block.Block), "ttl 5", fmt.Sprintf("ttl %d", 6+r), 1)
				return adminBlock + run.Server("DNS_PORT", startReady+stanza)
			}
			ttl = func(r int) *uint32 { return new(uint32(6 + r)) }
		case "chart":
			names = append(slices.Clone(globals), mirrors...)
			corefile = func(r int) string {
				if r < 0 {
					return adminBlock + run.Server("DNS_PORT", chartBlock(0, 5, 30, 30))
				}
				e := chartEdits[r]
				return adminBlock + run.Server("DNS_PORT", chartBlock(r+1, e.ttl, e.cache, e.kttl))
			}
			ttl = func(int) *uint32 { return nil } // the cache counts TTLs down
		}
		name := fmt.Sprintf("reload-%s-%d", block.Block, bases)
		srv, err := run.StartCoreDNS(ctx, run.CoreDNSOptions{
			Corefile: corefile(-1), Dir: dir, Name: name, Env: env,
			ExtraPorts: []string{"ADMIN_PORT", "PPROF_PORT", "HEALTH_PORT"}, WaitReady: true, StartTimeout: 3 * time.Minute,
		})
		if err != nil {
			return out, err
		}
		right := func(ttl *uint32) func(*dns.Msg) bool {
			return func(r *dns.Msg) bool {
				return len(r.Question) == 1 && hasRecords(records[r.Question[0].Name], ttl)(r)
			}
		}
		if _, _, _, err := askUntilRight(ctx, srv.Addr, names, right(nil), time.Now(), 3*time.Minute); err != nil {
			srv.Stop()
			return out, fmt.Errorf("%s: %w", name, err)
		}
		for r := range reloadRounds {
			edit, handedOver := chartEdits[r].what, markerIs(fmt.Sprintf("gen-%d", r+1))
			if block.Block != "chart" {
				edit, handedOver = fmt.Sprintf("ttl %d → %d", 5+r, 6+r), ttlIs(names[0], *ttl(r))
			}
			s, err := reloadOnce(ctx, srv, filepath.Join(dir, name+".Corefile"), corefile(r), cluster, names, right(nil), right(ttl(r)), handedOver)
			if err != nil {
				srv.Stop()
				return out, fmt.Errorf("%s, reload %d (%s): %w", name, r+1, edit, err)
			}
			logf("reload of %s at %d bases (%s): handed over after %v, every name right after %v; %d of %d queries wrong or SERVFAIL; /ready not 200 in %d and refused in %d of %d samples (for %v in a row at most); %.0f lists sent, %s and %.0f objects listed",
				block.Block, bases, edit, s.Handover.Round(time.Millisecond), s.Complete.Round(time.Millisecond), s.Bad, s.Asked, s.NotReady, s.Refused, s.ReadySamples, s.RefusedFor.Round(time.Millisecond), s.Lists, mib(s.ListBytes), s.ListObjects)
			block.Edits = append(block.Edits, edit)
			block.Samples = append(block.Samples, s)
		}
		srv.Stop()
	}
	return out, nil
}

// ttlIs is a handover probe: name answered with ttl.
func ttlIs(name string, ttl uint32) func(addr string) bool {
	return func(addr string) bool {
		r, err := dnsq.Ask("udp", addr, name, dns.TypeA, 0)
		return err == nil && len(r.Answer) > 0 && r.Answer[0].Header().Ttl == ttl
	}
}

// markerIs is a handover probe: the chaos plugin's version.bind is gen.
func markerIs(gen string) func(addr string) bool {
	return func(addr string) bool {
		m := new(dns.Msg)
		m.SetQuestion("version.bind.", dns.TypeTXT)
		m.Question[0].Qclass = dns.ClassCHAOS
		r, err := dns.Exchange(m, addr)
		if err != nil || len(r.Answer) == 0 {
			return false
		}
		txt, ok := r.Answer[0].(*dns.TXT)
		return ok && len(txt.Txt) == 1 && txt.Txt[0] == gen
	}
}

// reloadOnce writes corefile to path and signals srv to reload it:
// answered says whether an answer holds what it should at any time, right
// whether it is right after the reload, handedOver whether the reloaded
// instance answers.
func reloadOnce(ctx context.Context, srv *run.CoreDNS, path, corefile string, cluster *localkube.Cluster, names []string,
	answered, right func(*dns.Msg) bool, handedOver func(addr string) bool) (ReloadSample, error) {
	var s ReloadSample
	before, err := apiserverLists(ctx, cluster)
	if err != nil {
		return s, err
	}
	listsBefore, err := run.MetricSum(srv.MetricsURL, "coredns_global_lists_total")
	if err != nil {
		return s, err
	}
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return s, err
	}

	// Throughout: a client asking a spread of the names, and /ready.
	askCtx, stop := context.WithCancel(ctx)
	var asked, bad, samples, notReady, refused atomic.Int64
	var refusedFor time.Duration
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Go(func() {
			for i := k; askCtx.Err() == nil; i += 2 {
				r, err := dnsq.Ask("udp", srv.Addr, names[(i*97)%len(names)], dns.TypeA, 0)
				if askCtx.Err() != nil {
					return
				}
				asked.Add(1)
				if err != nil || !answered(r) {
					bad.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		client := &http.Client{Timeout: time.Second}
		var refusedSince time.Time
		for askCtx.Err() == nil {
			resp, err := client.Get("http://" + srv.PortAddr("READY_PORT") + "/ready")
			now := time.Now()
			samples.Add(1)
			if err != nil {
				refused.Add(1)
				if refusedSince.IsZero() {
					refusedSince = now
				}
				refusedFor = max(refusedFor, now.Sub(refusedSince))
			} else {
				refusedSince = time.Time{}
				if resp.StatusCode != http.StatusOK {
					notReady.Add(1)
				}
				resp.Body.Close()
			}
			_ = pause(askCtx, startPoll)
		}
	})

	began := time.Now()
	handover := make(chan time.Duration, 1)
	wg.Go(func() {
		for askCtx.Err() == nil {
			if handedOver(srv.Addr) {
				handover <- time.Since(began)
				return
			}
			_ = pause(askCtx, time.Millisecond)
		}
	})
	err = syscall.Kill(srv.PID(), syscall.SIGUSR1)
	if err == nil {
		select {
		case s.Handover = <-handover:
			s.Complete, _, _, err = askUntilRight(ctx, srv.Addr, names, right, began, 3*time.Minute)
		case <-time.After(3 * time.Minute):
			err = fmt.Errorf("the reloaded instance never answered")
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	stop()
	wg.Wait()
	if err != nil {
		return s, err
	}
	s.Asked, s.Bad, s.NotReady, s.Refused, s.ReadySamples, s.RefusedFor = asked.Load(), bad.Load(), notReady.Load(), refused.Load(), samples.Load(), refusedFor
	after, err := apiserverLists(ctx, cluster)
	if err != nil {
		return s, err
	}
	s.ListBytes, s.ListObjects = after.bytes-before.bytes, after.objects-before.objects
	listsAfter, err := run.MetricSum(srv.MetricsURL, "coredns_global_lists_total")
	s.Lists = listsAfter - listsBefore
	return s, err
}

// reloadSection is the title of the reloads' section in RESULTS.md.
const reloadSection = "## 7. Corefile reloads"

// ReportReloads writes the reloads of every size of res.
func ReportReloads(out io.Writer, res *LinkerdMemoryResult) {
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("%s\n\n", reloadSection)
	p("One `bin/coredns` with one block, in Linkerd's full shape as in section 6: `global` alone (asked for every global), the stock "+
		"`kubernetes` plugin alone (asked for every headless mirror's own name), each with the `ready` plugin and reloaded %d times by SIGUSR1 "+
		"with its TTL the only change; and **chart**, the chart's default block (`errors`, `health` with `lameduck 15s`, `ready`, `global`, "+
		"`kubernetes` with `startup_timeout 60s`, `prometheus`, `cache 30`, `reload`, `loadbalance`; not `forward` and `loop`, which would "+
		"send queries off the machine; `chaos` added as the marker of the instance answering), asked for both sets of names and reloaded "+
		"with, in turn, %s. The feeds stay as they were in every reload. "+
		"**Handover**: from the signal to the first answer of the reloaded instance (the new TTL; the chart's new marker), asked every millisecond. "+
		"**Every name right**: from the signal to the answer that made the last name right (with the new TTL, where it changed), every name asked over "+
		"UDP from the handover on, the wrong ones again until right. **Wrong or SERVFAIL**: of the queries two UDP clients asked "+
		"throughout, a spread of the names, those not answered in full. **/ready**: samples every %v not 200, refused ones counted in, "+
		"and in brackets how many were refused and for how long in a row at most (the *ready* plugin closes its listener as a reload begins "+
		"and opens the new instance's once every plugin's startup has returned: the `kubernetes` plugin's waits for its lists, up to "+
		"`startup_timeout`; the chart's readiness probe fails a pod after 3 failures 2 s apart). "+
		"**Lists**: the full lists `global` sent (`coredns_global_lists_total`; the stock plugin has no such count). "+
		"**Listed**: what the API server sent of Services and EndpointSlices meanwhile, as for cold starts (its own periodic "+
		"lists add to some). Medians, the range in brackets; counts of each reload.\n\n", reloadRounds, chartEditList(), startPoll)
	p("| lists | mirrored endpoints | block | handover | every name right | wrong or SERVFAIL | /ready not 200 (refused, longest) | lists | listed | objects |\n")
	p("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	lists := "streamed (1.36)"
	if res.Paged {
		lists = "paged (1.33)"
	}
	for _, step := range reloadSteps(res) {
		for _, b := range step.Reloads {
			complete := field(b.Samples, func(x ReloadSample) float64 { return float64(x.Complete) })
			handover := field(b.Samples, func(x ReloadSample) float64 { return float64(x.Handover) })
			bad := field(b.Samples, func(x ReloadSample) string { return fmt.Sprintf("%d of %d", x.Bad, x.Asked) })
			notReady := field(b.Samples, func(x ReloadSample) string {
				return fmt.Sprintf("%d (%d, %s) of %d", x.NotReady+x.Refused, x.Refused, millis(x.RefusedFor), x.ReadySamples)
			})
			sent := "—"
			if b.Block != "kubernetes" {
				sent = joinFloats(field(b.Samples, func(x ReloadSample) float64 { return x.Lists }), "%.0f")
			}
			p("| %s | %s | `%s` | %s (%s–%s) | %s (%s–%s) | %s | %s | %s | %s | %.0f |\n", lists, thousands(step.Endpoints), b.Block,
				millis(dur(Median(handover))), millis(dur(slices.Min(handover))), millis(dur(slices.Max(handover))),
				secs(dur(Median(complete))), secs(dur(slices.Min(complete))), secs(dur(slices.Max(complete))),
				strings.Join(bad, ", "), strings.Join(notReady, ", "), sent,
				mib(Median(field(b.Samples, func(x ReloadSample) float64 { return x.ListBytes }))),
				Median(field(b.Samples, func(x ReloadSample) float64 { return x.ListObjects })))
		}
	}
	p("\n")
}

func chartEditList() string {
	var e []string
	for _, x := range chartEdits {
		e = append(e, x.what)
	}
	return strings.Join(e, "; ")
}

func reloadSteps(res *LinkerdMemoryResult) []LinkerdMemoryStep {
	steps := slices.Clone(res.Steps)
	if res.Large != nil {
		steps = append(steps, *res.Large)
	}
	return steps
}

// reloadFloors: global loses no answer, stays ready and lists nothing on a
// reload that leaves its feeds as they were, at every size, alone and in
// the chart's block beside kubernetes; the stock plugin's figures stand
// beside them in the table.
func reloadFloors(res *LinkerdMemoryResult) []floor {
	var fs []floor
	for _, step := range reloadSteps(res) {
		for _, b := range step.Reloads {
			if b.Block == "kubernetes" || len(b.Samples) == 0 {
				continue
			}
			at := thousands(step.Endpoints) + " mirrored endpoints"
			of := "a reload of an unchanged stanza"
			if b.Block == "chart" {
				of = "a reload of the chart's block"
			}
			bad := field(b.Samples, func(x ReloadSample) float64 { return float64(x.Bad) })
			notReady := field(b.Samples, func(x ReloadSample) float64 { return float64(x.NotReady) })
			refusedFor := field(b.Samples, func(x ReloadSample) float64 { return float64(x.RefusedFor) / float64(time.Millisecond) })
			sent := field(b.Samples, func(x ReloadSample) float64 { return x.Lists })
			handover := field(b.Samples, func(x ReloadSample) float64 { return float64(x.Handover) / float64(time.Millisecond) })
			if b.Block == "global" {
				fs = append(fs, within(reloadFloorPrefix+"handover of an unchanged stanza ≤ 100 ms, "+at,
					fmt.Sprintf("%.0f ms, the slowest of %d", slices.Max(handover), len(handover)), slices.Max(handover), 100, "ms", true))
			}
			fs = append(fs,
				within(reloadFloorPrefix+"queries wrong or SERVFAIL during "+of+": 0, "+at,
					joinFloats(bad, "%.0f"), slices.Max(bad), 0, "queries", true),
				within(reloadFloorPrefix+"/ready samples answered but not 200 during "+of+": 0, "+at,
					joinFloats(notReady, "%.0f"), slices.Max(notReady), 0, "samples", true),
				// Two probes in a row, 2 s apart, cannot both be refused.
				within(reloadFloorPrefix+"/ready refused for < 2 s in a row (the chart's probe period) during "+of+", "+at,
					joinFloats(refusedFor, "%.0f ms"), slices.Max(refusedFor), 1999, "ms", true),
				within(reloadFloorPrefix+"lists sent for "+of+": 0, "+at,
					joinFloats(sent, "%.0f"), slices.Max(sent), 0, "lists", true))
		}
	}
	return fs
}

const reloadFloorPrefix = "reload of global: "

// MergeReloads puts reloads measured on their own (bench -reload -merge)
// into the last full run's results.
func MergeReloads(mdPath, jsonPath string, res *LinkerdMemoryResult, started time.Time, command string) error {
	return mergeSection(mdPath, jsonPath, reloadSection, "## Phases", func(b io.Writer) { ReportReloads(b, res) },
		reloadFloors(res), reloadFloorPrefix, started, command)
}
