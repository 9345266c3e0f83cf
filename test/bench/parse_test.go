package bench

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
)

const dnsperfVerbose = `DNS Performance Testing Tool
Version 2.10.0

[Status] Command line: dnsperf -s 127.0.0.1 -p 15353 -d q.txt -c 4 -q 100 -l 2 -v
> NOERROR a.example. A 0.000100
> NOERROR b.example. A 0.000200
> NOERROR a.example. A 0.000300
> NXDOMAIN b.example. A 0.004000
[Status] Testing complete (time limit)

Statistics:

  Queries sent:         4
  Queries completed:    4 (100.00%)
  Queries lost:         0 (0.00%)

  Response codes:       NOERROR 3 (75.00%), NXDOMAIN 1 (25.00%)
  Average packet size:  request 27, response 85
  Run time (s):         2.001190
  Queries per second:   69295.769017

  Average Latency (s):  0.001392 (min 0.000018, max 0.193899)
`

func TestParseDnsperf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.txt")
	if err := os.WriteFile(path, []byte(dnsperfVerbose), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := parseDnsperf(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if p.QPS != 69295.769017 || p.Completed != 4 || p.Lost != 0 || p.NonNoError != 1 || p.RespBytes != 85 {
		t.Errorf("statistics: %+v", p)
	}
	if p.P50 != 200*time.Microsecond || p.P99 != 4*time.Millisecond {
		t.Errorf("p50 %v p99 %v, want 200µs and 4ms", p.P50, p.P99)
	}
}

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
BenchmarkServeDNS/global/A-2   	 1000000	      1400 ns/op	     392 B/op	       4 allocs/op
BenchmarkServeDNS/global/A-2   	 1000000	      1200 ns/op	     392 B/op	       4 allocs/op
BenchmarkServeDNS/global/A-2   	 1000000	      1000 ns/op	     392 B/op	       4 allocs/op
BenchmarkIndexMemory/endpoints=9999-2 	 1	 604736300 ns/op	 1289 answers-B/endpoint
PASS
`
	bs := parseGoBench("./plugin/global", out)
	if len(bs) != 2 {
		t.Fatalf("got %d benchmarks, want 2: %+v", len(bs), bs)
	}
	if b := bs[0]; b.Name != "ServeDNS/global/A" || b.Runs != 3 || b.Values["ns/op"] != 1200 || b.Values["allocs/op"] != 4 {
		t.Errorf("first: %+v", b)
	}
	if b := bs[1]; b.Name != "IndexMemory/endpoints=9999" || b.Values["answers-B/endpoint"] != 1289 {
		t.Errorf("second: %+v", b)
	}
}

func TestHistogramQuantile(t *testing.T) {
	s := run.Samples{
		`h_bucket{le="0.001"}`: 10,
		`h_bucket{le="0.01"}`:  90,
		`h_bucket{le="0.1"}`:   100,
		`h_bucket{le="+Inf"}`:  100,
		`h_sum`:                0.5,
	}
	h := histogram(s, "h").Minus(Histogram{})
	if h.Count() != 100 || h.Sum != 0.5 {
		t.Fatalf("count %v sum %v", h.Count(), h.Sum)
	}
	// The 50th observation is half way through the (1ms, 10ms] bucket's 80.
	if got := h.Quantile(0.5); math.Abs(got-0.0055) > 1e-9 {
		t.Errorf("p50 = %v, want 0.0055", got)
	}
	if got := h.Quantile(0.99); math.Abs(got-0.091) > 1e-9 {
		t.Errorf("p99 = %v, want 0.091", got)
	}
}

func TestAddresses(t *testing.T) {
	var w World
	if a := w.Addr(0, 0, 0).String(); a != "198.18.0.0" {
		t.Errorf("first address %s", a)
	}
	last := w.Addr(MaxBases-1, len(Clusters)-1, Pods-1)
	if !last.Less(ChangeAddr(0)) || ChangeAddr(changeAddrs-1).String() != "198.19.255.255" {
		t.Errorf("pods end at %s, changes span %s-%s", last, ChangeAddr(0), ChangeAddr(changeAddrs-1))
	}
}
