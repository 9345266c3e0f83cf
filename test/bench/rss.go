package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
)

// The production block with the global plugin on, and the same without it.
const (
	rssOnCorefile = `.:{$DNS_PORT} {
    bind 127.0.0.1
    global cluster.local {
        kubeconfig {$BENCH_KUBECONFIG}
        ttl 5
    }
    kubernetes cluster.local {
        kubeconfig {$BENCH_KUBECONFIG}
        ttl 5
    }
}
`
	rssOffCorefile = `.:{$DNS_PORT} {
    bind 127.0.0.1
    kubernetes cluster.local {
        kubeconfig {$BENCH_KUBECONFIG}
        ttl 5
    }
}
`
	// The global plugin alone: the slope of its memory between two sizes is
	// what it adds, without the kubernetes plugin's hundreds of megabytes
	// (and their noise) on both sides of a difference.
	rssAloneCorefile = `.:{$DNS_PORT} {
    bind 127.0.0.1
    global cluster.local {
        kubeconfig {$BENCH_KUBECONFIG}
        ttl 5
    }
}
`
)

// RSSResult is CoreDNS's resident memory with the plugin off and on, one
// sample per round each.
type RSSResult struct {
	Bases   int
	Off, On []int64 // VmRSS bytes
	OffHeap []float64
	OnHeap  []float64 // live heap: go_memstats_heap_alloc_bytes after a forced GC
	// Alone: CoreDNS with the global plugin alone.
	Alone       []int64
	AloneHeap   []float64
	SettleAfter time.Duration
}

// RSS starts CoreDNS without and with the global plugin, alternately, rounds
// times each; once a process answers the last base's names it waits settle
// (the informers' list garbage goes) and samples /proc/<pid>/status VmRSS.
func (w World) RSS(ctx context.Context, dir string, bases, rounds int, settle time.Duration, env []string) (*RSSResult, error) {
	res := &RSSResult{Bases: bases, SettleAfter: settle}
	last := bases - 1
	for r := range rounds {
		for _, block := range []string{"off", "on", "alone"} {
			corefile := map[string]string{"off": rssOffCorefile, "on": rssOnCorefile, "alone": rssAloneCorefile}[block]
			name := fmt.Sprintf("rss-%s-%d", block, r)
			srv, err := StartCoreDNS(ctx, dir, name, corefile, "", []string{"DNS_PORT"}, env)
			if err != nil {
				return nil, err
			}
			rss, heap, err := w.loadedRSS(ctx, srv, last, block != "alone", settle, filepath.Join(dir, name+".heap"))
			srv.Stop()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			switch block {
			case "on":
				res.On, res.OnHeap = append(res.On, rss), append(res.OnHeap, heap)
			case "off":
				res.Off, res.OffHeap = append(res.Off, rss), append(res.OffHeap, heap)
			default:
				res.Alone, res.AloneHeap = append(res.Alone, rss), append(res.AloneHeap, heap)
			}
		}
	}
	return res, nil
}

// loadedRSS samples srv's VmRSS and live heap once it answers the last
// base's names (and, with kubernetes, a mirror's) and settle has passed,
// and saves its heap profile to profile.
func (w World) loadedRSS(ctx context.Context, srv *CoreDNS, last int, kubernetes bool, settle time.Duration, profile string) (int64, float64, error) {
	addr := srv.PortAddr("DNS_PORT")
	// Global names come from the global plugin when on, from the controller's
	// slices through the kubernetes plugin when off: either way all is listed.
	probes := []struct {
		name    string
		records int
	}{{w.FQDN(Global(last)), Records}, {w.FQDN(Mirror(last, len(Clusters)-1)), Pods}}
	if !kubernetes {
		probes = probes[:1]
	}
	for _, probe := range probes {
		if err := scenario.AwaitRecords(ctx, addr, probe.name, probe.records, 3*time.Minute); err != nil {
			return 0, 0, err
		}
	}
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(settle):
	}
	rss, err := vmRSS(srv.PID())
	if err != nil {
		return 0, 0, err
	}
	// A heap profile with gc=1 runs a full collection first: after it the
	// allocated heap is the live heap.
	if err := fetch(ctx, srv.PprofURL+"/heap?gc=1", profile); err != nil {
		return 0, 0, err
	}
	s, err := run.Scrape(srv.MetricsURL)
	if err != nil {
		return 0, 0, err
	}
	return rss, s.Sum("go_memstats_heap_alloc_bytes"), nil
}

// vmRSS reads VmRSS from /proc/<pid>/status, in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}
