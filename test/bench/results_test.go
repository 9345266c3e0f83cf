package bench

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// results.json holds every floor with its number, bound and verdict; what a
// run did not measure is there too, measured null and not holding.
func TestResultsJSONHoldsEveryFloor(t *testing.T) {
	r := &Results{Started: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC),
		Scale:   []ScaleStep{{What: "idle 1m", Writes: Writes{}}, {What: "one endpoint added", Writes: Writes{"endpointslices/update": 2}}},
		GoBench: []GoBench{{Name: "NonMemberMemory", Values: map[string]float64{"B/service": 3.5}}},
	}
	var buf bytes.Buffer
	if err := ReportJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Floors []floor `json:"floors"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	byName := map[string]floor{}
	for _, f := range got.Floors {
		byName[f.Name] = f
	}
	check := func(name string, measured *float64, holds bool) {
		t.Helper()
		f, ok := byName[name]
		switch {
		case !ok:
			t.Errorf("no floor %q in %s", name, buf.String())
		case (f.Measured == nil) != (measured == nil) || (measured != nil && *f.Measured != *measured) || f.Holds != holds:
			t.Errorf("%q: measured %v, holds %v; want %v, %v", name, f.Measured, f.Holds, measured, holds)
		}
	}
	zero, two, nonMember := 0.0, 2.0, 3.5
	check("controller writes while idle: 0", &zero, true)
	check("controller writes for one endpoint change: exactly 1", &two, false)
	check("per local Service (with a slice) neither member nor global ≤ 40 B", &nonMember, true)
	check("what global adds to CoreDNS's live heap per mirrored endpoint, Linkerd's full shape, up to 100,000 endpoints ≤ 200 B", nil, false)
}
