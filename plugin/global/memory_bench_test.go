package global

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// BenchmarkIndexMemory reports the heap the plugin keeps per ready endpoint,
// built through its real path: source's feeds listing from a clientset, its
// compact index, the work queue and the answer sets. answers is the answer
// sets alone, index source's index, total both. Run with -benchtime 1x: each iteration
// builds the whole index again.
func BenchmarkIndexMemory(b *testing.B) {
	for _, shape := range []struct {
		name            string
		endpointMirrors bool
	}{{"headless", false}, {"linkerd", true}} {
		for _, globals := range []int{1_111, 11_111} { // ~10k and ~100k endpoints
			b.Run(fmt.Sprintf("shape=%s/endpoints=%d", shape.name, largeEndpoints(globals)), func(b *testing.B) {
				for b.Loop() {
					total, answers, endpoints, _ := indexMemory(b, largeEndpoints(globals), largeWorld(globals, shape.endpointMirrors))
					b.ReportMetric(float64(total)/float64(endpoints), "total-B/endpoint")
					b.ReportMetric(float64(answers)/float64(endpoints), "answers-B/endpoint")
					b.ReportMetric(float64(total-answers)/float64(endpoints), "index-B/endpoint")
				}
			})
		}
	}
}

// BenchmarkCurve is how the plugin's cost grows with the world: in
// Linkerd's full shape, of 3 and of 10 clusters, from about 1,000 to
// 100,000 mirrored endpoints, the heap it keeps per endpoint (index and
// answer sets), the time from its start to every answer built, and the p99
// of how long one changed slice takes to reach the answers. make bench
// plots it. Run with -benchtime 1x.
func BenchmarkCurve(b *testing.B) {
	for _, n := range []int{3, 10} {
		clusters := make([]string, n)
		for c := range clusters {
			clusters[c] = fmt.Sprintf("c%02d", c)
		}
		for _, target := range []int{1_000, 3_000, 10_000, 30_000, 100_000} {
			globals := max(1, target/(n*largePods))
			endpoints := globals * n * largePods
			b.Run(fmt.Sprintf("clusters=%d/endpoints=%d", n, endpoints), func(b *testing.B) {
				for b.Loop() {
					world := largeWorldOf(globals, clusters, true)
					total, _, _, built := indexMemory(b, endpoints, world)
					b.ReportMetric(float64(total)/float64(endpoints), "B/endpoint")
					b.ReportMetric(float64(built.Microseconds())/1000, "built-ms")
					b.ReportMetric(programmingP99(b, globals, clusters, world), "programming-p99-ms")
				}
			})
		}
	}
}

// programmingP99 starts the plugin on world and changes the slice of 100
// globals spread over it one after another, each a new address for its
// first pod, and returns the p99 in milliseconds of how long each change
// took from the update's return to its global's new answer set.
func programmingP99(b *testing.B, globals int, clusters []string, world []k8sruntime.Object) float64 {
	g, client, stop := startLarge(b, world, nil)
	defer stop()
	const changes = 100
	var took []float64
	for k := range changes {
		i := k * globals / changes
		name := largeBase(i) + "-" + clusters[0]
		key := largeBase(i) + "-global.bench"
		old := g.ctrl.get(key)
		sl, err := client.DiscoveryV1().EndpointSlices("bench").Get(context.Background(), name+"-1", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		sl.Endpoints[0].Addresses = []string{fmt.Sprintf("10.255.%d.%d", k>>8&255, k&255)}
		sl.ResourceVersion = strconv.Itoa(2 + k) // as an API server would; the fake keeps it
		if _, err := client.DiscoveryV1().EndpointSlices("bench").Update(context.Background(), sl, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for g.ctrl.get(key) == old {
			if time.Since(start) > time.Minute {
				b.Fatalf("%s: no new answer a minute after its slice changed", key)
			}
			runtime.Gosched()
		}
		took = append(took, float64(time.Since(start).Microseconds())/1000)
	}
	slices.Sort(took)
	return took[len(took)*99/100-1]
}

// BenchmarkNonMemberMemory: what the plugin keeps for each local Service
// (headless, with a slice of three endpoints) that is neither a member nor
// named like a global, in a cluster of 1,111 globals: the difference between
// the index with 50,000 of them and without, per Service.
func BenchmarkNonMemberMemory(b *testing.B) {
	const globals, others = 1_111, 50_000
	for b.Loop() {
		without, _, _, _ := indexMemory(b, largeEndpoints(globals), largeWorld(globals, true))
		with, _, _, _ := indexMemory(b, largeEndpoints(globals), append(largeWorld(globals, true), nonMembers(others)...))
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
// built, to see what has the bytes (go tool pprof -sample_index=inuse_space).
const heapProfileEnv = "GLOBALMIRROR_INDEX_HEAP_PROFILE"

// indexMemory builds the plugin on a fake clientset with world, whose
// globals have want ready endpoints in all, and returns the heap it keeps in
// total and in answer sets, its ready endpoints, and how long it took from
// its start to every answer built. The clientset's own copies of the
// objects are in the baseline.
func indexMemory(b *testing.B, want int, world []k8sruntime.Object) (total, answers int64, endpoints int, built time.Duration) {
	var before uint64
	var began time.Time
	g, client, stop := startLarge(b, world, func() { before = liveHeap(); began = time.Now() })
	built = time.Since(began)
	// Nothing allocates while measuring: feeds and worker are stopped,
	// their caches and answer sets stay reachable through g.
	stop()
	for _, s := range g.ctrl.sets {
		endpoints += int(s.endpoints)
	}
	if endpoints != want {
		b.Fatalf("index has %d endpoints, want %d", endpoints, want)
	}
	withSets := liveHeap()
	if path := os.Getenv(heapProfileEnv); path != "" {
		writeHeapProfile(b, path)
	}
	clear(g.ctrl.sets)
	withoutSets := liveHeap()
	runtime.KeepAlive(g)
	runtime.KeepAlive(client)
	return int64(withSets) - int64(before), int64(withSets) - int64(withoutSets), endpoints, built
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
