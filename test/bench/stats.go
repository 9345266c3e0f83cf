package bench

import (
	"math"
	"slices"
	"time"
)

// Quantile of sorted values, nearest rank; NaN when empty.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[rank(len(sorted), q)]
}

// rank is the index of the q-quantile of n sorted values, nearest rank.
func rank(n int, q float64) int { return min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1) }

// Median of values (not sorted in place); NaN when empty.
func Median(values []float64) float64 {
	s := slices.Sorted(slices.Values(values))
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// DurationQuantile is Quantile for durations (sorts a copy); 0 when empty.
func DurationQuantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Sorted(slices.Values(ds))[rank(len(ds), q)]
}
