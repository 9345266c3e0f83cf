package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
)

// Block keys of the throughput table.
const (
	BlockGlobal     = "global"
	BlockKubeMirror = "kubernetes-mirror"
	BlockKubeGlobal = "kubernetes-global"
	BlockHosts      = "hosts"
)

// answererBlocks are the two blocks both the throughput and the latency
// CoreDNS serve: the global plugin, and the stock kubernetes plugin, which
// answers both the mirrors' own names and the controller's global Services.
var answererBlocks = run.Server("GLOBAL_PORT", benchStanza("global")) + run.Server("KUBE_PORT", benchStanza("kubernetes"))

// throughputCorefile serves the same zone from three blocks of one process:
// answererBlocks and the hosts plugin with the global names and the same
// addresses, the ceiling for an in-memory answerer. TTLs are equal, so equal
// answers are equal bytes.
var throughputCorefile = answererBlocks + `.:{$HOSTS_PORT} {
    bind 127.0.0.1
    hosts {$BENCH_HOSTS} cluster.local {
        ttl 5
        no_reverse
        reload 0s
    }
}
`

// Block is one measured (server block, query set).
type Block struct {
	Key     string
	Label   string // in the report
	Port    string // the Corefile's port variable
	Queries string // dnsperf data file
	Probe   string // a name it must answer with Records A records
	Records int
}

// Blocks writes the query files and the hosts file for bases [0, n) into dir
// and describes the four measured blocks.
func (w World) Blocks(dir string, n int) (blocks []Block, hostsFile string, err error) {
	rng := rand.New(rand.NewPCG(uint64(n), 1)) // #nosec G404 -- query order, not security
	order := rng.Perm(n)
	write := func(name string, line func(i int) []string) (string, error) {
		var b strings.Builder
		for _, i := range order {
			b.WriteString(strings.Join(line(i), "\n") + "\n")
		}
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.txt", name, n))
		return path, os.WriteFile(path, []byte(b.String()), 0o644)
	}
	globals, err := write("globals", func(i int) []string { return []string{w.FQDN(Global(i)) + " A"} })
	if err != nil {
		return nil, "", err
	}
	mirrors, err := write("mirrors", func(i int) []string {
		var l []string
		for c := range Clusters {
			l = append(l, w.FQDN(w.Mirror(i, c))+" A")
		}
		return l
	})
	if err != nil {
		return nil, "", err
	}
	hostsFile, err = write("hosts", func(i int) []string {
		var l []string
		for c := range Clusters {
			for p := range Pods {
				l = append(l, w.Addr(i, c, p).String()+" "+strings.TrimSuffix(w.FQDN(Global(i)), "."))
			}
		}
		return l
	})
	if err != nil {
		return nil, "", err
	}
	last := n - 1
	return []Block{
		{Key: BlockGlobal, Label: "(a) `global`, `*-global`", Port: "GLOBAL_PORT", Queries: globals, Probe: w.FQDN(Global(last)), Records: Records},
		{Key: BlockKubeMirror, Label: "(b) `kubernetes`, mirrors' names", Port: "KUBE_PORT", Queries: mirrors,
			Probe: w.FQDN(w.Mirror(last, len(Clusters)-1)), Records: Pods},
		{Key: BlockKubeGlobal, Label: "(c) `kubernetes`, controller's `*-global`", Port: "KUBE_PORT", Queries: globals, Probe: w.FQDN(Global(last)), Records: Records},
		{Key: BlockHosts, Label: "(d) `hosts` (ceiling), `*-global`", Port: "HOSTS_PORT", Queries: globals, Probe: w.FQDN(Global(last)), Records: Records},
	}, hostsFile, nil
}

// BlockResult is every run of one block.
type BlockResult struct {
	Block
	Quiet   []Perf
	Verbose []Perf
}

// ThroughputResult is one size's rounds.
type ThroughputResult struct {
	Bases  int
	Blocks []*BlockResult
	// Ratios of global's QPS to other blocks', one per round.
	Ratios map[string][]float64
	// Quiet is how the machine settled before the rounds.
	Quiet *QuietResult
	// CPURatios are other blocks' server CPU per query over global's, one per
	// round: the QPS ratio with a whole core each, whatever else runs.
	CPURatios map[string][]float64
}

// Throughput runs cfg.Rounds rounds of every block against srv, dnsperf run
// as perf. Before them it waits up to cfg.QuietMax for the machine to use
// less than cfg.QuietLimit CPUs (see WaitQuiet; 0: not), moves every other
// process this one started to cfg.ClientCPUs unless cfg.NoPinOthers (see
// PinOthers), so CoreDNS has its CPUs to itself, and runs each block once
// for cfg.Warmup, unrecorded: the first run after start-up pays for heap
// growth and cold caches. A round runs each block once quietly for
// cfg.Duration (QPS and CPU per query), in the order williams gives, then
// once verbosely for cfg.LatencyDuration (latency percentiles; 0: not): no
// block always follows the same one, and the verbose runs' output (hundreds
// of thousands of lines) is written between rounds, not before a quiet run
// of one particular block.
func Throughput(ctx context.Context, srv *CoreDNS, bases int, blocks []Block, perf Dnsperf, cfg Config) (*ThroughputResult, error) {
	res := &ThroughputResult{Bases: bases, Ratios: map[string][]float64{}, CPURatios: map[string][]float64{}}
	for _, b := range blocks {
		if err := scenario.AwaitRecords(ctx, srv.PortAddr(b.Port), b.Probe, b.Records, 3*time.Minute); err != nil {
			return nil, fmt.Errorf("block %s: %w", b.Key, err)
		}
		res.Blocks = append(res.Blocks, &BlockResult{Block: b})
	}
	if cfg.QuietLimit > 0 {
		q, err := WaitQuiet(ctx, cfg.QuietLimit, 3*time.Second, cfg.QuietMax)
		if err != nil {
			return nil, err
		}
		res.Quiet = &q
		cfg.Log("%d bases: machine busy %.2f CPUs (%s) after waiting %v; quiet: %v", bases, q.Busy, q.Top, q.Waited.Round(time.Second), q.Quiet)
	}
	if !cfg.NoPinOthers {
		restore, err := PinOthers(ctx, cfg.ClientCPUs, srv.PID())
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	if cfg.Warmup > 0 {
		for _, b := range res.Blocks {
			out := filepath.Join(scratchDir(cfg.Dir), fmt.Sprintf("dnsperf-%d-%s-warmup.txt", bases, b.Key))
			if _, err := perf.Run(ctx, srv.Ports[b.Port], b.Queries, cfg.Warmup, false, out, srv.PID()); err != nil {
				return nil, err
			}
			_ = os.Remove(out)
		}
	}
	for r := range cfg.Rounds {
		qps, cpu := map[string]float64{}, map[string]time.Duration{}
		order := williams(r, len(res.Blocks))
		for _, j := range order {
			b := res.Blocks[j]
			out := filepath.Join(cfg.Dir, fmt.Sprintf("dnsperf-%d-%s-r%d.txt", bases, b.Key, r))
			p, err := perf.Run(ctx, srv.Ports[b.Port], b.Queries, cfg.Duration, false, out, srv.PID())
			if err != nil {
				return nil, err
			}
			if p.Lost > 0 || p.NonNoError > 0 {
				return nil, fmt.Errorf("%s: %d lost, %d not NOERROR (see %s)", b.Key, p.Lost, p.NonNoError, out)
			}
			b.Quiet = append(b.Quiet, p)
			qps[b.Key], cpu[b.Key] = p.QPS, p.CPUPerQuery
			cfg.Log("%d bases, round %d/%d, %-18s %8.0f QPS  %5.1f µs CPU/query", bases, r+1, cfg.Rounds, b.Key, p.QPS,
				float64(p.CPUPerQuery)/float64(time.Microsecond))
		}
		for _, k := range []string{BlockKubeGlobal, BlockKubeMirror, BlockHosts} {
			if qps[k] > 0 {
				res.Ratios[k] = append(res.Ratios[k], qps[BlockGlobal]/qps[k])
			}
			if cpu[BlockGlobal] > 0 {
				res.CPURatios[k] = append(res.CPURatios[k], float64(cpu[k])/float64(cpu[BlockGlobal]))
			}
		}
		if cfg.LatencyDuration <= 0 {
			continue
		}
		for _, j := range order {
			b := res.Blocks[j]
			out := filepath.Join(scratchDir(cfg.Dir), fmt.Sprintf("dnsperf-%d-%s-r%d-v.txt", bases, b.Key, r))
			v, err := perf.Run(ctx, srv.Ports[b.Port], b.Queries, cfg.LatencyDuration, true, out, srv.PID())
			if err != nil {
				return nil, err
			}
			_ = os.Remove(out) // parsed; hundreds of thousands of lines
			b.Verbose = append(b.Verbose, v)
		}
	}
	return res, nil
}

// williams is round r's order of n blocks in a Williams design: over n
// rounds (n even) every block runs right after every other block once. Its
// first row is 0, 1, n-1, 2, n-2, ...; row r adds r to each, modulo n.
func williams(r, n int) []int {
	out := make([]int, n)
	for i := range n {
		v := 0
		switch {
		case i%2 == 1:
			v = (i + 1) / 2
		case i > 0:
			v = n - i/2
		}
		out[i] = (v + r) % n
	}
	return out
}

// scratchDir is a RAM-backed directory for dnsperf's verbose output when
// there is one, so that writing it costs no disk writeback during later runs.
func scratchDir(fallback string) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return fallback
}
