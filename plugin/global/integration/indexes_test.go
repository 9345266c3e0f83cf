package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/globalmirror/globalmirror/test/bench"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
)

// TestEveryReloadPathHoldsTheIndexesItUses reloads one CoreDNS (SIGUSR1)
// through every path a reload can take, and after each counts the indexes
// the process holds, the references on them and the watches they keep
// open at the API server: two blocks sharing feeds share one index; a block
// whose feeds change holds a second; a Corefile without global holds none,
// and one with it again is Ready and answers; a reload that fails after
// global's setup (a port already bound) gives back what its new instance
// took, the old one going on with what it held.
func TestEveryReloadPathHoldsTheIndexesItUses(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := scenario.New(t, env.Cluster("source"))
	ctx := t.Context()
	const n = 20
	w := eastWorld(t, s, n, true)
	proxy := startAPIProxy(t, s.Source, false)
	stanza := func(namespaces string) string {
		return fmt.Sprintf("    global cluster.local {\n        kubeconfig {$PROXY_KUBECONFIG}\n        namespaces %s\n        ttl 5\n    }\n", namespaces)
	}
	c, err := s.RunCoreDNS(ctx, run.CoreDNSOptions{Corefile: run.Corefile(stanza("{$NS}")), Env: []string{"PROXY_KUBECONFIG=" + proxy.kubeconfig},
		ExtraPorts: []string{"SECOND_PORT"}, WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(c.LogPath), "Corefile")
	metric := func(name string) int {
		v, err := run.MetricSum(c.MetricsURL, name)
		if err != nil {
			return -1
		}
		return int(v)
	}
	// An index keeps perNamespace watches open in each namespace it
	// watches (Services and the two slice feeds).
	var perNamespace int64
	holds := func(what string, indexes, refs int, namespaces int64) {
		t.Helper()
		s.Eventually(what, func(context.Context) string {
			got := fmt.Sprintf("%d indexes, %d references, %d watches", metric("coredns_global_indexes"), metric("coredns_global_index_references"), proxy.watches.Load())
			if want := fmt.Sprintf("%d indexes, %d references, %d watches", indexes, refs, namespaces*perNamespace); got != want {
				return got + ", want " + want
			}
			return ""
		})
	}
	answers := func(what string) {
		t.Helper()
		s.Eventually(what+": answers", func(context.Context) string {
			r, err := dnsq.Ask("udp", c.Addr, s.FQDN(bench.Global(n-1)), dns.TypeA, 0)
			if got, want := dnsq.Summary(r, err), globalAnswer(w, n-1); got != want {
				return fmt.Sprintf("%q, want %q", got, want)
			}
			return ""
		})
	}
	reloads := 0
	reload := func(what, corefile string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(c.PID(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		reloads++
		s.Eventually(what+": reloaded", func(context.Context) string {
			if got := strings.Count(c.Log(1<<22), "Reloading complete"); got < reloads {
				return fmt.Sprintf("%d reloads complete, want %d", got, reloads)
			}
			return ""
		})
	}

	s.Eventually("the first index's watches", func(context.Context) string {
		if perNamespace = proxy.watches.Load(); perNamespace < 2 {
			return fmt.Sprintf("%d watches", perNamespace)
		}
		return ""
	})
	holds("started", 1, 1, 1)

	second := func(body string) string { return run.Server("SECOND_PORT", body) }
	reload("two blocks, one set of feeds", run.Corefile(stanza("{$NS}"))+second(stanza("{$NS}")))
	holds("two blocks, one set of feeds", 1, 2, 1)
	answers("two blocks, one set of feeds")

	reload("the second block's feeds changed", run.Corefile(stanza("{$NS}"))+second(stanza("{$NS} kube-public")))
	holds("the second block's feeds changed", 2, 2, 1+2)

	reload("no global", run.Corefile(""))
	holds("no global", 0, 0, 0)

	reload("global again", run.Corefile(stanza("{$NS}")))
	holds("global again", 1, 1, 1)
	answers("global again")
	s.Eventually("global again: Ready", func(context.Context) string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", c.Ports["READY_PORT"]))
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.Status
		}
		return ""
	})

	// A port some other process holds: the new instance is set up, global
	// and its new index included, and its servers cannot listen.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	failed := run.Corefile(stanza("{$NS}")) + strings.Replace(second(stanza("{$NS} kube-system")), "{$SECOND_PORT}", fmt.Sprint(taken.Addr().(*net.TCPAddr).Port), 1)
	if err := os.WriteFile(path, []byte(failed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(c.PID(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	s.Eventually("the failed reload", func(context.Context) string {
		if !strings.Contains(c.Log(1<<22), "Restart failed") {
			return "not failed yet"
		}
		return ""
	})
	holds("after a failed reload", 1, 1, 1)
	answers("after a failed reload")
}
