// Package run starts the project's own binaries (bin/coredns,
// bin/globalmirror-controller), and localkube's kube-controller-manager, as
// supervised child processes for end-to-end tests, the demo and the
// benchmarks: free loopback ports, logs to files, children that die with
// their parent, and a scraper for their metrics.
package run

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// BinEnv names the directory holding the binaries `make build` writes.
const BinEnv = "GLOBALMIRROR_BIN"

// Bin is the path of one of the project's binaries, or an error that says how
// to build it.
func Bin(name string) (string, error) {
	dir := os.Getenv(BinEnv)
	if dir == "" {
		return "", fmt.Errorf("$%s is not set: run the tests with `make test` (or `make build` and export %s=$PWD/bin)", BinEnv, BinEnv)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s: %w (run `make build`)", p, err)
	}
	return p, nil
}

// Process is a running child process.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// Start runs bin with args, extra environment and output to logPath. The child
// is killed if this process dies (Pdeathsig), so nothing outlives a test.
func Start(bin string, args, env []string, logPath string) (*Process, error) {
	return StartWithDeathSignal(bin, args, env, logPath, syscall.SIGKILL)
}

// StartWithDeathSignal is Start with the signal the child gets when this
// process dies: SIGTERM for `podman run`, which passes it on to its container,
// where SIGKILL would end the client and leave the container running.
func StartWithDeathSignal(bin string, args, env []string, logPath string, sig syscall.Signal) (*Process, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Process{Name: filepath.Base(bin), LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop asks the process to end (SIGTERM) and kills it after 10 s.
func (p *Process) Stop() { _ = p.StopWithin(10 * time.Second) }

// StopWithin asks the process group to end (SIGTERM), kills it after grace,
// and says so: an error means the process had to be killed.
func (p *Process) StopWithin(grace time.Duration) error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not stop within %v; killed", p.Name, grace)
	}
}

// PID is the process's ID (with taskset, the pinned program's: taskset
// execs it).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Kill ends the process at once, as a crash would.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Log returns the last n bytes of the process's log, for failure messages.
func (p *Process) Log(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// WaitHTTP polls url until it answers 200 or ctx ends; p, if given, failing
// first ends the wait early with its log.
func WaitHTTP(ctx context.Context, url string, p *Process) error {
	return WaitHTTPEvery(ctx, url, p, 50*time.Millisecond)
}

// WaitHTTPEvery is WaitHTTP asking every interval, for callers that time
// how long the wait took.
func WaitHTTPEvery(ctx context.Context, url string, p *Process, interval time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	return poll(ctx, p, interval, url+" answered 200", func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

// poll calls try every interval until it returns nil, failing when ctx ends
// or p, if given, exits first, with what it awaited, try's last error and
// p's log.
func poll(ctx context.Context, p *Process, interval time.Duration, what string, try func() error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		if p != nil {
			if exited, werr := p.Exited(); exited {
				return fmt.Errorf("%s exited (%v) before %s:\n%s", p.Name, werr, what, p.Log(4000))
			}
		}
		select {
		case <-ctx.Done():
			if p != nil {
				return fmt.Errorf("waiting until %s: %w; last: %v\n%s", what, ctx.Err(), err, p.Log(4000))
			}
			return fmt.Errorf("waiting until %s: %w; last: %v", what, ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
