package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The asker is a client pod that never stops asking, from before the first
// install to the end of the test: two containers running test/cmd/resolve
// -watch, one over UDP and one over TCP (glibc told so by RES_OPTIONS, Go
// by its dialer), each asking every query with glibc's and with Go's
// resolver in turn, one lookup every askEvery, and writing each result with
// when it was asked into a file of a volume they share. The test reads the
// files between its steps and judges each lookup against what the cluster
// said at that moment (truth): failed, wrong, or stalled.

const (
	askerPod = "asker"
	askEvery = 40 * time.Millisecond // per container: 50 lookups a second in all
	// stalledLookup is a lookup answered, but only after its resolver
	// waited out its timeout (glibc's and Go's: 5 s) and asked again: a
	// query or its answer was lost.
	stalledLookup = 4 * time.Second
)

// askerSpec runs the asker's containers on queries (LIB/TYPE/NAME, each
// asked with both libraries).
func (s *install) askerSpec(queries []string) *corev1.Pod {
	var qs []string
	for _, q := range queries {
		qs = append(qs, "glibc/"+q, "go/"+q)
	}
	container := func(network string, env ...corev1.EnvVar) corev1.Container {
		args := []string{"resolve", "-watch", "/lookups/" + network + ".jsonl", "-every", askEvery.String()}
		if network == "tcp" {
			args = append(args, "-tcp")
		}
		return corev1.Container{
			Name: network, Image: s.node.Images["client"], ImagePullPolicy: corev1.PullNever,
			Command: append(args, qs...), Env: env,
			VolumeMounts: []corev1.VolumeMount{{Name: "lookups", MountPath: "/lookups"}},
		}
	}
	spec := s.podSpec("unused", "client")
	spec.Containers = []corev1.Container{container("udp"), container("tcp", corev1.EnvVar{Name: "RES_OPTIONS", Value: "use-vc"})}
	spec.Volumes = []corev1.Volume{{Name: "lookups", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: askerPod}, Spec: spec}
}

// lookup is one line of the asker's files.
type lookup struct {
	At     int64   `json:"at"` // Unix milliseconds
	Millis float64 `json:"ms"`
	result
	network string
}

func (l lookup) asked() time.Time { return time.UnixMilli(l.At) }
func (l lookup) answered() time.Time {
	return l.asked().Add(time.Duration(l.Millis * float64(time.Millisecond)))
}

// askerLog reads the asker's files as they grow.
type askerLog struct {
	s      *install
	offset map[string]int // bytes read of each file
	all    []lookup
}

// readPast reads the asker's files until each holds a lookup asked after
// t: each container asks one lookup at a time, so every lookup asked
// before t is then written, however long it took.
func (a *askerLog) readPast(t time.Time) {
	a.s.t.Helper()
	a.s.eventually("the asker's lookups past "+t.Format("15:04:05.000"), func(context.Context) string {
		a.read()
		for _, network := range []string{"udp", "tcp"} {
			if !slices.ContainsFunc(a.all, func(l lookup) bool { return l.network == network && l.asked().After(t) }) {
				return "no " + network + " lookup asked after it yet"
			}
		}
		return ""
	})
}

// read reads what the asker wrote since the last read.
func (a *askerLog) read() {
	a.s.t.Helper()
	for _, network := range []string{"udp", "tcp"} {
		out, err := a.s.node.ExecIn(a.s.ctx, ns, askerPod, "udp", "tail", "-c", "+"+strconv.Itoa(a.offset[network]+1), "/lookups/"+network+".jsonl")
		if err != nil {
			a.s.t.Fatalf("reading the asker's %s lookups: %v", network, err)
		}
		// Only whole lines: the asker may be writing one.
		end := strings.LastIndexByte(out, '\n') + 1
		a.offset[network] += end
		sc := bufio.NewScanner(strings.NewReader(out[:end]))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l lookup
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				a.s.t.Fatalf("the asker's %s lookups: %v: %s", network, err, sc.Text())
			}
			l.network = network
			a.all = append(a.all, l)
		}
	}
}

// truth is what the cluster says at each moment: the expected results of
// every query, each valid over a span. A change of the world (the global
// service appears; reverse names are switched on) opens a new span while
// the old one stays valid until the answers have all followed.
type truth struct {
	mu    sync.Mutex
	spans []span
}

type span struct {
	from, to time.Time // to zero: still valid
	want     answers
}

// now makes want what the cluster says from now on; what it said before
// stays right too until settled.
func (tr *truth) now(want answers) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.spans = append(tr.spans, span{from: time.Now(), want: want})
}

// settled ends every span but the last: the answers have followed.
func (tr *truth) settled() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i := range tr.spans[:len(tr.spans)-1] {
		if tr.spans[i].to.IsZero() {
			tr.spans[i].to = time.Now()
		}
	}
}

// right reports whether l is a result the cluster gave at some moment
// while l was asked.
func (tr *truth) right(l lookup) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, sp := range tr.spans {
		if l.answered().Before(sp.from) || !sp.to.IsZero() && l.asked().After(sp.to) {
			continue
		}
		if w, ok := sp.want[l.Query]; ok && w.matches(l.result) {
			return true
		}
	}
	return false
}

// tally is what a step's lookups came to.
type tally struct {
	Step                        string
	Took                        time.Duration
	Asked, UDP, TCP             int
	Failed, Wrong, Stalled      int
	FailedSamples, WrongSamples []string
	StalledSamples              []string
	// NoServer: the step leaves no server by design; from the first failed
	// lookup to the end of the last is how long.
	NoServer                    bool
	NoServerFrom, NoServerUntil time.Time
}

func (t tally) String() string {
	out := fmt.Sprintf("%s: %d lookups (%d over UDP, %d over TCP), %d failed, %d wrong, %d stalled (%v or more), in %v",
		t.Step, t.Asked, t.UDP, t.TCP, t.Failed, t.Wrong, t.Stalled, stalledLookup, t.Took.Round(100*time.Millisecond))
	if t.Failed > 0 {
		out += fmt.Sprintf("; failed from %s to %s (%v)", t.NoServerFrom.Format("15:04:05.000"), t.NoServerUntil.Format("15:04:05.000"),
			t.NoServerUntil.Sub(t.NoServerFrom).Round(10*time.Millisecond))
	}
	if len(t.StalledSamples) > 0 {
		out += "; stalled: " + strings.Join(t.StalledSamples, "; ")
	}
	return out
}

// markdown is the tallies as the chart's README shows them.
func markdown(ts []tally) string {
	var b strings.Builder
	b.WriteString("| step | lookups | failed | wrong | stalled 5 s | took |\n|---|---:|---:|---:|---:|---:|\n")
	for _, t := range ts {
		failed := strconv.Itoa(t.Failed)
		if t.NoServer && t.Failed > 0 {
			failed += fmt.Sprintf(" (no server for %v)", t.NoServerUntil.Sub(t.NoServerFrom).Round(100*time.Millisecond))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %v |\n", t.Step, t.Asked, failed, t.Wrong, t.Stalled, t.Took.Round(100*time.Millisecond))
	}
	return b.String()
}

// judge tallies the lookups asked in [from, to).
func (a *askerLog) judge(tr *truth, step string, from, to time.Time) tally {
	t := tally{Step: step, Took: to.Sub(from)}
	for _, l := range a.all {
		if l.asked().Before(from) || !l.asked().Before(to) {
			continue
		}
		t.Asked++
		if l.network == "udp" {
			t.UDP++
		} else {
			t.TCP++
		}
		desc := fmt.Sprintf("%s %s over %s after %.0f ms", l.asked().Format("15:04:05.000"), l.Query, l.network, l.Millis)
		switch {
		case l.Err != "":
			t.Failed++
			if t.NoServerFrom.IsZero() {
				t.NoServerFrom = l.asked()
			}
			t.NoServerUntil = l.answered()
			if len(t.FailedSamples) < 5 {
				t.FailedSamples = append(t.FailedSamples, desc+": "+l.Err)
			}
		case !tr.right(l):
			t.Wrong++
			if len(t.WrongSamples) < 5 {
				t.WrongSamples = append(t.WrongSamples, fmt.Sprintf("%s: %+v", desc, l.result))
			}
		case time.Duration(l.Millis*float64(time.Millisecond)) >= stalledLookup:
			t.Stalled++
			if len(t.StalledSamples) < 5 {
				t.StalledSamples = append(t.StalledSamples, desc)
			}
		}
	}
	return t
}

// matches reports whether got is w: the same records (any order), the
// same kind of negative answer; where w lists alternatives (Any), one of
// them.
func (w result) matches(got result) bool {
	if got.Err != "" {
		return false
	}
	if len(w.Any) > 0 {
		return slices.ContainsFunc(w.Any, func(alt []string) bool { return slices.Equal(alt, got.Records) })
	}
	return slices.Equal(w.Records, got.Records) && w.NotFound == got.NotFound && w.NXDomain == got.NXDomain
}
