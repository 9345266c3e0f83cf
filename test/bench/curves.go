package bench

import (
	"context"
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

// curveSpec runs BenchmarkCurve once: each size builds the world anew.
var curveSpec = GoBenchSpec{Pkg: "./plugin/global", Pattern: "^BenchmarkCurve$", Benchtime: "1x", Count: 1}

// RunCurve runs BenchmarkCurve from its test binary compiled in dir.
func RunCurve(ctx context.Context, dir string) ([]GoBench, error) {
	return RunGoBench(ctx, dir, curveSpec)
}

// Curve picks BenchmarkCurve's points out of the Go benchmarks.
func Curve(bs []GoBench) []CurvePoint {
	var out []CurvePoint
	for _, b := range goBenchByPrefix(bs, "Curve/") {
		p := CurvePoint{BytesPerEndpoint: b.Values["B/endpoint"], BuiltMs: b.Values["built-ms"], ProgrammingP99Ms: b.Values["programming-p99-ms"]}
		for _, part := range strings.Split(strings.TrimPrefix(b.Name, "Curve/"), "/") {
			k, v, _ := strings.Cut(part, "=")
			n, err := strconv.Atoi(v)
			if err != nil {
				continue
			}
			switch k {
			case "clusters":
				p.Clusters = n
			case "endpoints":
				p.Endpoints = n
			}
		}
		if p.Clusters > 0 && p.Endpoints > 0 {
			out = append(out, p)
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
