package global

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"

	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// BenchmarkIndexMemory reports the heap the plugin keeps per ready endpoint,
// built through its real path: source's feeds listing from a clientset, its
// compact index, the work queue and the answer sets. answers is the answer
// sets alone, informers (the metric's name since the index was informers)
// source's index, total both. Run with -benchtime 1x: each iteration
// builds the whole index again.
func BenchmarkIndexMemory(b *testing.B) {
	for _, shape := range []struct {
		name            string
		endpointMirrors bool
	}{{"headless", false}, {"linkerd", true}} {
		for _, globals := range []int{1_111, 11_111} { // ~10k and ~100k endpoints
			b.Run(fmt.Sprintf("shape=%s/endpoints=%d", shape.name, largeEndpoints(globals)), func(b *testing.B) {
				for b.Loop() {
					total, answers, endpoints := indexMemory(b, globals, largeWorld(globals, shape.endpointMirrors))
					b.ReportMetric(float64(total)/float64(endpoints), "total-B/endpoint")
					b.ReportMetric(float64(answers)/float64(endpoints), "answers-B/endpoint")
					b.ReportMetric(float64(total-answers)/float64(endpoints), "informers-B/endpoint")
				}
			})
		}
	}
}

// BenchmarkNonMemberMemory: what the plugin holds for each local Service
// (headless, with a slice of three endpoints) that is neither a member nor
// named like a global, in a cluster of 1,111 globals: the difference between
// the index with 50,000 of them and without, per Service.
func BenchmarkNonMemberMemory(b *testing.B) {
	const globals, others = 1_111, 50_000
	for b.Loop() {
		without, _, _ := indexMemory(b, globals, largeWorld(globals, true))
		with, _, _ := indexMemory(b, globals, append(largeWorld(globals, true), nonMembers(others)...))
		b.ReportMetric(float64(with-without)/others, "B/service")
	}
}

// nonMembers are n local headless Services with a slice of three endpoints
// each, selected by no local selector and named like no global.
func nonMembers(n int) []k8sruntime.Object {
	objs := make([]k8sruntime.Object, 0, 2*n)
	for i := range n {
		name := fmt.Sprintf("other-%05d", i)
		svc := fixture.Service("ns", name, map[string]string{"app": name}, corev1.ClusterIPNone, fixture.Port{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP})
		objs = append(objs, svc, fixture.Slice(svc, name+"-x", discoveryv1.AddressTypeIPv4, nil,
			fixture.Ready(name+"-0", largeAddr(i, 0, 0)), fixture.Ready(name+"-1", largeAddr(i, 0, 1)), fixture.Ready(name+"-2", largeAddr(i, 0, 2))))
	}
	return objs
}

// heapProfileEnv names a file to write the heap profile to once the index is
// built, to see what holds the bytes (go tool pprof -sample_index=inuse_space).
const heapProfileEnv = "GLOBALMIRROR_INDEX_HEAP_PROFILE"

// indexMemory builds the plugin on a fake clientset holding globals and returns
// the heap it holds in total and in answer sets, and its ready endpoints. The
// clientset's own copies of the objects are in the baseline.
func indexMemory(b *testing.B, globals int, world []k8sruntime.Object) (total, answers int64, endpoints int) {
	var before uint64
	g, client, stop := startLarge(b, world, func() { before = liveHeap() })
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
