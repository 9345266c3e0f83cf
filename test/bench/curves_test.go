package bench

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// Curve reads BenchmarkCurve's lines as go test prints them, and nothing else.
func TestCurveFromGoBench(t *testing.T) {
	out := `goos: linux
BenchmarkCurve/clusters=3/endpoints=999-2         	       1	 61000000 ns/op	       310.5 B/endpoint	        20.00 built-ms	         1.250 programming-p99-ms
BenchmarkCurve/clusters=10/endpoints=99990-2      	       1	 9100000000 ns/op	       280.0 B/endpoint	      4100 built-ms	         2.500 programming-p99-ms
BenchmarkIndexMemory/shape=linkerd/endpoints=9999-2 	       1	 504447968 ns/op	        81.78 answers-B/endpoint
`
	ps := Curve(parseGoBench("./plugin/global", out))
	want := []CurvePoint{{3, 999, 310.5, 20, 1.25}, {10, 99990, 280, 4100, 2.5}}
	if !slices.Equal(ps, want) {
		t.Fatalf("points %+v, want %+v", ps, want)
	}
	var b bytes.Buffer
	if err := WriteCurve(&b, ps); err != nil {
		t.Fatal(err)
	}
	var back struct{ Points []CurvePoint }
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Points) != 2 || back.Points[1] != want[1] {
		t.Errorf("JSON %s read back as %+v (%v)", b.String(), back, err)
	}
	if err := WriteCurve(&b, nil); err == nil {
		t.Error("no points written without an error")
	}
}
