package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/miekg/dns"
)

// What `global` costs the names that are not global: the same CoreDNS
// serves them from `global` in front of `kubernetes`, as the chart
// configures it, and from `kubernetes` alone.
const chartKubernetesStanza = `    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig {$BENCH_KUBECONFIG}
        pods insecure
        ttl 30
    }
`

// passThroughCorefiles are the two blocks in either order. Of two
// identical blocks (both `kubernetes` alone) in one Corefile, the one
// written first answered 0.983x the other's QPS in one run of 5 rounds, so
// half the rounds have `global`'s block first and half second, and the
// report gives what the place itself did.
var passThroughCorefiles = [2]string{
	run.Server("PASS_PORT", benchStanza("global")+chartKubernetesStanza) + run.Server("KUBE_PORT", chartKubernetesStanza),
	run.Server("KUBE_PORT", chartKubernetesStanza) + run.Server("PASS_PORT", benchStanza("global")+chartKubernetesStanza),
}

// notGlobalQueries are, per base, the names a cluster asks that are not
// global: two existing Services (the base's mirrors), a pod name, two
// search-path misses of an external name and a reverse name outside the
// mirrored ranges; half NOERROR, half NXDOMAIN.
func (w World) notGlobalQueries(i int) []string {
	return []string{
		w.FQDN(w.Mirror(i, 0)) + " A",
		w.FQDN(w.Mirror(i, len(w.clusters())-1)) + " A",
		fmt.Sprintf("10-1-%d-%d.%s.pod.cluster.local. A", i/250, i%250+1, w.Namespace),
		fmt.Sprintf("www.example%d.com.%s.svc.cluster.local. A", i, w.Namespace),
		fmt.Sprintf("www.example%d.com.svc.cluster.local. AAAA", i),
		fmt.Sprintf("%d.%d.0.127.in-addr.arpa. PTR", i%250+1, i/250),
	}
}

// PassThroughResult is the rounds of both blocks on the names that are not
// global.
type PassThroughResult struct {
	Bases int
	// Pass: `global` in front of `kubernetes`; Kube: `kubernetes` alone.
	Pass, Kube []Perf
	// PassFirst: in that round, Pass's block came first in the Corefile.
	PassFirst []bool
	Quiet     *QuietResult
}

// Ratios are Pass's QPS over Kube's, and Kube's server CPU per query over
// Pass's, one per round.
func (r *PassThroughResult) Ratios() (qps, cpu []float64) {
	for i := range r.Pass {
		qps = append(qps, r.Pass[i].QPS/r.Kube[i].QPS)
		cpu = append(cpu, float64(r.Kube[i].CPUPerQuery)/float64(r.Pass[i].CPUPerQuery))
	}
	return qps, cpu
}

// PassThrough measures the names that are not global on a cluster of its
// own holding the mirrors of bases bases: cfg.Rounds rounds, each block once
// for cfg.Duration in alternating order, CoreDNS on cfg.ServerCPUs and
// dnsperf on cfg.ClientCPUs. Both blocks must answer every name alike, and
// lose none.
func PassThrough(ctx context.Context, cfg Config, bases int) (*PassThroughResult, error) {
	env, cluster, w, err := clusterOfMirrors(ctx, cfg, "passthrough-cluster", bases)
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	rng := rand.New(rand.NewPCG(uint64(bases), 2)) // #nosec G404 -- query order, not security
	var b strings.Builder
	for _, i := range rng.Perm(bases) {
		b.WriteString(strings.Join(w.notGlobalQueries(i), "\n") + "\n")
	}
	queries := filepath.Join(cfg.Dir, fmt.Sprintf("not-global-%d.txt", bases))
	if err := os.WriteFile(queries, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	last := w.FQDN(w.Mirror(bases-1, len(w.clusters())-1))
	var srvs [2]*CoreDNS
	for i, corefile := range passThroughCorefiles {
		srv, err := StartCoreDNS(ctx, cfg.Dir, fmt.Sprintf("passthrough-%d", i), corefile, cfg.ServerCPUs, []string{"PASS_PORT", "KUBE_PORT"},
			[]string{"BENCH_KUBECONFIG=" + cluster.Kubeconfig}, probe{"PASS_PORT", last, Pods}, probe{"KUBE_PORT", last, Pods})
		if err != nil {
			return nil, err
		}
		defer srv.Stop()
		srvs[i] = srv
		// Alike: every kind of name, the same answer from both blocks.
		for _, line := range w.notGlobalQueries(bases - 1) {
			name, qtype, _ := strings.Cut(line, " ")
			pass := dnsq.Answer("udp", srv.PortAddr("PASS_PORT"), name, dns.StringToType[qtype])
			kube := dnsq.Answer("udp", srv.PortAddr("KUBE_PORT"), name, dns.StringToType[qtype])
			if pass != kube || strings.HasPrefix(pass, "error") || strings.HasPrefix(pass, "SERVFAIL") {
				return nil, fmt.Errorf("%s %s: %q through global, %q from kubernetes alone", name, qtype, pass, kube)
			}
		}
	}

	res := &PassThroughResult{Bases: bases}
	if cfg.QuietLimit > 0 {
		q, err := WaitQuiet(ctx, cfg.QuietLimit, 3*time.Second, cfg.QuietMax)
		if err != nil {
			return nil, err
		}
		res.Quiet = &q
	}
	if !cfg.NoPinOthers {
		restore, err := PinOthers(ctx, cfg.ClientCPUs, srvs[0].PID(), srvs[1].PID())
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	perf := Dnsperf{CPUs: cfg.ClientCPUs, Clients: 4, Inflight: 100}
	blocks := []struct {
		key, port string
		into      *[]Perf
	}{{"global+kubernetes", "PASS_PORT", &res.Pass}, {"kubernetes", "KUBE_PORT", &res.Kube}}
	if cfg.Warmup > 0 {
		for _, srv := range srvs {
			for _, bl := range blocks {
				if _, err := perf.Run(ctx, srv.Ports[bl.port], queries, cfg.Warmup, false, filepath.Join(cfg.Dir, "dnsperf-not-global-warmup.txt"), srv.PID()); err != nil {
					return nil, err
				}
			}
		}
	}
	for r := range cfg.Rounds {
		// The Corefiles take turns, and in each the blocks run A, B, B,
		// A, each for half the round's duration: the block that goes
		// first in a round runs slower (about 3% here), and in each
		// Corefile either goes first once every two of its rounds.
		srv := srvs[r%2]
		res.PassFirst = append(res.PassFirst, r%2 == 0)
		runs := map[string][]Perf{}
		for i, k := range []int{0, 1, 1, 0} {
			bl := blocks[(k+r/2)%len(blocks)]
			out := filepath.Join(cfg.Dir, fmt.Sprintf("dnsperf-not-global-%s-r%d-%d.txt", bl.key, r, i))
			p, err := perf.Run(ctx, srv.Ports[bl.port], queries, cfg.Duration/2, false, out, srv.PID())
			if err != nil {
				return nil, err
			}
			if p.Lost > 0 {
				return nil, fmt.Errorf("%s: %d lost (see %s)", bl.key, p.Lost, out)
			}
			runs[bl.key] = append(runs[bl.key], p)
		}
		for _, bl := range blocks {
			p := bothHalves(runs[bl.key][0], runs[bl.key][1])
			*bl.into = append(*bl.into, p)
			cfg.Log("not global, round %d/%d, %-18s %8.0f QPS  %5.1f µs CPU/query  %d of %d not NOERROR", r+1, cfg.Rounds, bl.key, p.QPS,
				float64(p.CPUPerQuery)/float64(time.Microsecond), p.NonNoError, p.Completed)
		}
		// The same mix answered: as many NXDOMAIN in each, to a percent.
		pass, kube := res.Pass[r], res.Kube[r]
		if f, g := float64(pass.NonNoError)/float64(pass.Completed), float64(kube.NonNoError)/float64(kube.Completed); f-g > 0.01 || g-f > 0.01 {
			return nil, fmt.Errorf("round %d: %.3f of the answers not NOERROR through global, %.3f from kubernetes alone", r+1, f, g)
		}
	}
	return res, nil
}

// bothHalves is one block's two runs of equal length in a round, as one.
func bothHalves(a, b Perf) Perf {
	n := a.Completed + b.Completed
	return Perf{
		QPS: (a.QPS + b.QPS) / 2, Completed: n, NonNoError: a.NonNoError + b.NonNoError,
		CPUPerQuery: (a.CPUPerQuery*time.Duration(a.Completed) + b.CPUPerQuery*time.Duration(b.Completed)) / time.Duration(max(n, 1)),
	}
}

// passThroughSection is the title of its section in RESULTS.md.
const passThroughSection = "## 8. Names that are not global"

// passThroughFloor: `global` in front of `kubernetes` answers the names
// that are not global at no less than this of `kubernetes` alone's QPS.
const passThroughFloor = 0.98

// ReportPassThrough writes the rounds and their medians.
func ReportPassThrough(out io.Writer, r *PassThroughResult) {
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("%s\n\n", passThroughSection)
	p("What `global` costs every name it is not for, which the chart puts it in front of: one `bin/coredns` on one core, "+
		"two blocks, `global` (as the chart configures it) in front of `kubernetes cluster.local in-addr.arpa ip6.arpa` with `pods insecure`, "+
		"and that `kubernetes` alone; %s bases' mirrors in the cluster. The queries, per base: two existing Services (its mirrors), "+
		"a pod name, two search-path misses of an external name (NXDOMAIN) and a reverse name outside the mirrored ranges (NXDOMAIN), "+
		"in a shuffled order; both blocks answer each alike (checked first). dnsperf on the other core; %d rounds, each "+
		"A, B, B, A for half the round (whichever block goes first in a round runs slower), A alternating, and the rounds taking turns between "+
		"two CoreDNS processes whose Corefiles hold the two blocks in either order, so that a block's place in the Corefile cancels out. QPS, and the server's CPU per query (user+system over the run), which is what a busy node pays.\n\n",
		thousands(r.Bases), len(r.Pass))
	p("| round | `global`'s block | QPS, `global` + `kubernetes` | QPS, `kubernetes` alone | ratio | CPU/query, `global` + `kubernetes` | CPU/query, `kubernetes` alone |\n")
	p("|---:|---|---:|---:|---:|---:|---:|\n")
	qps, cpu := r.Ratios()
	var first, second []float64
	for i := range r.Pass {
		at := "second"
		if r.PassFirst[i] {
			at, first = "first", append(first, qps[i])
		} else {
			second = append(second, qps[i])
		}
		p("| %d | %s | %.0f | %.0f | %.3f× | %s | %s |\n", i+1, at, r.Pass[i].QPS, r.Kube[i].QPS, qps[i],
			inUnit(r.Pass[i].CPUPerQuery, time.Microsecond, "µs"), inUnit(r.Kube[i].CPUPerQuery, time.Microsecond, "µs"))
	}
	p("\nMedians: QPS %.3f× `kubernetes` alone's (floor %.2f×); CPU per query %.3f× (`kubernetes` alone's over `global` + `kubernetes`'s: below 1, global costs that much more). "+
		"`TestNamesNotGlobalCostNoAllocation` holds the path they take through `global` to no allocation.", Median(qps), passThroughFloor, Median(cpu))
	if len(first) > 0 && len(second) > 0 {
		p(" With `global`'s block first %.3f×, second %.3f×: the first block's own effect, %.3f×.", Median(first), Median(second), math.Sqrt(Median(first)/Median(second)))
	}
	p("\n\n")
}

func passThroughFloors(r *PassThroughResult) []floor {
	qps, _ := r.Ratios()
	return []floor{within(fmt.Sprintf("names not global, global in front of kubernetes: QPS ≥ %.2f× kubernetes alone", passThroughFloor),
		fmt.Sprintf("%.3f× (median of %s)", Median(qps), joinFloats(qps, "%.3f")), Median(qps), passThroughFloor, "ratio", false)}
}

// MergePassThrough puts the names that are not global, measured on their
// own (bench -passthrough -merge), into the last full run's results.
func MergePassThrough(mdPath, jsonPath string, r *PassThroughResult, started time.Time, command string) error {
	return mergeSection(mdPath, jsonPath, passThroughSection, "## Phases", func(b io.Writer) { ReportPassThrough(b, r) },
		passThroughFloors(r), "", started, command)
}
