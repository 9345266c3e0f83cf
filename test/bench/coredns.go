package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
)

// CoreDNS is a running bin/coredns (run.StartCoreDNS) with the admin block.
type CoreDNS struct {
	*run.CoreDNS
	// PprofURL is served by the admin block.
	PprofURL string
}

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

// benchStanza is plugin's stanza for cluster.local, reading
// {$BENCH_KUBECONFIG}, with a TTL of 5, as every measured block has it.
func benchStanza(plugin string) string {
	return "    " + plugin + " cluster.local {\n        kubeconfig {$BENCH_KUBECONFIG}\n        ttl 5\n    }\n"
}

// Measured blocks on {$DNS_PORT}: the global plugin alone, the stock
// kubernetes plugin alone, and the production block with both.
var (
	globalCorefile     = run.Server("DNS_PORT", benchStanza("global"))
	kubernetesCorefile = run.Server("DNS_PORT", benchStanza("kubernetes"))
	productionCorefile = run.Server("DNS_PORT", benchStanza("global")+benchStanza("kubernetes"))
)

// probe is a name a measured block must answer on port with all its
// records A records before it is measured: what it lists is listed.
type probe struct {
	port, name string
	records    int
}

// StartCoreDNS writes corefile (adminBlock is added) to dir/<name>.Corefile
// and starts bin/coredns on it, pinned with taskset to cpus unless empty.
// Every {$X_PORT} in ports gets a free port. It returns once the metrics
// endpoint answers and every probe is answered in full (within 3 minutes
// each); other names may still be syncing (see scenario.AwaitRecords). On
// error the process is stopped.
func StartCoreDNS(ctx context.Context, dir, name, corefile, cpus string, ports []string, env []string, probes ...probe) (*CoreDNS, error) {
	c, err := run.StartCoreDNS(ctx, run.CoreDNSOptions{
		Corefile:     adminBlock + corefile,
		Dir:          dir,
		Name:         name,
		Env:          env,
		ExtraPorts:   append([]string{"ADMIN_PORT", "PPROF_PORT"}, ports...),
		CPUs:         cpus,
		StartTimeout: 2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("coredns %s: %w", name, err)
	}
	for _, p := range probes {
		if err := scenario.AwaitRecords(ctx, c.PortAddr(p.port), p.name, p.records, 3*time.Minute); err != nil {
			c.Stop()
			return nil, fmt.Errorf("coredns %s: %w", name, err)
		}
	}
	return &CoreDNS{CoreDNS: c, PprofURL: fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", c.Ports["PPROF_PORT"])}, nil
}
