package bench

import (
	"runtime"
	"testing"
	"time"
)

// busy reads the share of the CPUs from the first sample to the one at or
// after its end, the last where none is.
func TestCPUBusyIsReadUpToTheSampleAtItsEnd(t *testing.T) {
	t0 := time.Unix(0, 0)
	all := int64(clockTicks * runtime.NumCPU()) // every CPU busy for a second
	c := &cpuSamples{at: []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)}, ticks: []int64{0, all, all}}
	for until, want := range map[time.Duration]float64{500 * time.Millisecond: 1, time.Second: 1, 1500 * time.Millisecond: .5, time.Hour: .5} {
		if got := c.busy(t0.Add(until)); got != want {
			t.Errorf("busy until %v: %v, want %v", until, got, want)
		}
	}
	if got := (&cpuSamples{at: []time.Time{t0}, ticks: []int64{7}}).busy(t0.Add(time.Second)); got != 0 {
		t.Errorf("busy over one sample: %v, want 0", got)
	}
}
