package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// CurvePoint is one size of BenchmarkCurve (plugin/global): Linkerd's full
// shape of Clusters clusters and Endpoints mirrored endpoints, in process.
type CurvePoint struct {
	Clusters  int `json:"clusters"`
	Endpoints int `json:"endpoints"`
	// BytesPerEndpoint is the heap the plugin holds (index and answer sets).
	BytesPerEndpoint float64 `json:"bytes_per_endpoint"`
	// BuiltMs is from the plugin's start to every answer built.
	BuiltMs float64 `json:"built_ms"`
	// ProgrammingP99Ms is how long one changed slice took to reach its
	// global's answers, p99 of 100.
	ProgrammingP99Ms float64 `json:"programming_p99_ms"`
}

// CurveSpec runs BenchmarkCurve once: each size builds the world anew.
var CurveSpec = GoBenchSpec{Pkg: "./plugin/global", Pattern: "^BenchmarkCurve$", Benchtime: "1x", Count: 1}

// Curve picks BenchmarkCurve's points out of the Go benchmarks.
func Curve(bs []GoBench) []CurvePoint {
	var out []CurvePoint
	for _, b := range goBenchByPrefix(bs, "Curve/") {
		p := benchParams(b.Name)
		clusters, err1 := strconv.Atoi(p["clusters"])
		endpoints, err2 := strconv.Atoi(p["endpoints"])
		if err1 == nil && err2 == nil && clusters > 0 && endpoints > 0 {
			out = append(out, CurvePoint{Clusters: clusters, Endpoints: endpoints, BytesPerEndpoint: b.Values["B/endpoint"],
				BuiltMs: b.Values["built-ms"], ProgrammingP99Ms: b.Values["programming-p99-ms"]})
		}
	}
	return out
}

// benchParams are the key=value parts of a sub-benchmark's name,
// "Curve/clusters=3/endpoints=999".
func benchParams(name string) map[string]string {
	out := map[string]string{}
	for part := range strings.SplitSeq(name, "/") {
		if k, v, ok := strings.Cut(part, "="); ok {
			out[k] = v
		}
	}
	return out
}

// WriteCurve writes the points as JSON, which test/benchplot draws.
func WriteCurve(out io.Writer, ps []CurvePoint) error {
	if len(ps) == 0 {
		return fmt.Errorf("no curve points")
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Points []CurvePoint `json:"points"`
	}{ps})
}
