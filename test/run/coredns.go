package run

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CoreDNS is a running bin/coredns.
type CoreDNS struct {
	*Process
	// Addr is the DNS server's host:port, for UDP and TCP.
	Addr string
	// MetricsURL is its Prometheus endpoint.
	MetricsURL string
	// Ports are the ports handed to the Corefile, by variable name.
	Ports map[string]int
}

// CoreDNSOptions say how to start CoreDNS.
type CoreDNSOptions struct {
	// Corefile may use {$DNS_PORT}, {$HEALTH_PORT}, {$READY_PORT},
	// {$METRICS_PORT} and any variable in Env; the ports are picked free, and
	// DNS_PORT may be fixed with Ports["DNS_PORT"]. It must include the
	// `ready` and `prometheus` plugins on 127.0.0.1:{$READY_PORT} /
	// {$METRICS_PORT}, as the block the func Corefile writes does.
	Corefile string
	// Dir receives the Corefile and coredns.log.
	Dir string
	// Env is extra environment, e.g. SOURCE_KUBECONFIG=...
	Env []string
	// Ports fixes some of the ports by variable name; the rest are picked free.
	Ports map[string]int
	// ExtraPorts are more variables to fill with free ports (a second server block).
	ExtraPorts []string
	// WaitReady waits for the ready plugin (every plugin's Ready() true) and
	// for DNS answers over UDP and TCP when set; otherwise Start waits only
	// until the metrics endpoint answers.
	WaitReady bool
	// Name names the files in Dir, <Name>.Corefile and <Name>.log, and the
	// process; empty: Corefile, coredns.log and coredns.
	Name string
	// CPUs pins CoreDNS to these CPUs (a taskset list, e.g. "0"); empty:
	// every CPU.
	CPUs string
	// StartTimeout bounds the wait for the process to be up (default 60 s).
	StartTimeout time.Duration
	// NoWait returns as soon as the process is started, for callers that
	// time its start themselves; WaitReady is then ignored.
	NoWait bool
}

// StartCoreDNS writes the Corefile and starts bin/coredns with it.
func StartCoreDNS(ctx context.Context, o CoreDNSOptions) (*CoreDNS, error) {
	bin, err := Bin("coredns")
	if err != nil {
		return nil, err
	}
	ports := map[string]int{}
	for _, name := range append([]string{"DNS_PORT", "HEALTH_PORT", "READY_PORT", "METRICS_PORT"}, o.ExtraPorts...) {
		if _, done := ports[name]; done {
			continue
		}
		if p, ok := o.Ports[name]; ok {
			ports[name] = p
			continue
		}
		if ports[name], err = FreePort(); err != nil {
			return nil, err
		}
	}
	path, logName := filepath.Join(o.Dir, "Corefile"), "coredns.log"
	if o.Name != "" {
		path, logName = filepath.Join(o.Dir, o.Name+".Corefile"), o.Name+".log"
	}
	if err := os.WriteFile(path, []byte(o.Corefile), 0o644); err != nil {
		return nil, err
	}
	env := append([]string{}, o.Env...)
	for name, p := range ports {
		env = append(env, name+"="+strconv.Itoa(p))
	}
	cmd, args := bin, []string{"-conf", path}
	if o.CPUs != "" {
		// taskset execs CoreDNS: the process, and its PID, are CoreDNS's.
		cmd, args = "taskset", append([]string{"-c", o.CPUs, bin}, args...)
	}
	p, err := Start(cmd, args, env, filepath.Join(o.Dir, logName))
	if err != nil {
		return nil, err
	}
	p.Name = cmp.Or(o.Name, "coredns")
	c := &CoreDNS{
		Process:    p,
		Addr:       "127.0.0.1:" + strconv.Itoa(ports["DNS_PORT"]),
		MetricsURL: "http://127.0.0.1:" + strconv.Itoa(ports["METRICS_PORT"]) + "/metrics",
		Ports:      ports,
	}
	if o.NoWait {
		return c, nil
	}
	wait := c.MetricsURL
	if o.WaitReady {
		wait = "http://127.0.0.1:" + strconv.Itoa(ports["READY_PORT"]) + "/ready"
	}
	wctx, cancel := context.WithTimeout(ctx, cmp.Or(o.StartTimeout, 60*time.Second))
	defer cancel()
	err = WaitHTTP(wctx, wait, p)
	if err == nil && o.WaitReady {
		err = WaitDNS(wctx, c.Addr, p)
	}
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("coredns: %w", err)
	}
	// A port another process listens on too is shared, not refused (see
	// FreePort): it would take some of this CoreDNS's TCP connections.
	if shared, err := SharedWith(p.PID(), slices.Collect(maps.Values(ports))...); err != nil || len(shared) > 0 {
		p.Stop()
		return nil, fmt.Errorf("coredns: another process listens on its TCP ports %v too (%v)", shared, err)
	}
	return c, nil
}

// PortAddr is the loopback address of the server block listening on the
// named port, e.g. PortAddr("KUBE_PORT") for one of ExtraPorts.
func (c *CoreDNS) PortAddr(name string) string { return "127.0.0.1:" + strconv.Itoa(c.Ports[name]) }

// Corefile is a Corefile whose first server block holds what StartCoreDNS
// needs besides the plugins under test: it listens on 127.0.0.1:{$DNS_PORT}
// and has the ready and prometheus plugins on {$READY_PORT} and
// {$METRICS_PORT}. stanzas are the block's other plugins as written inside
// it; more server blocks (Server) may follow.
func Corefile(stanzas string) string {
	return Server("DNS_PORT", "    ready 127.0.0.1:{$READY_PORT}\n    prometheus 127.0.0.1:{$METRICS_PORT}\n"+strings.Trim(stanzas, "\n")+"\n")
}

// GlobalStanza and KubernetesStanza serve cluster.local from
// {$SOURCE_KUBECONFIG}, in the namespaces of {$NS}, with a TTL of 1: the
// fault runner's and the e2e tests' plugins, written in this order.
const (
	GlobalStanza = `    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
        ttl 1
    }
`
	KubernetesStanza = `    kubernetes cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
        ttl 1
    }
`
)

// Server is a server block for every zone on 127.0.0.1 and the port in
// variable port (e.g. KUBE_PORT, one of CoreDNSOptions.ExtraPorts), holding
// stanzas as written inside it.
func Server(port, stanzas string) string {
	return ".:{$" + port + "} {\n    bind 127.0.0.1\n" + strings.Trim(stanzas, "\n") + "\n}\n"
}
