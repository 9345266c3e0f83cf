package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Perf is one dnsperf run.
type Perf struct {
	QPS       float64
	Completed int
	Lost      int
	// NonNoError counts responses with another rcode than NOERROR.
	NonNoError int
	// RespBytes is dnsperf's average response size.
	RespBytes float64
	// CPUPerQuery is the server's CPU time (user+system) per completed query.
	CPUPerQuery time.Duration
	// P50 and P99 are per-query latencies, only from verbose runs.
	P50, P99 time.Duration
}

// Dnsperf is how the load generator runs.
type Dnsperf struct {
	CPUs     string // taskset list; empty: unpinned
	Clients  int    // -c
	Inflight int    // -q
}

// Run sends the queries in file to addr's port for d (whole seconds), closed
// loop. Verbose runs log every response to out and report latency
// percentiles; dnsperf is slower then, so QPS comes from quiet runs. pid, if
// not zero, is the server, whose CPU time is read around the run.
func (p Dnsperf) Run(ctx context.Context, port int, file string, d time.Duration, verbose bool, out string, pid int) (Perf, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	args := []string{"-s", "127.0.0.1", "-p", strconv.Itoa(port), "-d", file,
		"-c", strconv.Itoa(p.Clients), "-q", strconv.Itoa(p.Inflight), "-l", strconv.Itoa(secs)}
	if verbose {
		args = append(args, "-v")
	}
	name := "dnsperf"
	if p.CPUs != "" {
		name, args = "taskset", append([]string{"-c", p.CPUs, "dnsperf"}, args...)
	}
	f, err := os.Create(out)
	if err != nil {
		return Perf{}, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cpu0, err := CPUTime(pid)
	if err != nil {
		return Perf{}, err
	}
	if err := cmd.Run(); err != nil {
		return Perf{}, fmt.Errorf("dnsperf (output in %s): %w", out, err)
	}
	cpu1, err := CPUTime(pid)
	if err != nil {
		return Perf{}, err
	}
	r, err := parseDnsperf(out, verbose)
	if err != nil {
		return r, fmt.Errorf("%s: %w", out, err)
	}
	if r.Completed > 0 {
		r.CPUPerQuery = (cpu1 - cpu0) / time.Duration(r.Completed)
	}
	return r, nil
}

// parseDnsperf reads dnsperf's statistics and, for verbose runs, its
// per-response lines: "> NOERROR name A 0.000123".
func parseDnsperf(path string, verbose bool) (Perf, error) {
	f, err := os.Open(path)
	if err != nil {
		return Perf{}, err
	}
	defer f.Close()
	var r Perf
	var lat []float64
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if verbose && strings.HasPrefix(line, "> ") {
			fields := strings.Fields(line)
			if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
				lat = append(lat, v)
			}
			continue
		}
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		switch key {
		case "Queries per second":
			r.QPS, err = strconv.ParseFloat(fields[0], 64)
			found = err == nil
		case "Queries completed":
			r.Completed, _ = strconv.Atoi(fields[0])
		case "Queries lost":
			r.Lost, _ = strconv.Atoi(fields[0])
		case "Response codes":
			// "NOERROR 1234 (100.00%), NXDOMAIN 5 (0.01%)"
			for i := 0; i+1 < len(fields); i += 3 {
				if n, err := strconv.Atoi(fields[i+1]); err == nil && fields[i] != "NOERROR" {
					r.NonNoError += n
				}
			}
		case "Average packet size":
			// "request 27, response 85"
			if i := slices.Index(fields, "response"); i >= 0 && i+1 < len(fields) {
				r.RespBytes, _ = strconv.ParseFloat(fields[i+1], 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	if !found {
		return r, fmt.Errorf("no \"Queries per second\" in dnsperf's output")
	}
	if verbose {
		if len(lat) == 0 {
			return r, fmt.Errorf("verbose run without per-query lines")
		}
		slices.Sort(lat)
		r.P50 = seconds(Quantile(lat, 0.50))
		r.P99 = seconds(Quantile(lat, 0.99))
	}
	return r, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// CPUTime is a process's user+system CPU time (0 for pid 0).
func CPUTime(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	p, err := procStat(pid)
	return time.Duration(p.ticks) * time.Second / clockTicks, err
}
