package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixture writes md as RESULTS.md and results.json, dated
// 2026-11-26T03:19:00Z, with floors fs, into a directory of its own.
func fixture(t *testing.T, md string, fs []floor) (mdPath, jsonPath string) {
	t.Helper()
	dir := t.TempDir()
	mdPath, jsonPath = filepath.Join(dir, "RESULTS.md"), filepath.Join(dir, "results.json")
	data, err := json.Marshal(resultsFile{Date: "2026-11-26T03:19:00Z", Floors: fs})
	if err := errors.Join(err, os.WriteFile(mdPath, []byte(md), 0o644), os.WriteFile(jsonPath, data, 0o644)); err != nil {
		t.Fatal(err)
	}
	return mdPath, jsonPath
}

// readResults reads back both files fixture wrote.
func readResults(t *testing.T, mdPath, jsonPath string) (string, resultsFile) {
	t.Helper()
	md, mdErr := os.ReadFile(mdPath)
	data, jsonErr := os.ReadFile(jsonPath)
	var res resultsFile
	if err := errors.Join(mdErr, jsonErr, json.Unmarshal(data, &res)); err != nil {
		t.Fatal(err)
	}
	return string(md), res
}

// A paged run measured on its own replaces the paged section of RESULTS.md
// and the paged floors of results.json, dated, and nothing else.
func TestMergePagedReplacesOnlyThePagedRun(t *testing.T) {
	before := "# globalmirror benchmarks\n\n## 3. Memory\n\n### Linkerd's full shape, through a real API server\n\nstreamed\n\n" +
		pagedSection + "\n\nold paged figures\n\n## 4. Controller scale\n\nscale\n"
	paged := linkerdFloors(nil, pagedLabel)
	if len(paged) == 0 {
		t.Fatal("no paged floors")
	}
	old := 1.0
	floors := []floor{{Name: "streamed floor", Measured: &old, Holds: true}}
	for _, f := range paged {
		floors = append(floors, floor{Name: f.Name, Measured: &old, Holds: true})
	}
	md, js := fixture(t, before, floors)

	started := time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC)
	if err := MergePaged(md, js, &LinkerdMemoryResult{Paged: true}, started); err != nil {
		t.Fatal(err)
	}
	s, res := readResults(t, md, js)
	for _, want := range []string{"streamed\n", "## 4. Controller scale\n\nscale\n", "Measured on its own, 2026-11-26 15:00 UTC"} {
		if !strings.Contains(s, want) {
			t.Errorf("RESULTS.md lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "old paged figures") || strings.Count(s, pagedSection) != 1 {
		t.Errorf("the paged section was not replaced once:\n%s", s)
	}
	if res.Date != "2026-11-26T03:19:00Z" || len(res.Floors) != len(floors) {
		t.Fatalf("date %s, %d floors; want the full run's date and %d floors", res.Date, len(res.Floors), len(floors))
	}
	for _, f := range res.Floors {
		switch {
		case f.Name == "streamed floor" && (f.Date != "" || f.Measured == nil):
			t.Errorf("the streamed floor changed: %+v", f)
		case f.Name != "streamed floor" && (f.Date != "2026-11-26T15:00:00Z" || f.Measured != nil):
			t.Errorf("paged floor %q not this run's (nothing measured, dated): %+v", f.Name, f)
		}
	}
}

func TestReplaceSectionInsertsWhereAbsent(t *testing.T) {
	got, err := replaceSection("# r\n\n## 3. Memory\n\nm\n\n## 4. Controller scale\n", pagedSection, "## 4. Controller scale", "\n"+pagedSection+"\n\nnew\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# r\n\n## 3. Memory\n\nm\n\n" + pagedSection + "\n\nnew\n\n## 4. Controller scale\n"; got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	// A section after a last line that lacks its blank line (a footnote) is
	// a section of its own, and the next merge replaces it: one copy.
	md := "# r\n\n## 6. Cold starts\n\n‡ a footnote\n## Phases\n"
	for _, body := range []string{"## 8. Names\n\nfirst\n", "## 8. Names\n\nsecond\n"} {
		if md, err = replaceSection(md, "## 8. Names", "## Phases", body); err != nil {
			t.Fatal(err)
		}
	}
	if want := "# r\n\n## 6. Cold starts\n\n‡ a footnote\n\n## 8. Names\n\nsecond\n\n## Phases\n"; md != want {
		t.Errorf("got\n%q\nwant\n%q", md, want)
	}
	if _, err := replaceSection("# r\n", pagedSection, "## 4. Controller scale", "x"); err == nil {
		t.Error("a file without either section: no error")
	}
}

// Transport figures measured on their own go under DNS throughput, before
// programming latency, in a file whose full run did not measure them; their
// floors are added, dated, beside the full run's.
func TestMergeTransportAddsWhatTheFullRunLacks(t *testing.T) {
	old := 1.0
	md, js := fixture(t, "# r\n\n## 1. DNS throughput\n\nqps\n\n## 2. Programming latency\n\nlat\n",
		[]floor{{Name: "qps floor", Measured: &old, Holds: true}})
	tr := &TransportResult{Clients: 4, Duration: time.Second, Contention: "busy", Rows: []TransportRow{
		{What: "UDP", Latencies: []time.Duration{time.Millisecond}},
		{What: "TCP", Latencies: []time.Duration{2 * time.Millisecond}, Failed: 1},
	}}
	started := time.Date(2026, 11, 26, 17, 0, 0, 0, time.UTC)
	for range 2 { // a second merge replaces the first
		if err := MergeTransport(md, js, tr, 1000, started); err != nil {
			t.Fatal(err)
		}
	}
	s, res := readResults(t, md, js)
	i, j := strings.Index(s, "qps\n"), strings.Index(s, transportSection)
	if strings.Count(s, transportSection) != 1 || i < 0 || j < i || j > strings.Index(s, "## 2. Programming latency") ||
		!strings.Contains(s, "| TCP | 2 |") {
		t.Errorf("the transport section is not once between throughput and latency:\n%s", s)
	}
	if len(res.Floors) != 3 || res.Floors[0].Date != "" {
		t.Fatalf("want the full run's floor untouched and two transport floors: %+v", res.Floors)
	}
	for _, f := range res.Floors[1:] {
		if f.Date != "2026-11-26T17:00:00Z" || f.Measured == nil || f.Holds != (f.Name[:3] == "UDP") {
			t.Errorf("transport floor %+v: want dated, measured, holding only where nothing failed", f)
		}
	}
}

// A part whose floors are named by the sizes and shapes it ran replaces
// every floor of its earlier run, not only those named alike.
func TestMergeDropsTheStaleFloorsOfThePart(t *testing.T) {
	one := 1.0
	md, js := fixture(t, "# r\n\n## Phases\n", []floor{{Name: "qps floor", Measured: &one, Holds: true},
		{Name: startFloorPrefix + "at a size this run left out", Measured: &one}})
	fresh := within(startFloorPrefix+"at this run's size", "1", 1, 2, "s", true)
	if err := mergeSection(md, js, startSection, "## Phases", func(w io.Writer) { fmt.Fprint(w, "body\n") }, []floor{fresh}, startFloorPrefix, time.Now(), "bench -start -merge"); err != nil {
		t.Fatal(err)
	}
	_, res := readResults(t, md, js)
	var names []string
	for _, f := range res.Floors {
		names = append(names, f.Name)
	}
	if want := []string{"qps floor", startFloorPrefix + "at this run's size"}; !slices.Equal(names, want) {
		t.Errorf("floors %q, want %q", names, want)
	}
}

// Storms measured on their own replace every storm floor of the full run
// (their names carry the phase, which a run may rename) and go once before
// the paged run; a drain whose controller writes its last slice late holds
// everything but that floor.
func TestMergeStormsReplacesEveryStormFloor(t *testing.T) {
	old := 1.0
	md, js := fixture(t, "# r\n\n"+floorsSection+"\n\nold storm figures\n\n### Linkerd's full shape, through a real API server\n\nstreamed\n\n"+pagedSection+"\n\npaged\n",
		[]floor{{Name: "streamed floor", Measured: &old, Holds: true}, {Name: "storm, an old phase", Measured: &old, Holds: true}})
	ms := func(n ...int) []time.Duration {
		var ds []time.Duration
		for _, v := range n {
			ds = append(ds, time.Duration(v)*time.Millisecond)
		}
		return ds
	}
	// Three rounds, the controller's last writes 1.4 s, 0.9 s and 1.3 s
	// after: the median, 1.3 s, against the plain writer's 1 s.
	rep := &StormReport{Clusters: 10, Bases: 2}
	for r, last := range []int{1400, 900, 1300} {
		rep.Storms = append(rep.Storms, StormResult{
			What: DrainStorm + " of c09", Round: r + 1, Globals: 2, Writes: 1, Writers: 16, After: ms(100, 200),
			ControllerWrites: 2, ControllerFirst: 30 * time.Millisecond, ControllerAfter: ms(400, last), ControllerBusy: .97,
			Plain: time.Second, PlainWrites: 2, PlainWorkers: 16,
		})
	}
	started := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	for range 2 {
		if err := MergeStorms(md, js, rep, started); err != nil {
			t.Fatal(err)
		}
	}
	s, res := readResults(t, md, js)
	if strings.Contains(s, "old storm figures") || !strings.Contains(s, "| storm, "+DrainStorm+" of c09 (10 clusters × 2 services × 3 pods): one slice write per affected global | 2 slice writes for 2 globals, the most of 3 rounds; measured on its own, 2026-11-29 | yes |") {
		t.Errorf("the floors table is not every floor of results.json:\n%s", s)
	}
	if strings.Count(s, stormSection) != 1 || strings.Index(s, stormSection) > strings.Index(s, pagedSection) || !strings.Contains(s, "round 3 | 2 |") || !strings.Contains(s, "| 97% |") {
		t.Errorf("the storm section is not once before the paged run, with its CPUs:\n%s", s)
	}
	holds := map[string]bool{}
	for _, f := range res.Floors {
		holds[f.Name] = f.Holds
	}
	if _, ok := holds["storm, an old phase"]; ok || !holds["streamed floor"] || len(res.Floors) != 5 {
		t.Fatalf("want the streamed floor and the drain's four: %+v", res.Floors)
	}
	shape := " (10 clusters × 2 services × 3 pods): "
	for name, want := range map[string]bool{
		"every affected global right ≤ 1 s after the annotation's write, p99":                 true,
		"the controller sees it, its first slice write ≤ 1 s after the annotation's write":    true,
		"the controller's last slice write ≤ 1.25× a plain writer's as many writes, same run": false, // 1.3 s against 1 s
		"one slice write per affected global":                                                 true,
	} {
		if got, ok := holds["storm, "+DrainStorm+" of c09"+shape+name]; !ok || got != want {
			t.Errorf("%s: present %v, holds %v; want %v", name, ok, got, want)
		}
	}
}
