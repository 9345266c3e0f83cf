package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"github.com/miekg/dns"
)

// CoreDNS is a running bin/coredns, optionally pinned to CPUs.
type CoreDNS struct {
	*run.Process
	PID   int
	Ports map[string]int
	// MetricsURL and PprofURL are served by the admin block.
	MetricsURL, PprofURL string
}

// Addr is the loopback address of the block listening on the named port.
func (c *CoreDNS) Addr(port string) string { return "127.0.0.1:" + strconv.Itoa(c.Ports[port]) }

// adminBlock holds what is not measured: metrics, pprof and a trivial
// answerer. Measured blocks carry only their plugin, so none of them pays for
// the prometheus plugin's per-query accounting.
const adminBlock = `.:{$ADMIN_PORT} {
    bind 127.0.0.1
    prometheus 127.0.0.1:{$METRICS_PORT}
    pprof 127.0.0.1:{$PPROF_PORT}
    whoami
}
`

// StartCoreDNS writes corefile (adminBlock is added) to dir/<name>.Corefile
// and starts bin/coredns on it, pinned with taskset to cpus unless empty.
// Every {$X_PORT} in ports gets a free port. It returns once the metrics
// endpoint answers; the plugins may still be syncing (see WaitAnswer).
func StartCoreDNS(ctx context.Context, dir, name, corefile, cpus string, ports []string, env []string) (*CoreDNS, error) {
	bin, err := run.Bin("coredns")
	if err != nil {
		return nil, err
	}
	c := &CoreDNS{Ports: map[string]int{}}
	for _, p := range append([]string{"ADMIN_PORT", "METRICS_PORT", "PPROF_PORT"}, ports...) {
		if c.Ports[p], err = run.FreePort(); err != nil {
			return nil, err
		}
		env = append(env, p+"="+strconv.Itoa(c.Ports[p]))
	}
	conf := filepath.Join(dir, name+".Corefile")
	if err := os.WriteFile(conf, []byte(adminBlock+corefile), 0o644); err != nil {
		return nil, err
	}
	pidfile := filepath.Join(dir, name+".pid")
	_ = os.Remove(pidfile)
	args := []string{"-conf", conf, "-pidfile", pidfile}
	cmd := bin
	if cpus != "" {
		cmd, args = "taskset", append([]string{"-c", cpus, bin}, args...)
	}
	if c.Process, err = run.Start(cmd, args, env, filepath.Join(dir, name+".log")); err != nil {
		return nil, err
	}
	c.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", c.Ports["METRICS_PORT"])
	c.PprofURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", c.Ports["PPROF_PORT"])
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := run.WaitHTTP(wctx, c.MetricsURL, c.Process); err != nil {
		c.Stop()
		return nil, fmt.Errorf("coredns %s: %w", name, err)
	}
	if c.PID, err = readPID(wctx, pidfile); err != nil {
		c.Stop()
		return nil, fmt.Errorf("coredns %s: %w", name, err)
	}
	return c, nil
}

// readPID waits for CoreDNS's pid file, written once every server started.
func readPID(ctx context.Context, path string) (int, error) {
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return strconv.Atoi(strings.TrimSpace(string(b)))
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("pid file: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Query asks addr one question over UDP.
func Query(addr, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	c := &dns.Client{Timeout: 2 * time.Second, UDPSize: dns.DefaultMsgSize}
	r, _, err := c.Exchange(m, addr)
	return r, err
}

// WaitAnswer polls addr until name has want A records.
func WaitAnswer(ctx context.Context, addr, name string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		r, err := Query(addr, name, dns.TypeA)
		switch {
		case err != nil:
			last = err.Error()
		case len(r.Answer) == want:
			return nil
		default:
			last = fmt.Sprintf("%s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s A from %s: want %d records, last answer %s after %v", name, addr, want, last, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
