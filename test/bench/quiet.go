package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cpuSamples are the machine's busy CPU time (cpuTicks), read every
// interval from sampleCPU's call until its ctx ends: a few reads a second,
// where reading at every event measured would compete with what it measures.
type cpuSamples struct {
	mu    sync.Mutex
	at    []time.Time
	ticks []int64
}

// sampleCPU samples the machine's busy CPU time every interval, the first
// sample at once.
func sampleCPU(ctx context.Context, interval time.Duration) (*cpuSamples, error) {
	c := &cpuSamples{}
	if err := c.sample(); err != nil {
		return nil, err
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = c.sample() // the first read worked: so do these
			}
		}
	}()
	return c, nil
}

func (c *cpuSamples) sample() error {
	ticks, err := cpuTicks()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.ticks = append(c.at, time.Now()), append(c.ticks, ticks)
	return nil
}

// busy is the share of the machine's CPUs busy from the first sample to
// the first one at or after until (the last, if none is); 0 over no time.
func (c *cpuSamples) busy(until time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := min(len(c.at)-1, sort.Search(len(c.at), func(i int) bool { return !c.at[i].Before(until) }))
	span := c.at[i].Sub(c.at[0]).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(c.ticks[i]-c.ticks[0]) / clockTicks / span / float64(runtime.NumCPU())
}

// clockTicks is USER_HZ, the unit of /proc CPU times; 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// cpuTicks is the busy time of every CPU so far, from /proc/stat: everything
// but idle and iowait.
func cpuTicks() (int64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, s := range f[1:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		busy += v
	}
	return busy, nil
}

// proc is a process as /proc/<pid>/stat shows it: its command name, its
// parent and its user+system CPU time so far, in clock ticks.
type proc struct {
	comm  string
	ppid  int
	ticks int64
}

// procStat reads /proc/<pid>/stat.
func procStat(pid int) (proc, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, err
	}
	// pid (comm) state ppid ... utime stime: comm may hold spaces.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return proc{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 13 {
		return proc{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return proc{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return proc{comm: string(b[open+1 : end]), ppid: ppid, ticks: ut + st}, nil
}

// processes reads every process, by pid.
func processes() map[int]proc {
	out := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if p, err := procStat(pid); err == nil { // else gone meanwhile
				out[pid] = p
			}
		}
	}
	return out
}

// QuietResult says how long WaitQuiet waited and how busy the machine was
// over its last window.
type QuietResult struct {
	Waited time.Duration
	// Busy is the CPUs' busy time over the last window, in CPUs (1 = one
	// whole CPU).
	Busy float64
	// Top names the busiest processes of the last window.
	Top string
	// Quiet is false when max passed first.
	Quiet bool
	// Limit is the CPUs it waited to be under.
	Limit float64
}

// WaitQuiet waits until the whole machine used less than limit CPUs over a
// window, or max has passed. After loading tens of thousands of objects the
// control plane works on for minutes (garbage collector graph, watch caches,
// Go GC of large heaps); throughput measured meanwhile measures that.
func WaitQuiet(ctx context.Context, limit float64, window, max time.Duration) (QuietResult, error) {
	start := time.Now()
	for {
		t0, err := cpuTicks()
		if err != nil {
			return QuietResult{}, err
		}
		p0 := processes()
		w0 := time.Now()
		if err := pause(ctx, window); err != nil {
			return QuietResult{}, err
		}
		t1, err := cpuTicks()
		if err != nil {
			return QuietResult{}, err
		}
		p1 := processes()
		r := QuietResult{
			Waited: time.Since(start),
			Busy:   float64(t1-t0) / clockTicks / time.Since(w0).Seconds(),
			Top:    topProcesses(p0, p1, time.Since(w0), 3),
			Limit:  limit,
		}
		if r.Busy < limit {
			r.Quiet = true
			return r, nil
		}
		if time.Since(start) >= max {
			return r, nil
		}
	}
}

// topProcesses names the n processes that used the most CPU between two
// readings, with their share of one CPU.
func topProcesses(before, after map[int]proc, d time.Duration, n int) string {
	var used []proc
	for pid, a := range after {
		if b, ok := before[pid]; ok && a.ticks > b.ticks {
			used = append(used, proc{comm: a.comm, ticks: a.ticks - b.ticks})
		}
	}
	slices.SortFunc(used, func(a, b proc) int { return int(b.ticks - a.ticks) })
	var parts []string
	for _, p := range used[:min(n, len(used))] {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", p.comm, 100*float64(p.ticks)/clockTicks/d.Seconds()))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// descendants lists the processes below pid (children, grandchildren, ...).
func descendants(pid int) []int {
	children := map[int][]int{}
	for p, pr := range processes() {
		children[pr.ppid] = append(children[pr.ppid], p)
	}
	out := slices.Clone(children[pid])
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// PinOthers moves every process this one started (the control planes, the
// controller), except those in keep, with all their threads, onto cpus, so
// that the CPUs CoreDNS is pinned to run CoreDNS alone. The returned func
// lets them use every CPU again.
func PinOthers(ctx context.Context, cpus string, keep ...int) (restore func(), err error) {
	return pin(ctx, func(pid int, _ string) string {
		if slices.Contains(keep, pid) {
			return ""
		}
		return cpus
	})
}

// controlPlaneCommands are the processes of a control plane (as /proc names
// them, cut to 15 bytes).
var controlPlaneCommands = []string{"kube-apiserver", "etcd", "kube-controll"}

// PinControlPlane gives the control planes this process started the first
// half of the CPUs and everything else, this process and what it starts
// from now on included, the other half, as a cluster's control plane has
// machines of its own: their writes are then bounded by what the API server
// takes, not by the CPU the other processes of a one-machine bench use. On
// one CPU it does nothing. The returned func lets all use every CPU again.
func PinControlPlane(ctx context.Context) (restore func(), err error) {
	n := runtime.NumCPU()
	if n < 2 {
		return func() {}, nil
	}
	plane, rest := cpuList(0, n/2), cpuList(n/2, n)
	return pin(ctx, func(pid int, comm string) string {
		if slices.ContainsFunc(controlPlaneCommands, func(c string) bool { return strings.HasPrefix(comm, c) }) {
			return plane
		}
		return rest
	}, os.Getpid())
}

// cpuList is the taskset list of CPUs from to to-1.
func cpuList(from, to int) string {
	if to-from == 1 {
		return strconv.Itoa(from)
	}
	return fmt.Sprintf("%d-%d", from, to-1)
}

// pin sets the CPUs of every process this one started, and of extra, with
// all their threads, to what cpusOf says ("" leaves one as it is).
func pin(ctx context.Context, cpusOf func(pid int, comm string) string, extra ...int) (restore func(), err error) {
	online, err := os.ReadFile("/sys/devices/system/cpu/online") // a CPU list: 0-1
	if err != nil {
		return nil, err
	}
	everyCPU := strings.TrimSpace(string(online))
	var moved []int
	setAffinity := func(pid int, list string) error {
		out, err := exec.CommandContext(ctx, "taskset", "-a", "-p", "-c", list, strconv.Itoa(pid)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset -a -p -c %s %d: %w: %s", list, pid, err, bytes.TrimSpace(out))
		}
		return nil
	}
	restore = func() {
		for _, pid := range moved {
			_ = setAffinity(pid, everyCPU) // it may have exited meanwhile
		}
	}
	procs := processes()
	for _, pid := range append(descendants(os.Getpid()), extra...) {
		cpus := cpusOf(pid, procs[pid].comm)
		if cpus == "" {
			continue
		}
		if err := setAffinity(pid, cpus); err != nil {
			if _, statErr := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); statErr != nil {
				continue // exited meanwhile (taskset, a helper)
			}
			restore()
			return nil, err
		}
		moved = append(moved, pid)
	}
	return restore, nil
}
