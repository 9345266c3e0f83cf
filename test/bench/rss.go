package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
)

// RSSResult is CoreDNS's memory, one sample per round each: with the
// kubernetes plugin alone (Off), with global too (On), and with the global
// plugin alone (Alone), whose slope between two sizes is what the plugin
// adds, without the kubernetes plugin's hundreds of megabytes (and their
// noise) on both sides.
type RSSResult struct {
	Bases          int
	Off, On, Alone RSSSamples
	SettleAfter    time.Duration
}

// RSSSample is one CoreDNS's memory.
type RSSSample struct {
	// Loaded: VmRSS bytes settle after the last names are answered, before
	// any collection forced: the lists' garbage still counted. Rest: VmRSS
	// bytes at rest, after two collections and restAfter, when the runtime
	// has returned what the lists left (an idle process gets there by
	// itself: the runtime forces a collection every 2 minutes).
	Loaded, Rest int64
	Heap         float64 // live heap: go_memstats_heap_alloc_bytes after a forced GC
}

// RSSSamples are one CoreDNS's samples over the rounds; their medians are
// what the report shows (VmRSS in whole bytes).
type RSSSamples []RSSSample

func (s RSSSamples) loaded() float64 {
	return float64(medianInt(field(s, func(m RSSSample) int64 { return m.Loaded })))
}
func (s RSSSamples) rest() float64 {
	return float64(medianInt(field(s, func(m RSSSample) int64 { return m.Rest })))
}
func (s RSSSamples) heap() float64 {
	return Median(field(s, func(m RSSSample) float64 { return m.Heap }))
}

// restAfter is how long the runtime's scavenger gets, after the forced
// collections, to return the freed heap to the system (it returns tens of
// megabytes a second, paced at 1% of the CPU).
const restAfter = 10 * time.Second

// RSS starts CoreDNS without and with the global plugin, alternately, rounds
// times each; once a process answers the last base's names it waits settle
// (the informers' list garbage goes) and samples /proc/<pid>/status VmRSS.
func (w World) RSS(ctx context.Context, dir string, bases, rounds int, settle time.Duration, env []string) (*RSSResult, error) {
	res := &RSSResult{Bases: bases, SettleAfter: settle}
	last := bases - 1
	for r := range rounds {
		for _, block := range []struct {
			name, corefile string
			samples        *RSSSamples
		}{{"off", kubernetesCorefile, &res.Off}, {"on", productionCorefile, &res.On}, {"alone", globalCorefile, &res.Alone}} {
			// Global names come from the global plugin when on, from the
			// controller's slices through the kubernetes plugin when off:
			// either way all is listed.
			probes := []probe{{"DNS_PORT", w.FQDN(Global(last)), Records}, {"DNS_PORT", w.FQDN(w.Mirror(last, len(Clusters)-1)), Pods}}
			if block.name == "alone" {
				probes = probes[:1]
			}
			name := fmt.Sprintf("rss-%s-%d", block.name, r)
			srv, err := StartCoreDNS(ctx, dir, name, block.corefile, "", []string{"DNS_PORT"}, env, probes...)
			if err != nil {
				return nil, err
			}
			m, err := loadedRSS(ctx, srv, settle, filepath.Join(dir, name+".heap"))
			srv.Stop()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			*block.samples = append(*block.samples, m)
		}
	}
	return res, nil
}

// loadedRSS samples srv's VmRSS once settle has passed (StartCoreDNS
// returns once it answers the last base's names and, with kubernetes, a
// mirror's); then its live heap after a collection forced through pprof
// (saving its heap profile to profile), and its VmRSS at rest, restAfter a
// second collection.
//
// Two: the runtime sets what its scavenger keeps from the heap in use when
// a collection ends marking, before it sweeps, so after the first the lists'
// garbage still counts; after the second only what is live and its spans'
// slack do. An idle CoreDNS gets there by itself within 4 minutes.
func loadedRSS(ctx context.Context, srv *CoreDNS, settle time.Duration, profile string) (RSSSample, error) {
	var m RSSSample
	if err := pause(ctx, settle); err != nil {
		return m, err
	}
	var err error
	if m.Loaded, err = vmRSS(srv.PID()); err != nil {
		return m, err
	}
	// A heap profile with gc=1 runs a full collection first: after it the
	// allocated heap is the live heap.
	if err := fetch(ctx, srv.PprofURL+"/heap?gc=1", profile); err != nil {
		return m, err
	}
	s, err := run.Scrape(srv.MetricsURL)
	if err != nil {
		return m, err
	}
	m.Heap = s.Sum("go_memstats_heap_alloc_bytes")
	if err := fetch(ctx, srv.PprofURL+"/heap?gc=1", os.DevNull); err != nil {
		return m, err
	}
	if err := pause(ctx, restAfter); err != nil {
		return m, err
	}
	m.Rest, err = vmRSS(srv.PID())
	return m, err
}

// vmRSS reads VmRSS from /proc/<pid>/status, in bytes.
func vmRSS(pid int) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	kb, ok := strings.CutSuffix(procField(path, "VmRSS"), " kB")
	if !ok {
		return 0, fmt.Errorf("%s: no VmRSS", path)
	}
	n, err := strconv.ParseInt(kb, 10, 64)
	return n * 1024, err
}

// sampleEvery calls sample from now on, pausing every between two calls,
// until the returned stop is called; stop (once or more) returns what was
// sampled and the first error, whose sample is left out.
func sampleEvery[T any](ctx context.Context, every time.Duration, sample func() (T, error)) (stop func() ([]T, error)) {
	ctx, cancel := context.WithCancel(ctx)
	var got []T
	var first error
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if v, err := sample(); err == nil {
				got = append(got, v)
			} else if first == nil {
				first = err
			}
			time.Sleep(every)
		}
	})
	return sync.OnceValues(func() ([]T, error) {
		cancel()
		wg.Wait()
		return got, first
	})
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
