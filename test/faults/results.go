package faults

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/wirefuzz"
)

// Results are what a run measured.
type Results struct {
	Config Config

	mu      sync.Mutex
	Queries map[string]int // by network
	// Wrong counts answers that differed from the truth after the window;
	// WrongSamples keeps the first of them.
	Wrong        int
	WrongSamples []string
	// WrongBy counts them by cluster, global and the fault injected last.
	WrongBy   map[string]int
	lastFault string
	// Failures are answers that did not come (no answer, SERVFAIL), by
	// "cluster network reason".
	Failures map[string]int
	// FailureSamples has the first time each unexpected failure was seen.
	FailureSamples []string
	// Stale is, per kind of fault, the longest an answer differed from the
	// API after the API's change that made it wrong, while the mesh
	// converged after a fault of that kind; Faults counts the faults
	// injected per kind.
	Stale  map[string]time.Duration
	Faults map[string]int
	// Crashes are processes that exited without being told to.
	Crashes []string
	// IdleWrites are the controllers' API writes while nothing changed;
	// IdleDetail says which, when there were some.
	IdleWrites float64
	IdleDetail []string
	// IdleRestarts are idle windows started again because an input of the
	// controllers changed in them, with what changed.
	IdleRestarts []string
	// IdleUnjudged says why no idle window could be judged: the inputs
	// never stood still.
	IdleUnjudged string
	// Foreign are objects globalmirror did not create that it wrote.
	Foreign []string
	// Gone410 counts watches resumed after a compaction that the API server
	// answered 410 Gone, as it answers the informers', which then list again.
	Gone410 int
	// Hostile notes what the API server refused of the hostile objects.
	HostileRejected []string
	Fuzz            wirefuzz.Report
	FuzzCrash       string

	SetUp, Total time.Duration
}

func newResults(cfg Config) *Results {
	return &Results{Config: cfg, Queries: map[string]int{}, WrongBy: map[string]int{}, Failures: map[string]int{}, Stale: map[string]time.Duration{}, Faults: map[string]int{}}
}

// locked runs f with r's lock held.
func (r *Results) locked(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func (r *Results) query(network string) { r.locked(func() { r.Queries[network]++ }) }

func (r *Results) wrong(sample, cluster, global string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Wrong++
	r.WrongBy[fmt.Sprintf("%s, %s, after %q", cluster, global, r.lastFault)]++
	if len(r.WrongSamples) < 20 {
		r.WrongSamples = append(r.WrongSamples, sample)
	}
}

func (r *Results) failure(cluster, network, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := cluster + " " + network + " " + reason
	if r.Failures[k] == 0 && !strings.HasSuffix(reason, "(expected)") {
		r.FailureSamples = append(r.FailureSamples, time.Now().Format("15:04:05.000")+" "+k)
	}
	r.Failures[k]++
}

func (r *Results) gone410() { r.locked(func() { r.Gone410++ }) }

// injecting records the fault being injected, to attribute wrong answers.
func (r *Results) injecting(kind string) { r.locked(func() { r.lastFault = kind }) }

// injected is a copy of the faults injected so far, per kind.
func (r *Results) injected() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.Faults)
}

func (r *Results) fault(kind string) { r.locked(func() { r.Faults[kind]++ }) }

// stale keeps, per kind of fault, the longest d (never negative) seen.
func (r *Results) stale(kind string, d time.Duration) {
	r.locked(func() { r.Stale[kind] = max(r.Stale[kind], d) })
}

// Problems lists what must not happen, empty when the run is clean.
func (r *Results) Problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	if r.Wrong > 0 {
		out = append(out, fmt.Sprintf("%d wrong answers outside the %v window", r.Wrong, window))
	}
	if n := r.unexpectedFailuresLocked(); n > 0 {
		out = append(out, fmt.Sprintf("%d queries without an answer outside a planned CoreDNS restart", n))
	}
	if len(r.Crashes) > 0 {
		out = append(out, fmt.Sprintf("crashes: %v", r.Crashes))
	}
	if r.IdleWrites != 0 {
		out = append(out, fmt.Sprintf("%v API writes while idle", r.IdleWrites))
	}
	if r.IdleUnjudged != "" {
		out = append(out, "no idle check: "+r.IdleUnjudged)
	}
	if len(r.Foreign) > 0 {
		out = append(out, fmt.Sprintf("objects not globalmirror's that it wrote: %v", r.Foreign))
	}
	if r.Fuzz.MalformedCount > 0 || r.FuzzCrash != "" {
		out = append(out, fmt.Sprintf("wire fuzz: %v %s", r.Fuzz, r.FuzzCrash))
	}
	return out
}

// Markdown is the report of the run.
func (r *Results) Markdown() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	c := r.Config
	p("# Faults\n\n`make faults`: %d clusters (%s) in a full mesh, each with the mirror simulator linking the others, two controller replicas and a CoreDNS with the global plugin, the first's control plane three kube-apiservers behind one address; DNS clients asking every global and per-pod name of every cluster continuously, over UDP and TCP; faults injected one after another for %v, order and choices from seed %d. Set-up took %v, the whole run %v.\n\n",
		len(c.Clusters), strings.Join(c.Clusters, ", "), c.Duration, c.Seed, r.SetUp.Round(time.Second), r.Total.Round(time.Second))
	p("Every answer is compared with a model of the truth (package `test/faults/truth`, a second implementation of the semantics) computed from each cluster's API server every 100 ms; a watch tells it of every state in between. An answer that differs while the API's state changed less than %v ago is the system converging; one that differs after that counts as wrong. The idle check measures a window in which no input of the controllers changed.\n\n", window)
	p("| measure | value |\n|---|---:|\n")
	p("| queries (UDP / TCP) | %d / %d |\n", r.Queries["udp"], r.Queries["tcp"])
	p("| wrong answers outside the window | %d |\n", r.Wrong)
	p("| queries without an answer, outside a planned CoreDNS restart | %d |\n", r.unexpectedFailuresLocked())
	p("| processes that crashed | %d |\n", len(r.Crashes))
	p("| objects not created by globalmirror that it changed | %d |\n", len(r.Foreign))
	if r.IdleUnjudged != "" {
		p("| API writes while idle (%v) | not judged: %s |\n", c.Idle, r.IdleUnjudged)
	} else {
		p("| API writes while idle (%v) | %v |\n", c.Idle, r.IdleWrites)
	}
	p("| watches resumed after a compaction answered 410 Gone (informers list again) | %d of %d |\n", r.Gone410, r.Faults[compactionKind])
	p("| wire fuzz (%v): messages, replies, malformed replies | %d, %d, %d |\n", c.Fuzz, r.Fuzz.Sent, r.Fuzz.Replies, r.Fuzz.MalformedCount)
	p("\n## Faults, and the longest an answer lagged the API after each\n\nThe next fault comes once every simulator has followed every change and the answers have matched the API for a second, so what a fault's recovery writes late counts under it. A lag is measured from the API's change that made the answer wrong, as the window is.\n\n| fault | injected | longest lag behind the API |\n|---|---:|---:|\n")
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		p("| %s | %d | %v |\n", k, r.Faults[k], r.Stale[k].Round(time.Millisecond))
	}
	if len(r.Failures) > 0 {
		p("\n## Queries without an answer\n\n| cluster, network, why | count |\n|---|---:|\n")
		for _, k := range slices.Sorted(maps.Keys(r.Failures)) {
			p("| %s | %d |\n", k, r.Failures[k])
		}
	}
	if len(r.WrongBy) > 0 {
		p("\n## Wrong answers by cluster, global and the fault injected last\n\n| cluster, global, fault | count |\n|---|---:|\n")
		for _, k := range slices.Sorted(maps.Keys(r.WrongBy)) {
			p("| %s | %d |\n", k, r.WrongBy[k])
		}
	}
	for _, sec := range []struct {
		title string
		items []string
	}{{"Wrong answers (first 20)", r.WrongSamples}, {"Unexpected failures, first of each", r.FailureSamples},
		{"Writes while idle", r.IdleDetail}, {"Idle windows started again (an input changed)", r.IdleRestarts}, {"Crashes", r.Crashes}, {"Foreign objects written", r.Foreign}, {"Malformed replies (first 20)", r.Fuzz.Malformed},
		{"Hostile objects the API server refused (so globalmirror never saw them)", r.HostileRejected}} {
		if len(sec.items) > 0 {
			p("\n## %s\n\n", sec.title)
			for _, s := range sec.items {
				p("- %s\n", s)
			}
		}
	}
	if r.FuzzCrash != "" {
		p("\n## After the wire fuzz\n\n%s\n", r.FuzzCrash)
	}
	return b.String()
}

func (r *Results) unexpectedFailuresLocked() int {
	n := 0
	for k, v := range r.Failures {
		if !strings.HasSuffix(k, "(expected)") {
			n += v
		}
	}
	return n
}

// supervisor tells the processes the runner stops from those that crash.
type supervisor struct {
	mu       sync.Mutex
	procs    map[*run.Process]string
	expected map[*run.Process]bool
}

func newSupervisor() *supervisor {
	return &supervisor{procs: map[*run.Process]string{}, expected: map[*run.Process]bool{}}
}

func (s *supervisor) watch(name string, p *run.Process) {
	s.mu.Lock()
	s.procs[p] = name
	s.mu.Unlock()
}

// stop ends p on purpose: gracefully, or killed.
func (s *supervisor) stop(p *run.Process, kill bool) {
	s.mu.Lock()
	s.expected[p] = true
	s.mu.Unlock()
	if kill {
		p.Kill()
	} else {
		p.Stop()
	}
}

func (s *supervisor) crashes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for p, name := range s.procs {
		if exited, err := p.Exited(); exited && !s.expected[p] {
			out = append(out, fmt.Sprintf("%s exited (%v); log tail:\n%s", name, err, p.Log(1500)))
		}
	}
	slices.Sort(out)
	return out
}

// expectAll counts every process's exit from now on as on purpose, before
// the run stops them all.
func (s *supervisor) expectAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.procs {
		s.expected[p] = true
	}
}
