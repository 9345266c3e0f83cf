package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

var errNoBenchmarks = errors.New("no benchmark matched")

// GoBench is one Go benchmark: the median of each unit over -count runs.
type GoBench struct {
	Pkg, Name string
	Runs      int
	Values    map[string]float64 // by unit: ns/op, B/op, allocs/op, custom ones
}

// GoBenchSpec is one `go test -bench` invocation.
type GoBenchSpec struct {
	Pkg       string // import path below the module, e.g. ./plugin/global
	Pattern   string
	Benchtime string // empty: go test's default
	Count     int
}

// CompileTests builds the test binaries of pkgs into dir, so a broken
// benchmark fails before the long phases run.
func CompileTests(ctx context.Context, goCmd, dir string, pkgs ...string) error {
	for _, p := range pkgs {
		cmd := exec.CommandContext(ctx, goCmd, "test", "-c", "-o", testBinary(dir, p), p)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go test -c %s: %w\n%s", p, err, out)
		}
	}
	return nil
}

func testBinary(dir, pkg string) string {
	return filepath.Join(dir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "_")+".test")
}

// RunGoBench runs one spec's compiled binary in its package directory, Count
// times with -count 1, so that repetitions of sub-benchmarks interleave
// rather than run back to back; the raw output is kept in dir.
func RunGoBench(ctx context.Context, dir string, s GoBenchSpec) ([]GoBench, error) {
	args := []string{"-test.run", "^$", "-test.bench", s.Pattern, "-test.benchmem", "-test.count", "1"}
	if s.Benchtime != "" {
		args = append(args, "-test.benchtime", s.Benchtime)
	}
	var out bytes.Buffer
	for range max(s.Count, 1) {
		cmd := exec.CommandContext(ctx, testBinary(dir, s.Pkg), args...)
		cmd.Dir = s.Pkg
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		_ = os.WriteFile(testBinary(dir, s.Pkg)+"-"+unsafeInName.ReplaceAllString(s.Pattern, "_")+".txt", out.Bytes(), 0o644)
		if err != nil {
			return nil, fmt.Errorf("%s -bench %s: %w\n%s", s.Pkg, s.Pattern, err, out.String())
		}
	}
	res := parseGoBench(s.Pkg, out.String())
	if len(res) == 0 {
		return nil, fmt.Errorf("%s -bench %s: %w", s.Pkg, s.Pattern, errNoBenchmarks)
	}
	return res, nil
}

// unsafeInName is what a file name made of a pattern has in place of "_".
var unsafeInName = regexp.MustCompile(`[^a-zA-Z0-9]`)

// parseGoBench reads `BenchmarkX/sub-2  N  v unit  v unit ...` lines, in
// order of first appearance, with medians over repeated lines.
func parseGoBench(pkg, out string) []GoBench {
	var order []string
	runs := map[string]map[string][]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the GOMAXPROCS suffix
			}
		}
		if runs[name] == nil {
			runs[name] = map[string][]float64{}
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				runs[name][f[i+1]] = append(runs[name][f[i+1]], v)
			}
		}
	}
	var res []GoBench
	for _, name := range order {
		b := GoBench{Pkg: pkg, Name: strings.TrimPrefix(name, "Benchmark"), Values: map[string]float64{}}
		for unit, vs := range runs[name] {
			b.Values[unit] = Median(vs)
			b.Runs = max(b.Runs, len(vs))
		}
		res = append(res, b)
	}
	return res
}
