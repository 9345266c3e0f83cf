package bench

import (
	"testing"
	"time"
)

// The cold start floors judge global by the slowest start for the absolute
// bounds, by medians against the stock plugin, and fail on one global
// wrong at Ready or one start whose peak RSS passed 1.3× steady.
func TestStartFloors(t *testing.T) {
	sample := func(ready time.Duration, wrong int, peak int64) StartSample {
		return StartSample{Ready: ready, Complete: ready, WrongAtReady: wrong, PeakRSS: peak, SteadyRSS: 100}
	}
	step := func(endpoints int, global, stock []StartSample) LinkerdMemoryStep {
		return LinkerdMemoryStep{Endpoints: endpoints, Starts: []StartResult{
			{Block: "global", Names: 2000, Samples: global}, {Block: "kubernetes", Names: 6000, Samples: stock}}}
	}
	stock := []StartSample{sample(3*time.Second, 0, 300), sample(3*time.Second, 0, 300), sample(3*time.Second, 0, 300)}
	good := []StartSample{sample(time.Second, 0, 110), sample(time.Second, 0, 110), sample(time.Second, 0, 110)}
	// One slow start (the median still half the stock's), one name wrong, one peak.
	bad := []StartSample{sample(time.Second, 0, 110), sample(1400*time.Millisecond, 1, 110), sample(2100*time.Millisecond, 0, 131)}
	streamed := &LinkerdMemoryResult{Steps: []LinkerdMemoryStep{step(18000, good, stock)}}
	paged := &LinkerdMemoryResult{Paged: true, Steps: []LinkerdMemoryStep{step(18000, bad, stock)}}

	holds := map[string]bool{}
	for _, f := range startFloors(streamed, paged) {
		if f.Measured == nil {
			t.Errorf("%s: not measured", f.Name)
		}
		holds[f.Name] = f.Holds
	}
	for what, want := range map[string]bool{
		"cold start: global Ready ≤ 0.5× the stock kubernetes plugin's, 18,000 mirrored endpoints":              true,
		"cold start: global Ready ≤ 2 s, 18,000 mirrored endpoints":                                             true,
		"cold start: globals not right when asked at Ready: 0, 18,000 mirrored endpoints":                       true,
		"cold start: global's peak RSS ≤ 1.3× steady, 18,000 mirrored endpoints":                                true,
		"cold start: global Ready ≤ 0.5× the stock kubernetes plugin's, 18,000 mirrored endpoints" + pagedLabel: true,
		"cold start: global Ready ≤ 2 s, 18,000 mirrored endpoints" + pagedLabel:                                false,
		"cold start: globals not right when asked at Ready: 0, 18,000 mirrored endpoints" + pagedLabel:          false,
		"cold start: global's peak RSS ≤ 1.3× steady, 18,000 mirrored endpoints" + pagedLabel:                   false,
	} {
		got, ok := holds[what]
		if !ok {
			t.Errorf("no floor %q among %v", what, holds)
		} else if got != want {
			t.Errorf("%q holds %v, want %v", what, got, want)
		}
	}
	if len(holds) != 8 {
		t.Errorf("%d floors, want 8: %v", len(holds), holds)
	}
	if fs := startFloors(nil, nil); len(fs) != 4 || fs[0].Measured != nil {
		t.Errorf("not measured: %d floors, the first known %v; want 4 unmeasured", len(fs), fs[0].Measured != nil)
	}
}
