package faults

import (
	"os"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/localkube"
)

// TestFaultsShort is `make faults` in a few minutes: two clusters, two and
// a half minutes of faults (every kind once at least), a short idle check
// and wire fuzz. Every measure that must be zero is asserted; the report is
// logged.
func TestFaultsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	// The logs stay when the test fails: a failure after minutes of faults
	// needs every process's log to be understood.
	dir, err := os.MkdirTemp("", "globalmirror-faults-short-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	res, err := Run(t.Context(), Config{
		Clusters: []string{"east", "west"}, Seed: 7, Duration: 150 * time.Second,
		Idle: 10 * time.Second, Fuzz: 15 * time.Second, Dir: dir,
		Log: localkube.TestLogger(t),
	})
	if res != nil {
		t.Log("\n" + res.Markdown())
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Problems() {
		t.Error(p)
	}
	if len(res.Faults) != len(faultKinds) {
		t.Errorf("%d kinds of fault injected, want all %d: %v", len(res.Faults), len(faultKinds), res.Faults)
	}
	if res.Queries["udp"] == 0 || res.Queries["tcp"] == 0 || res.Fuzz.Sent == 0 {
		t.Errorf("queries %v, fuzz %v: nothing was asked", res.Queries, res.Fuzz)
	}
}
