package build

import "testing"

func TestSkewCountsMinorsApart(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"0.1.0", "0.1.3", 0}, {"0.1.0", "v0.2.0", 1}, {"0.3.1", "0.1.0", 2}, {"1.1.0", "0.1.0", 2},
		{"dev", "0.1.0", 0}, {"0.1", "0.2.0", 0},
	} {
		if got := Skew(tc.a, tc.b); got != tc.want {
			t.Errorf("Skew(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
