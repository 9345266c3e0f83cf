package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// StormResult is how fast CoreDNS with global follows one cluster's whole
// gateway going down, or coming back: every endpoint mirror of the cluster
// not ready (or ready) at once, as Linkerd's service mirror writes them.
type StormResult struct {
	What    string
	Globals int
	Writes  int
	Writers int
	// Writing is from the first write sent to the last answered.
	Writing time.Duration
	// After is, per global, from the last write answered to its first right
	// answer; zero where it was right before.
	After []time.Duration
}

// stormSweepers ask for every global in turn, in parallel.
const stormSweepers = 8

// Storm flips the gateway of the last cluster down, then up, in a world of
// bases loaded in Linkerd's full shape, against CoreDNS with global alone,
// and measures when each global's answer follows.
func (w World) Storm(ctx context.Context, dir string, client kubernetes.Interface, bases, workers int, env []string, logf func(string, ...any)) ([]StormResult, error) {
	srv, err := StartCoreDNS(ctx, dir, "storm", relistGlobalCorefile, "", []string{"DNS_PORT"}, env)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	addr := srv.PortAddr("DNS_PORT")
	if err := scenario.AwaitRecords(ctx, addr, w.FQDN(Global(bases-1)), Records, 3*time.Minute); err != nil {
		return nil, err
	}
	c := len(Clusters) - 1
	var out []StormResult
	for _, up := range []bool{false, true} {
		what, want := fmt.Sprintf("gateway of %s down", Clusters[c]), Records-Pods
		if up {
			what, want = fmt.Sprintf("gateway of %s back", Clusters[c]), Records
		}
		res, err := w.stormOnce(ctx, addr, client, bases, c, up, want, workers)
		if err != nil {
			return out, fmt.Errorf("%s: %w", what, err)
		}
		res.What = what
		logf("storm, %s: %d writes in %v; every global right %v after the last (p50 %v)", what, res.Writes,
			res.Writing.Round(time.Millisecond), DurationQuantile(res.After, 1).Round(time.Millisecond), DurationQuantile(res.After, .5).Round(time.Millisecond))
		out = append(out, *res)
	}
	return out, nil
}

func (w World) stormOnce(ctx context.Context, addr string, client kubernetes.Interface, bases, c int, ready bool, want, workers int) (*StormResult, error) {
	res := &StormResult{Globals: bases, Writers: workers, After: make([]time.Duration, bases)}
	right := make([]time.Time, bases)
	sweepCtx, stopSweeping := context.WithTimeout(ctx, 2*time.Minute)
	defer stopSweeping()
	var sweepers sync.WaitGroup
	for s := range stormSweepers {
		sweepers.Go(func() {
			pending := []int{}
			for i := s; i < bases; i += stormSweepers {
				pending = append(pending, i)
			}
			for len(pending) > 0 && sweepCtx.Err() == nil {
				rest := pending[:0]
				for _, i := range pending {
					r, err := dnsq.Ask("udp", addr, w.FQDN(Global(i)), dns.TypeA, 0)
					if err == nil && len(r.Answer) == want {
						right[i] = time.Now()
						continue
					}
					rest = append(rest, i)
				}
				pending = rest
			}
		})
	}

	start := time.Now()
	var mu sync.Mutex
	var last time.Time
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range bases {
		for p := range Pods {
			g.Go(func() error {
				s := w.EndpointMirrorSlice(i, c, p)
				s.Endpoints[0].Conditions.Ready = new(ready)
				// Unconditional: EndpointSlices take an update without a version.
				if _, err := client.DiscoveryV1().EndpointSlices(w.Namespace).Update(gctx, s, metav1.UpdateOptions{}); err != nil {
					return err
				}
				mu.Lock()
				last = time.Now()
				mu.Unlock()
				return nil
			})
		}
	}
	err := g.Wait()
	res.Writes, res.Writing = bases*Pods, last.Sub(start)
	if err != nil {
		return nil, err
	}
	sweepers.Wait()
	for i, t := range right {
		if t.IsZero() {
			return nil, fmt.Errorf("%s never answered %d records", Global(i), want)
		}
		res.After[i] = max(0, t.Sub(last))
	}
	return res, nil
}

// ReportStorm writes the storm results.
func ReportStorm(out io.Writer, rs []StormResult) {
	if len(rs) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("\nStorms: every endpoint mirror of one cluster not ready at once (its gateway down), then ready again, written by %d "+
		"concurrent clients as fast as the API server takes them; CoreDNS with `global` alone; %d clients ask for every global "+
		"in turn until each answers with the cluster's pods gone (or back), so a global's time is late by up to one sweep of its client. "+
		"Time from the last write answered to each global's first right answer:\n\n", rs[0].Writers, stormSweepers)
	p("| storm | globals | writes | writing took | p50 | p99 | p100 |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		p("| %s | %s | %s | %v | %s | %s | %s |\n", r.What, thousands(r.Globals), thousands(r.Writes), r.Writing.Round(time.Millisecond),
			millis(DurationQuantile(r.After, .5)), millis(DurationQuantile(r.After, .99)), millis(DurationQuantile(r.After, 1)))
	}
}
