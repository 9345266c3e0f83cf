package kubeclient

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Both halves' feeds export the same series, each under its own prefix, and
// a feed's counters count into them.
func TestFeedMetricsAreTheSameSeriesUnderEachPrefix(t *testing.T) {
	series := map[string][]string{}
	for _, half := range []struct{ namespace, subsystem, prefix string }{
		{"coredns", "global", "coredns_global_"}, {"globalmirror", "", "globalmirror_"},
	} {
		reg := prometheus.NewRegistry()
		m := NewFeedMetrics(reg, half.namespace, half.subsystem)
		c := m.Counters("services")
		c.Streamed.Inc()
		c.Current.Inc()
		c.Heard.SetToCurrentTime()
		if got := testutil.ToFloat64(m.Lists.WithLabelValues("services", "streamed")); got != 1 {
			t.Errorf("%s: lists_total{services,streamed} = %v, want 1", half.prefix, got)
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			series[half.prefix] = append(series[half.prefix], strings.TrimPrefix(f.GetName(), half.prefix))
		}
	}
	want := []string{"api_heard_timestamp_seconds", "held_objects_total", "lists_total"}
	for prefix, got := range series {
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s*: %v, want %v", prefix, got, want)
		}
	}
}
