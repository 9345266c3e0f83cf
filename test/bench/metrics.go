package bench

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/globalmirror/globalmirror/test/run"
)

// Histogram is a Prometheus histogram: cumulative counts by upper bound.
type Histogram struct {
	Bounds []float64 // ascending, +Inf last
	Counts []float64
	Sum    float64
}

// histogram reads the classic histogram name (one label set) from a scrape.
func histogram(s run.Samples, name string) Histogram {
	var h Histogram
	counts := map[float64]float64{} // by bound
	for series, v := range s {
		rest, bucket := strings.CutPrefix(series, name+"_bucket{")
		_, le, labelled := strings.Cut(rest, `le="`)
		le, _, _ = strings.Cut(le, `"`)
		if bound, err := strconv.ParseFloat(le, 64); bucket && labelled && err == nil {
			counts[bound] = v
		}
	}
	h.Bounds = slices.Sorted(maps.Keys(counts))
	for _, le := range h.Bounds {
		h.Counts = append(h.Counts, counts[le])
	}
	h.Sum = s.Sum(name + "_sum")
	return h
}

// Count is the number of observations.
func (h Histogram) Count() float64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Minus is the histogram of observations since before (same buckets).
func (h Histogram) Minus(before Histogram) Histogram {
	out := Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Sum: h.Sum - before.Sum}
	for i := range h.Counts {
		out.Counts[i] = h.Counts[i]
		if i < len(before.Counts) {
			out.Counts[i] -= before.Counts[i]
		}
	}
	return out
}

// Quantile estimates the q-quantile by linear interpolation inside its
// bucket, as Prometheus's histogram_quantile does.
func (h Histogram) Quantile(q float64) float64 {
	n := h.Count()
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	for i, c := range h.Counts {
		if c < rank {
			continue
		}
		if math.IsInf(h.Bounds[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return h.Bounds[i-1]
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = h.Bounds[i-1], h.Counts[i-1]
		}
		if c == below {
			return h.Bounds[i]
		}
		return lo + (h.Bounds[i]-lo)*(rank-below)/(c-below)
	}
	return math.NaN()
}
