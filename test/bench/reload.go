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
	Block   string // "global" or "kubernetes"
	Names   int
	Samples []ReloadSample
}

// ReloadSample is one reload by SIGUSR1 of a Corefile whose only change is
// the block's TTL, so its feeds are unchanged.
type ReloadSample struct {
	// Handover: from the signal to the first answer with the new TTL (the
	// reloaded instance answering), the last base's name asked every
	// millisecond.
	Handover time.Duration
	// Complete: from the signal to the answer that made the last name right
	// with the new TTL, every name asked from the signal on, the wrong ones
	// again until right.
	Complete time.Duration
	// Asked and Bad: queries a client asked throughout, from the signal
	// until Complete, over UDP, and those answered wrong, SERVFAIL or not
	// at all.
	Asked, Bad int64
	// NotReady and Refused of ReadySamples: /ready (every startPoll)
	// answered but not 200, or refused (the ready plugin closes its
	// listener as a reload begins and opens the new instance's moments later).
	NotReady, Refused, ReadySamples int64
	// Lists: the full lists the plugin sent (coredns_global_lists_total);
	// the stock plugin counts none.
	Lists float64
	// What the API server sent of Services and EndpointSlices for the
	// reload, as for cold starts (apiserverLists).
	ListBytes, ListObjects float64
}

// reloadRounds: reloads of each block at each size.
const reloadRounds = 3

// Reloads starts CoreDNS with global alone and with kubernetes alone, each
// reloaded reloadRounds times once every name is right, on the world's
// first bases bases.
func (w World) Reloads(ctx context.Context, dir string, cluster *localkube.Cluster, bases int, quietLimit float64, env []string, logf func(string, ...any)) ([]ReloadResult, error) {
	if quietLimit > 0 {
		if _, err := WaitQuiet(ctx, quietLimit, 3*time.Second, startQuietMax); err != nil {
			return nil, err
		}
	}
	globals, mirrors := w.askedNames(bases)
	out := []ReloadResult{{Block: "global", Names: len(globals)}, {Block: "kubernetes", Names: len(mirrors)}}
	for i := range out {
		block := &out[i]
		names, records := globals, w.Records()
		if block.Block == "kubernetes" {
			names, records = mirrors, Pods
		}
		name := fmt.Sprintf("reload-%s-%d", block.Block, bases)
		corefile := func(ttl int) string {
			stanza := strings.Replace(benchStanza(block.Block), "ttl 5", fmt.Sprintf("ttl %d", ttl), 1)
			return adminBlock + run.Server("DNS_PORT", startReady+stanza)
		}
		srv, err := run.StartCoreDNS(ctx, run.CoreDNSOptions{
			Corefile: corefile(5), Dir: dir, Name: name, Env: env,
			ExtraPorts: []string{"ADMIN_PORT", "PPROF_PORT"}, WaitReady: true, StartTimeout: 3 * time.Minute,
		})
		if err != nil {
			return out, err
		}
		if _, _, _, err := askUntilRight(ctx, srv.Addr, names, hasRecords(records, nil), time.Now(), 3*time.Minute); err != nil {
			srv.Stop()
			return out, fmt.Errorf("%s: %w", name, err)
		}
		for r := range reloadRounds {
			ttl := 6 + r
			s, err := reloadOnce(ctx, srv, filepath.Join(dir, name+".Corefile"), corefile(ttl), cluster, names, records, uint32(ttl))
			if err != nil {
				srv.Stop()
				return out, fmt.Errorf("%s, reload %d: %w", name, r+1, err)
			}
			logf("reload of %s at %d bases: handed over after %v, every name right with the new TTL after %v; %d of %d queries wrong or SERVFAIL; /ready not 200 in %d and refused in %d of %d samples; %.0f lists sent, %s and %.0f objects listed",
				block.Block, bases, s.Handover.Round(time.Millisecond), s.Complete.Round(time.Millisecond), s.Bad, s.Asked, s.NotReady, s.Refused, s.ReadySamples, s.Lists, mib(s.ListBytes), s.ListObjects)
			block.Samples = append(block.Samples, s)
		}
		srv.Stop()
	}
	return out, nil
}

// reloadOnce writes corefile to path and signals srv to reload it.
func reloadOnce(ctx context.Context, srv *run.CoreDNS, path, corefile string, cluster *localkube.Cluster, names []string, records int, ttl uint32) (ReloadSample, error) {
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
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Go(func() {
			for i := k; askCtx.Err() == nil; i += 2 {
				r, err := dnsq.Ask("udp", srv.Addr, names[(i*97)%len(names)], dns.TypeA, 0)
				if askCtx.Err() != nil {
					return
				}
				asked.Add(1)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != records {
					bad.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		client := &http.Client{Timeout: time.Second}
		for askCtx.Err() == nil {
			resp, err := client.Get("http://" + srv.PortAddr("READY_PORT") + "/ready")
			samples.Add(1)
			if err != nil {
				refused.Add(1)
			} else {
				if resp.StatusCode != http.StatusOK {
					notReady.Add(1)
				}
				resp.Body.Close()
			}
			_ = pause(askCtx, startPoll)
		}
	})

	began := time.Now()
	handedOver := make(chan time.Duration, 1)
	wg.Go(func() {
		for askCtx.Err() == nil {
			r, err := dnsq.Ask("udp", srv.Addr, names[0], dns.TypeA, 0)
			if err == nil && len(r.Answer) > 0 && r.Answer[0].Header().Ttl == ttl {
				handedOver <- time.Since(began)
				return
			}
			_ = pause(askCtx, time.Millisecond)
		}
	})
	err = syscall.Kill(srv.PID(), syscall.SIGUSR1)
	if err == nil {
		s.Complete, _, _, err = askUntilRight(ctx, srv.Addr, names, hasRecords(records, &ttl), began, 3*time.Minute)
	}
	stop()
	wg.Wait()
	if err != nil {
		return s, err
	}
	select {
	case s.Handover = <-handedOver:
	default:
		return s, fmt.Errorf("%s never answered with TTL %d", names[0], ttl)
	}
	s.Asked, s.Bad, s.NotReady, s.Refused, s.ReadySamples = asked.Load(), bad.Load(), notReady.Load(), refused.Load(), samples.Load()
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
	p("One `bin/coredns` with one block, `global` alone (asked for every global) or the stock `kubernetes` plugin alone "+
		"(asked for every headless mirror's own name), and the `ready` plugin, in Linkerd's full shape as in section 6; once every "+
		"name is right, %d reloads by SIGUSR1 of a Corefile whose only change is the block's TTL, so that its feeds are unchanged. "+
		"**Handover**: from the signal to the first answer with the new TTL, the last base's name asked every millisecond. **Every name right**: from the signal to the answer that made the last name right with the new TTL (every name asked over "+
		"UDP from the signal on, the wrong ones again until right). **Wrong or SERVFAIL**: of the queries two UDP clients asked "+
		"throughout, a spread of the names, those not answered right. **/ready**: samples every %v answered but not 200, and in brackets those refused (the *ready* plugin closes its listener as a reload begins and opens the new instance's moments later, whatever the plugins). "+
		"**Lists**: the full lists the plugin sent (`coredns_global_lists_total`; the stock plugin has no such count). "+
		"**Listed**: what the API server sent of Services and EndpointSlices meanwhile, as for cold starts (its own periodic "+
		"lists add to some). Medians, the range in brackets; counts of each reload.\n\n", reloadRounds, startPoll)
	p("| lists | mirrored endpoints | block | handover | every name right | wrong or SERVFAIL | /ready not 200 (refused) | lists | listed | objects |\n")
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
				return fmt.Sprintf("%d (%d) of %d", x.NotReady, x.Refused, x.ReadySamples)
			})
			sent := "—"
			if b.Block == "global" {
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

func reloadSteps(res *LinkerdMemoryResult) []LinkerdMemoryStep {
	steps := slices.Clone(res.Steps)
	if res.Large != nil {
		steps = append(steps, *res.Large)
	}
	return steps
}

// reloadFloors: global loses no answer, stays ready and lists nothing on a
// reload that leaves its feeds as they were, at every size; the stock
// plugin's figures stand beside them in the table.
func reloadFloors(res *LinkerdMemoryResult) []floor {
	var fs []floor
	for _, step := range reloadSteps(res) {
		for _, b := range step.Reloads {
			if b.Block != "global" || len(b.Samples) == 0 {
				continue
			}
			at := thousands(step.Endpoints) + " mirrored endpoints"
			bad := field(b.Samples, func(x ReloadSample) float64 { return float64(x.Bad) })
			notReady := field(b.Samples, func(x ReloadSample) float64 { return float64(x.NotReady) })
			sent := field(b.Samples, func(x ReloadSample) float64 { return x.Lists })
			handover := field(b.Samples, func(x ReloadSample) float64 { return float64(x.Handover) / float64(time.Millisecond) })
			fs = append(fs,
				within(reloadFloorPrefix+"handover of an unchanged stanza ≤ 100 ms, "+at,
					fmt.Sprintf("%.0f ms, the slowest of %d", slices.Max(handover), len(handover)), slices.Max(handover), 100, "ms", true),
				within(reloadFloorPrefix+"queries wrong or SERVFAIL during a reload of an unchanged stanza: 0, "+at,
					joinFloats(bad, "%.0f"), slices.Max(bad), 0, "queries", true),
				within(reloadFloorPrefix+"/ready samples answered but not 200 during a reload of an unchanged stanza: 0, "+at,
					joinFloats(notReady, "%.0f"), slices.Max(notReady), 0, "samples", true),
				within(reloadFloorPrefix+"lists sent for a reload of an unchanged stanza: 0, "+at,
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
