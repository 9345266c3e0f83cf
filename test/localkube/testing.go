package localkube

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// StartT starts the named clusters for a test and stops them when it ends. It
// fails the test, never skips it, when the clusters cannot start. When the test
// failed, it logs the tail of each control plane log first. For clusters shared
// by a package's tests, call Start and Stop in TestMain instead.
func StartT(t testing.TB, names ...string) *Env {
	t.Helper()
	return StartTWith(t, Options{Clusters: names})
}

// StartTWith is StartT with more options than the clusters' names; their
// directory, logger and signal handling are StartT's.
func StartTWith(t testing.TB, opts Options) *Env {
	t.Helper()
	dir := t.TempDir()
	opts.Dir, opts.Logger, opts.StopOnSignal = dir, TestLogger(t), true
	env, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("localkube: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(LogTails(dir, 30))
		}
		if err := env.Stop(); err != nil {
			t.Errorf("localkube: stop: %v", err)
		}
	})
	return env
}

// Main runs a test package whose tests share the named clusters: call it from
// TestMain as os.Exit(localkube.Main(m, &env, "source", "east")). It starts the
// clusters into *env, runs the tests and stops them. Under -short it starts
// nothing and leaves *env nil; the tests that need clusters skip themselves
// there. Clusters that do not start fail the package.
func Main(m *testing.M, env **Env, names ...string) int {
	flag.Parse() // testing.Short needs the flags before m.Run parses them
	if !testing.Short() {
		e, err := Start(context.Background(), Options{
			Clusters:     names,
			Logger:       StderrLogger(false),
			StopOnSignal: true,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "localkube: clusters did not start:", err)
			return 1
		}
		defer func() { _ = e.Stop() }()
		*env = e
	}
	return m.Run()
}

// LogTails returns the last n lines of every control plane log under dir.
func LogTails(dir string, n int) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	var b strings.Builder
	for _, path := range append(logs, more...) {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
		lines = lines[max(0, len(lines)-n):]
		b.WriteString("==> " + path + " <==\n")
		b.Write(bytes.Join(lines, []byte("\n")))
		b.WriteString("\n")
	}
	return b.String()
}

// StderrLogger logs warnings and errors to stderr, progress (Info) too when
// verbose: the commands' -v.
func StderrLogger(verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// TestLogger logs at Info and above to t's log.
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
