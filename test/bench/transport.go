package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/miekg/dns"
)

// A DNS client falls back to TCP for every answer too large for UDP (a
// global of 40 pods or more): TCP must be answered as surely and nearly as
// fast as UDP, on a machine busy with other work.

// TransportResult is the latency of the global block's answers over UDP
// and over TCP, under CPU contention.
type TransportResult struct {
	Clients    int // per transport, each asking one query at a time
	Duration   time.Duration
	Contention string
	Rows       []TransportRow
}

// TransportRow is one transport's queries.
type TransportRow struct {
	What      string
	Latencies []time.Duration // of the queries answered in full
	// Failed are the queries not answered in full within the client's
	// budget (2 s).
	Failed int
}

// transports are how clients ask: UDP, TCP with a connection per query
// (glibc's and Go's resolvers), and TCP keeping its connection (a
// long-lived client, or a forwarder).
var transports = []struct {
	what      string
	network   string
	keepAlive bool
}{
	{"UDP", "udp", false},
	{"TCP, a connection per query", "tcp", false},
	{"TCP, one connection reused", "tcp", true},
}

// busyLoops are processes that keep every CPU busy at nice 10, as other
// work on the machine would: CoreDNS and the clients get more of the CPU
// than they do, but never all of it.
func busyLoops(ctx context.Context, n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range n {
		c := exec.CommandContext(ctx, "nice", "-n", "10", "sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// TransportLatency asks name of addr with clients per transport at once,
// for d, while busy loops keep every CPU busy; want is the records a full
// answer holds.
func TransportLatency(ctx context.Context, addr, name string, want, clients int, d time.Duration, cpus int) (*TransportResult, error) {
	stop, err := busyLoops(ctx, cpus)
	if err != nil {
		return nil, err
	}
	defer stop()
	res := &TransportResult{Clients: clients, Duration: d,
		Contention: fmt.Sprintf("%d busy loops at nice 10 (one per CPU)", cpus)}
	rows := make([]TransportRow, len(transports))
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i, tr := range transports {
		rows[i].What = tr.what
		for range clients {
			wg.Go(func() {
				var lat []time.Duration
				failed := 0
				ask := &asker{network: tr.network, addr: addr, keepAlive: tr.keepAlive}
				defer ask.close()
				for time.Now().Before(end) && ctx.Err() == nil {
					start := time.Now()
					m, err := ask.ask(name)
					took := time.Since(start)
					if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != want {
						failed++
						continue
					}
					lat = append(lat, took)
				}
				mu.Lock()
				rows[i].Latencies = append(rows[i].Latencies, lat...)
				rows[i].Failed += failed
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	res.Rows = rows
	return res, ctx.Err()
}

// asker asks one question at a time, over a connection it keeps
// (keepAlive) or a new one per query.
type asker struct {
	network, addr string
	keepAlive     bool
	conn          *dns.Conn
}

const transportBudget = 2 * time.Second

func (a *asker) ask(name string) (*dns.Msg, error) {
	q := new(dns.Msg).SetQuestion(name, dns.TypeA)
	c := &dns.Client{Net: a.network, Timeout: transportBudget}
	if !a.keepAlive {
		return dnsq.Exchange(context.Background(), c, q, a.addr)
	}
	if a.conn == nil {
		conn, err := c.Dial(a.addr)
		if err != nil {
			return nil, err
		}
		a.conn = conn
	}
	r, _, err := c.ExchangeWithConn(q, a.conn)
	if err != nil {
		a.close() // the next query dials again
	}
	return r, err
}

func (a *asker) close() {
	if a.conn != nil {
		a.conn.Close()
		a.conn = nil
	}
}

// transportSection is the title of these figures' section in RESULTS.md.
const transportSection = "### UDP and TCP under CPU contention"

// transportFloors are: no query unanswered within the budget, per
// transport; none where t is nil (not measured).
func transportFloors(t *TransportResult) []floor {
	if t == nil {
		return nil
	}
	var fs []floor
	for _, row := range t.Rows {
		fs = append(fs, within(fmt.Sprintf("%s under CPU contention: queries not answered in full within %v: 0", row.What, transportBudget),
			fmt.Sprintf("%d of %s (p50 %s, p99 %s, p99.9 %s, max %s)", row.Failed, thousands(len(row.Latencies)+row.Failed),
				millis(DurationQuantile(row.Latencies, .5)), millis(DurationQuantile(row.Latencies, .99)),
				millis(DurationQuantile(row.Latencies, .999)), millis(DurationQuantile(row.Latencies, 1))),
			float64(row.Failed), 0, "queries", true))
	}
	return fs
}

// ReportTransport writes the latency percentiles per transport.
func ReportTransport(out io.Writer, r *TransportResult) {
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("The `global` block answering a global of %d records, on a CoreDNS free to use every CPU, while %s; "+
		"%d clients per transport asking one query at a time, all transports at once, for %v; "+
		"a query not answered in full within %v counts as failed:\n\n", Records, r.Contention, r.Clients, r.Duration, transportBudget)
	p("| transport | queries | p50 | p99 | p99.9 | max | failed |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Rows {
		q := func(x float64) string { return millis(DurationQuantile(row.Latencies, x)) }
		p("| %s | %s | %s | %s | %s | %s | %d |\n", row.What, thousands(len(row.Latencies)+row.Failed), q(.5), q(.99), q(.999), q(1), row.Failed)
	}
}
