package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/bench"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
)

// TestReloadLosesNothing: a CoreDNS answering thousands of globals through
// an API server whose lists are held past the plugin's startup wait is
// reloaded, by the reload plugin and by SIGUSR1. Throughout, a client asks
// a spread of the globals over UDP and TCP and /ready is sampled:
//   - a reload that leaves the stanza's feeds as they were keeps the index:
//     no list reaches the API server, the new instance answers (its TTL says
//     so), and no query gets SERVFAIL or a wrong answer;
//   - a reload that changes them (another namespace) builds a new index
//     while the old instance answers, and hands over once it is complete:
//     no SERVFAIL, no wrong answer, /ready 200 while the lists are held,
//     and afterwards one index's worth of globals, not two;
//   - past handover_timeout the new instance takes over incomplete, with a
//     warning, and completes when the lists come.
func TestReloadLosesNothing(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := scenario.New(t, env.Cluster("source"))
	source, ctx := s.Source, t.Context()

	const n = 2000
	w := eastWorld(t, s, n, true)
	answer := func(i int) string { return globalAnswer(w, i) }

	proxy := startAPIProxy(t, source, false)
	corefile := func(ttl int, options string) string {
		return run.Corefile(fmt.Sprintf(`
    reload 2s 1s
    global cluster.local {
        kubeconfig {$PROXY_KUBECONFIG}
        namespaces {$NS}%s
        ttl %d
    }
`, options, ttl))
	}
	c, err := s.RunCoreDNS(ctx, run.CoreDNSOptions{Corefile: corefile(5, ""), Env: []string{"PROXY_KUBECONFIG=" + proxy.kubeconfig}, WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(c.LogPath), "Corefile")

	// The client: one asker over UDP and one over TCP, each a spread of the
	// globals, the last one included, one query at a time without pause.
	// An answer is wrong or SERVFAIL (bad), or a TCP connection the old
	// instance had accepted is closed without an answer as it stops, reset
	// or shut (CoreDNS's server shutdown, whatever the plugins: Go asks
	// again, glibc only after a reset), at most once a reload with one
	// query in flight.
	var asked, bad, resets atomic.Int64
	var firstBad sync.Once
	var badWhat string
	askCtx, stopAsking := context.WithCancel(ctx)
	var asking sync.WaitGroup
	for _, network := range []string{"udp", "tcp"} {
		asking.Go(func() {
			for k := 0; askCtx.Err() == nil; k++ {
				i := (k * 67) % n
				if k%31 == 0 {
					i = n - 1
				}
				r, err := dnsq.Ask(network, c.Addr, s.FQDN(bench.Global(i)), dns.TypeA, 0)
				if askCtx.Err() != nil {
					return
				}
				asked.Add(1)
				// Closed without an answer: reset, or shut (EOF) where
				// the query had been read.
				if network == "tcp" && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)) {
					resets.Add(1)
					continue
				}
				if got, want := dnsq.Summary(r, err), answer(i); got != want {
					bad.Add(1)
					firstBad.Do(func() {
						badWhat = fmt.Sprintf("%s over %s at %s: %q, want %q", bench.Global(i), network, time.Now().Format(time.StampMilli), got, want)
					})
				}
			}
		})
	}
	// /ready, every 10 ms: never anything but 200, and refused (the ready
	// plugin closes its listener as a reload begins and opens the new
	// instance's moments later) for at most refusedFor in a row: less than
	// the chart's probe period (2 s), so at most one probe fails of the
	// three in a row that take a pod out of its Service.
	const refusedFor = time.Second
	var samples, refused, notReady atomic.Int64
	var longestRefused time.Duration
	var sampling sync.WaitGroup
	sampling.Go(func() {
		client := &http.Client{Timeout: time.Second}
		var since time.Time
		for askCtx.Err() == nil {
			at := time.Now()
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", c.Ports["READY_PORT"]))
			samples.Add(1)
			switch {
			case err != nil:
				refused.Add(1)
				if since.IsZero() {
					since = at
				}
			case resp.StatusCode != http.StatusOK:
				notReady.Add(1)
			}
			if err == nil {
				resp.Body.Close()
				if !since.IsZero() {
					longestRefused = max(longestRefused, time.Since(since))
					since = time.Time{}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	reloads := 0
	reload := func(what string, corefile string, signal bool) {
		t.Helper()
		if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
			t.Fatal(err)
		}
		if signal {
			if err := syscall.Kill(c.PID(), syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
		}
		reloads++
	}
	reloaded := func(what string) {
		t.Helper()
		s.Eventually(what+": reloaded", func(context.Context) string {
			if got := strings.Count(c.Log(1<<22), "Reloading complete"); got < reloads {
				return fmt.Sprintf("%d reloads complete, want %d", got, reloads)
			}
			return ""
		})
	}
	answersWithTTL := func(what string, ttl uint32) {
		t.Helper()
		for _, network := range []string{"udp", "tcp"} {
			r, err := dnsq.Ask(network, c.Addr, s.FQDN(bench.Global(n-1)), dns.TypeA, 0)
			if got := dnsq.Summary(r, err); got != answer(n-1) || r.Answer[0].Header().Ttl != ttl {
				t.Fatalf("%s: over %s %q (TTL %v), want %q with TTL %d", what, network, got, r, answer(n-1), ttl)
			}
		}
	}
	logged := func(what, line string) {
		t.Helper()
		if !strings.Contains(c.Log(1<<22), line) {
			t.Errorf("%s: CoreDNS did not log %q", what, line)
		}
	}

	const changed = " kube-public"
	// unchanged reloads CoreDNS with the stanza's feeds unchanged, every list
	// held: none may be sent.
	unchanged := func(what string, ttl int, options string, signal bool) {
		t.Helper()
		proxy.hold()
		lists := proxy.lists.Load()
		reload(what, corefile(ttl, options), signal)
		reloaded(what)
		answersWithTTL(what, uint32(ttl))
		if got := proxy.lists.Load(); got != lists {
			t.Errorf("%s: %d lists sent to the API server, want none", what, got-lists)
		}
		logged(what, "Reload: reused the running index of 2000 global services")
		proxy.release()
	}
	// The reload plugin first: a reload by SIGUSR1 drops every caddy event
	// hook, and the reload plugin registers its own only once per process.
	unchanged("unchanged, by the reload plugin", 6, "", false)

	// Changed feeds: the old instance answers while the new lists are held.
	proxy.hold()
	lists := proxy.lists.Load()
	reload("changed", corefile(7, changed), false)
	s.Quiet("changed: while the new index's lists are held", 8*time.Second, func(context.Context) string {
		if got := strings.Count(c.Log(1<<22), "Reloading complete"); got >= reloads {
			return "handed over to an index whose lists are held"
		}
		return ""
	})
	if proxy.lists.Load() == lists {
		t.Fatal("changed: no list sent for the new feeds")
	}
	answersWithTTL("changed, lists held: the old instance", 6)
	if notReady.Load() > 0 {
		t.Errorf("/ready: %d of %d samples so far not 200", notReady.Load(), samples.Load())
	}
	proxy.release()
	reloaded("changed")
	answersWithTTL("changed", 7)
	logged("changed", "Reload: the stanza's feeds changed; built a new index of 2000 global services")
	if got, err := run.MetricSum(c.MetricsURL, "coredns_global_globals"); err != nil || got != n {
		t.Errorf("changed: answering for %v globals (%v), want %d: the old index not stopped", got, err, n)
	}

	unchanged("unchanged, by SIGUSR1", 8, changed, true)
	// The kubelet replaces a pod's projected token about every 48 minutes;
	// client-go reads the file again. A token of the same account, rotated,
	// keeps the index.
	proxy.rotateToken(t, 2)
	unchanged("the token file rotated (the same account), by SIGUSR1", 9, changed, true)

	stopAsking()
	asking.Wait()
	sampling.Wait()
	t.Logf("%d queries during %d reloads: %d answered wrong or SERVFAIL, %d TCP connections closed without an answer; /ready: %d samples, %d refused (for %v at most), %d not 200",
		asked.Load(), reloads, bad.Load(), resets.Load(), samples.Load(), refused.Load(), longestRefused, notReady.Load())
	if bad.Load() > 0 {
		t.Errorf("%d of %d queries answered wrong or SERVFAIL, the first %s", bad.Load(), asked.Load(), badWhat)
	}
	if resets.Load() > int64(reloads) {
		t.Errorf("%d TCP connections closed without an answer in %d reloads, want at most one a reload", resets.Load(), reloads)
	}
	if notReady.Load() > 0 || longestRefused > refusedFor {
		t.Errorf("/ready: %d of %d samples not 200, refused for %v in a row; want none, and at most %v", notReady.Load(), samples.Load(), longestRefused, refusedFor)
	}
	for _, index := range []string{"reused", "built"} {
		if got, err := run.MetricSum(c.MetricsURL, "coredns_global_handovers_total", `index="`+index+`"`); err != nil || got != map[string]float64{"reused": 3, "built": 1}[index] {
			t.Errorf("coredns_global_handovers_total{index=%q} = %v (%v)", index, got, err)
		}
	}

	// Past handover_timeout: the new instance takes over incomplete.
	proxy.hold()
	reload("bound", corefile(10, changed+" default\n        handover_timeout 2s"), true)
	reloaded("bound")
	logged("bound", "the new index is not complete after handover_timeout 2s")
	if got := dnsq.Answer("udp", c.Addr, s.FQDN(bench.Global(0)), dns.TypeA); got != "SERVFAIL +soa" {
		t.Errorf("bound: handed over incomplete, and %s answers %q, want SERVFAIL", bench.Global(0), got)
	}
	proxy.release()
	s.Eventually("bound: complete once the lists come", func(context.Context) string {
		if got := dnsq.Answer("udp", c.Addr, s.FQDN(bench.Global(n-1)), dns.TypeA); got != answer(n-1) {
			return got
		}
		return ""
	})
}

// TestReloadKeepsKubernetesReady: with the stock kubernetes plugin beside
// `global`, as the chart configures it (its startup_timeout as long as the
// handover), a reload whose new kubernetes plugin waits for its lists (held
// by the API server) leaves the old instance answering both plugins' names
// and the pod ready throughout, and hands over once the lists come.
func TestReloadKeepsKubernetesReady(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := scenario.New(t, env.Cluster("source"))
	source, ctx := s.Source, t.Context()
	const n = 200
	w := eastWorld(t, s, n, false)
	proxy := startAPIProxy(t, source, false)
	corefile := func(ttl int) string {
		return run.Corefile(fmt.Sprintf(`
    global cluster.local {
        kubeconfig {$PROXY_KUBECONFIG}
        namespaces {$NS}
        ttl %d
    }
    kubernetes cluster.local {
        kubeconfig {$PROXY_KUBECONFIG}
        namespaces {$NS}
        startup_timeout 60s
        ttl %d
    }
`, ttl, ttl))
	}
	c, err := s.RunCoreDNS(ctx, run.CoreDNSOptions{Corefile: corefile(5), Env: []string{"PROXY_KUBECONFIG=" + proxy.kubeconfig}, WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{s.FQDN(bench.Global(n - 1)): bench.Pods, s.FQDN(w.Mirror(n-1, 0)): bench.Pods}
	answered := func(ttl uint32) string {
		for name, records := range names {
			for _, network := range []string{"udp", "tcp"} {
				r, err := dnsq.Ask(network, c.Addr, name, dns.TypeA, 0)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != records || r.Answer[0].Header().Ttl != ttl {
					return fmt.Sprintf("%s over %s: %s (want %d records with TTL %d)", name, network, dnsq.Summary(r, err), records, ttl)
				}
			}
		}
		return ""
	}
	ready := func() string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", c.Ports["READY_PORT"]))
		if err != nil {
			return "" // the ready plugin's own listener handover: a moment, whatever the plugins
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "/ready " + resp.Status
		}
		return ""
	}
	if got := answered(5); got != "" {
		t.Fatal(got)
	}
	proxy.hold()
	if err := os.WriteFile(filepath.Join(filepath.Dir(c.LogPath), "Corefile"), []byte(corefile(6)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(c.PID(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	s.Quiet("while the new kubernetes plugin's lists are held", 8*time.Second, func(context.Context) string {
		if strings.Contains(c.Log(1<<20), "Reloading complete") {
			return "handed over while the lists are held"
		}
		if got := answered(5); got != "" {
			return "the old instance: " + got
		}
		return ready()
	})
	proxy.release()
	s.Eventually("handed over once the lists come", func(context.Context) string {
		if got := answered(6); got != "" {
			return got
		}
		return ready()
	})
}

// eastWorld writes n bases of one linked cluster, east, into s's namespace:
// per base a headless mirror and its slice and, with endpointMirrors, an
// endpoint mirror (a Service and its slice) per pod: Linkerd's full shape.
func eastWorld(t *testing.T, s *scenario.T, n int, endpointMirrors bool) bench.World {
	t.Helper()
	w := bench.World{Namespace: s.NS, Clusters: []string{"east"}}
	if err := w.Load(t.Context(), s.Source.Client, 0, n, 16); err != nil {
		t.Fatal(err)
	}
	if endpointMirrors {
		if err := w.LoadEndpointMirrors(t.Context(), s.Source.Client, 0, n, 16); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// globalAnswer is the A answer of base i's global in an eastWorld.
func globalAnswer(w bench.World, i int) string {
	var addrs []string
	for p := range bench.Pods {
		addrs = append(addrs, w.Addr(i, 0, p).String())
	}
	return dnsq.NoError(addrs...)
}
