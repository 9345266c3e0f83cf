package global

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
)

// BenchmarkIndexMemory reports the heap the plugin keeps per ready endpoint,
// built through its real path: informers listing from a clientset, source's
// stripping and indexes, the work queue and the answer sets. answers is the
// answer sets alone (the index proper), informers the stripped objects and
// their cache indexes, total both. Run with -benchtime 1x: each iteration
// builds the whole index again.
func BenchmarkIndexMemory(b *testing.B) {
	for _, shape := range []struct {
		name            string
		endpointMirrors bool
	}{{"headless", false}, {"linkerd", true}} {
		for _, globals := range []int{1_111, 11_111} { // ~10k and ~100k endpoints
			b.Run(fmt.Sprintf("shape=%s/endpoints=%d", shape.name, largeEndpoints(globals)), func(b *testing.B) {
				for b.Loop() {
					total, answers, endpoints := indexMemory(b, globals, shape.endpointMirrors)
					b.ReportMetric(float64(total)/float64(endpoints), "total-B/endpoint")
					b.ReportMetric(float64(answers)/float64(endpoints), "answers-B/endpoint")
					b.ReportMetric(float64(total-answers)/float64(endpoints), "informers-B/endpoint")
				}
			})
		}
	}
}

// heapProfileEnv names a file to write the heap profile to once the index is
// built, to see what holds the bytes (go tool pprof -sample_index=inuse_space).
const heapProfileEnv = "GLOBALMIRROR_INDEX_HEAP_PROFILE"

// indexMemory builds the plugin on a fake clientset holding globals and returns
// the heap it holds in total and in answer sets, and its ready endpoints. The
// clientset's own copies of the objects are in the baseline.
func indexMemory(b *testing.B, globals int, endpointMirrors bool) (total, answers int64, endpoints int) {
	var before uint64
	g, client, stop := startLarge(b, globals, endpointMirrors, func() { before = liveHeap() })
	// Nothing allocates while measuring: informers and worker are stopped,
	// their caches and answer sets stay reachable through g.
	stop()
	for _, s := range g.ctrl.sets {
		endpoints += s.endpoints
	}
	if want := largeEndpoints(globals); endpoints != want {
		b.Fatalf("index holds %d endpoints, want %d", endpoints, want)
	}
	built := liveHeap()
	if path := os.Getenv(heapProfileEnv); path != "" {
		writeHeapProfile(b, path)
	}
	clear(g.ctrl.sets)
	withoutSets := liveHeap()
	runtime.KeepAlive(g)
	runtime.KeepAlive(client)
	return int64(built) - int64(before), int64(built) - int64(withoutSets), endpoints
}

// liveHeap is the heap after two full collections (the second frees what the
// first one's finalizers released).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}
