package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/globalmirror/globalmirror/test/run"
	"k8s.io/client-go/kubernetes"
)

// Machine describes where the numbers come from.
type Machine struct {
	CPUs     int
	CPUModel string
	MemTotal string
	Kernel   string
	// Load averages when the run started and ended.
	LoadStart, LoadEnd string

	Go, CoreDNS, Kubernetes, ClientGo, Dnsperf string
}

// Describe reads the machine and the tools' versions; client is any cluster.
func Describe(ctx context.Context, goCmd string, client kubernetes.Interface) Machine {
	m := Machine{CPUs: runtime.NumCPU(), LoadStart: LoadAvg()}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	m.MemTotal = procField("/proc/meminfo", "MemTotal")
	if kb, err := strconv.ParseFloat(strings.TrimSuffix(m.MemTotal, " kB"), 64); err == nil {
		m.MemTotal = fmt.Sprintf("%.1f GiB", kb/(1<<20))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.Go = firstLine(exec.CommandContext(ctx, goCmd, "env", "GOVERSION"))
	if p, err := run.Bin("coredns"); err == nil {
		m.CoreDNS = strings.Join(strings.Fields(strings.ReplaceAll(outputOf(exec.CommandContext(ctx, p, "-version")), "\n", " ")), " ")
	}
	if v, err := client.Discovery().ServerVersion(); err == nil {
		m.Kubernetes = v.GitVersion
	}
	m.ClientGo = firstLine(exec.CommandContext(ctx, goCmd, "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go"))
	for line := range strings.Lines(outputOf(exec.CommandContext(ctx, "dnsperf", "-h"))) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version "); ok {
			m.Dnsperf = v
		}
	}
	return m
}

// LoadAvg is /proc/loadavg's 1, 5 and 15 minute averages.
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func procField(path, key string) string {
	b, _ := os.ReadFile(path)
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func outputOf(cmd *exec.Cmd) string {
	out, _ := cmd.CombinedOutput() // dnsperf -h exits 1
	return string(out)
}

func firstLine(cmd *exec.Cmd) string {
	out, err := cmd.Output()
	if err != nil {
		return fmt.Sprintf("? (%v)", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
