package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/miekg/dns"
)

// RelistResult is one CoreDNS's memory through one fault of its API server.
type RelistResult struct {
	Block, Fault string
	// Live heap as of the last collection: go_memstats_next_gc_bytes ÷ 2
	// (the heap goal at GOGC=100, CoreDNS's default), sampled at 5 Hz.
	SteadyLive, PeakLive float64
	SteadyRSS, PeakRSS   int64
	// Collections from the fault to the end of sampling.
	Collections int
	// Full lists the global plugin's feeds ended from the fault to the end
	// of sampling (each feed lists once per relist), and the objects they
	// sent that its index held as sent, so decoded no further
	// (coredns_global_lists_total, coredns_global_held_objects_total); 0
	// for the kubernetes plugin, which counts neither.
	Lists, Held int
	// Paged are the lists among Lists read in pages.
	Paged int
	// Queries asked for the last global during the fault, and those not
	// answered with all its records.
	Queries, Wrong int
}

// relistSample is how often memory is sampled.
const relistSample = 200 * time.Millisecond

// Relist measures, for CoreDNS with global alone and with kubernetes alone,
// live heap and RSS through two faults of the API server: a restart, and a
// restart after etcd compacted past every watch's version (each watch gets
// 410 Gone and lists again). The steady values are the medians over the 10 s
// before the fault, which starts with a forced collection; the peaks the
// largest from the fault until after 30 s after the API server is back. A client asks for the last global all the
// while: every query must be answered in full.
func (w World) Relist(ctx context.Context, dir string, cluster *localkube.Cluster, bases int, env []string, logf func(string, ...any)) ([]RelistResult, error) {
	var out []RelistResult
	query := w.FQDN(Global(bases - 1))
	// Each block alone in its CoreDNS: what a relist costs one plugin, not the other's.
	for _, block := range []struct{ name, corefile string }{{"global", globalCorefile}, {"kubernetes", kubernetesCorefile}} {
		for _, fault := range []string{"restart", "compaction"} {
			srv, err := StartCoreDNS(ctx, dir, "relist-"+block.name+"-"+fault, block.corefile, "", []string{"DNS_PORT"}, env, probe{"DNS_PORT", query, Records})
			if err != nil {
				return out, err
			}
			res, err := w.relistOnce(ctx, srv, cluster, query, fault, filepath.Join(dir, "relist-"+block.name+"-"+fault+"-after.heap"))
			srv.Stop()
			if err != nil {
				return out, fmt.Errorf("%s, %s: %w", block.name, fault, err)
			}
			res.Block = block.name
			logf("relist, %s after a %s: live heap %s → peak %s (%.2f×), RSS %s → %s (%.2f×), %d of %d queries wrong",
				block.name, fault, mib(res.SteadyLive), mib(res.PeakLive), res.PeakLive/res.SteadyLive,
				mib(float64(res.SteadyRSS)), mib(float64(res.PeakRSS)), float64(res.PeakRSS)/float64(res.SteadyRSS), res.Wrong, res.Queries)
			out = append(out, *res)
		}
	}
	return out, nil
}

type memSample struct {
	live float64
	rss  int64
	gcs  float64 // collections so far
	// global's lists (of them paged) and held objects so far
	lists, paged, held float64
}

// relistOnce measures one fault; profile gets the heap profile once the
// sampling is over. Nothing is asked of the process while it is sampled but
// its metrics: a heap profile taken at each new peak cost it a megabyte or
// more of heap (the profile's own records and text), enough to make the
// next peak.
func (w World) relistOnce(ctx context.Context, srv *CoreDNS, cluster *localkube.Cluster, query, fault, profile string) (*RelistResult, error) {
	// Let the list's garbage go before the steady window, and collect it:
	// until the next collection, the heap goal still counts it.
	if err := pause(ctx, 10*time.Second); err != nil {
		return nil, err
	}
	// What it allocated until now, so that what the fault made it allocate
	// can be read later (go tool pprof -base).
	if err := allocsProfile(ctx, srv, strings.TrimSuffix(profile, "-after.heap")+"-before.allocs"); err != nil {
		return nil, err
	}
	sample := func() (memSample, error) {
		s, err := run.Scrape(srv.MetricsURL)
		if err != nil {
			return memSample{}, err
		}
		rss, err := vmRSS(srv.PID())
		return memSample{live: s.Sum("go_memstats_next_gc_bytes") / 2, rss: rss, gcs: s.Sum("go_gc_duration_seconds_count"),
			lists: s.Sum("coredns_global_lists_total"), paged: s.Sum("coredns_global_lists_total", `path="paged"`),
			held: s.Sum("coredns_global_held_objects_total")}, err
	}
	stopSteady := sampleEvery(ctx, relistSample, sample)
	err := pause(ctx, 10*time.Second)
	steady, sampleErr := stopSteady()
	if err := cmp.Or(err, sampleErr); err != nil {
		return nil, err
	}

	res := &RelistResult{Fault: fault}
	qctx, stopQueries := context.WithCancel(ctx)
	var qwg sync.WaitGroup
	qwg.Go(func() {
		for qctx.Err() == nil {
			r, err := dnsq.Ask("udp", srv.PortAddr("DNS_PORT"), query, dns.TypeA, 0)
			res.Queries++
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != Records {
				res.Wrong++
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	// Sample from the fault on until 30 s after the API server is back.
	stopDuring := sampleEvery(ctx, relistSample, sample)
	faultErr := w.apiFault(ctx, cluster, fault)
	if faultErr == nil {
		faultErr = pause(ctx, 30*time.Second)
	}
	during, sampleErr := stopDuring()
	stopQueries()
	qwg.Wait()
	if faultErr != nil {
		return nil, faultErr
	}
	_ = fetch(ctx, srv.PprofURL+"/heap", profile) // what it holds after, for reading later
	_ = allocsProfile(ctx, srv, strings.TrimSuffix(profile, "-after.heap")+"-after.allocs")
	if sampleErr != nil {
		return nil, sampleErr
	}
	res.SteadyLive = Median(field(steady, func(m memSample) float64 { return m.live }))
	res.SteadyRSS = int64(Median(field(steady, func(m memSample) float64 { return float64(m.rss) })))
	for _, m := range during {
		res.PeakLive = max(res.PeakLive, m.live)
		res.PeakRSS = max(res.PeakRSS, m.rss)
	}
	if len(during) > 0 {
		last, before := during[len(during)-1], steady[len(steady)-1]
		res.Collections = int(last.gcs - before.gcs)
		res.Lists, res.Held = int(last.lists-before.lists), int(last.held-before.held)
		res.Paged = int(last.paged - before.paged)
	}
	return res, nil
}

// allocsProfile saves srv's allocation profile to path after two
// collections: the runtime publishes a profile up to two collections old,
// so with fewer the first build's last allocations counted as the fault's.
// The collections also start the steady window clean.
func allocsProfile(ctx context.Context, srv *CoreDNS, path string) error {
	if err := fetch(ctx, srv.PprofURL+"/heap?gc=1", os.DevNull); err != nil {
		return err
	}
	return fetch(ctx, srv.PprofURL+"/allocs?gc=1", path)
}

// apiFault restarts the API server; for "compaction", after etcd compacted
// away every version a watch could resume from.
func (w World) apiFault(ctx context.Context, c *localkube.Cluster, fault string) error {
	if fault == "compaction" {
		if _, err := c.CompactEtcd(ctx); err != nil {
			return err
		}
	}
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	time.Sleep(time.Second)
	return c.StartAPIServer(ctx)
}

// ReportRelist writes the relist results.
func ReportRelist(out io.Writer, rs []RelistResult) {
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("\nThrough API server faults, each block alone in its CoreDNS (live heap as of the last collection, go_memstats_next_gc_bytes ÷ 2, " +
		"and VmRSS, sampled at 5 Hz; steady: medians over the 10 s before the fault, which start with a collection forced through pprof; peak: the largest from the fault to 30 s after the API server is back; " +
		"a client asked for the last global every 20 ms throughout; nothing else is asked of the process while it is sampled; " +
		"collections: how many ran from the fault to the end, each counting as live what was allocated while it marked; " +
		"lists: full lists `global`'s feeds ended from the fault on (coredns_global_lists_total; each of its feeds lists once per relist); held: the objects they sent at the version its index held, which it did not decode (coredns_global_held_objects_total); " +
		"allocation profiles are saved before and after, and a heap profile after, relist-<block>-<fault>-{before,after}.allocs and -after.heap in the work directory):\n\n")
	p("| block | fault | live heap steady | peak | peak ÷ steady | RSS steady | peak | peak ÷ steady | collections | lists | held | queries | not answered in full |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		lists, held := "—", "—"
		if r.Block == "global" {
			lists, held = fmt.Sprint(r.Lists), fmt.Sprint(r.Held)
			if r.Paged > 0 {
				lists += fmt.Sprintf(" (%d paged)", r.Paged)
			}
		}
		p("| `%s` | %s | %s | %s | %.2f× | %s | %s | %.2f× | %d | %s | %s | %d | %d |\n", r.Block, faultName(r.Fault),
			mib(r.SteadyLive), mib(r.PeakLive), r.PeakLive/r.SteadyLive,
			mib(float64(r.SteadyRSS)), mib(float64(r.PeakRSS)), float64(r.PeakRSS)/float64(r.SteadyRSS), r.Collections, lists, held, r.Queries, r.Wrong)
	}
}

func faultName(f string) string {
	if f == "compaction" {
		return "restart after etcd compacted (every watch 410)"
	}
	return "restart"
}
