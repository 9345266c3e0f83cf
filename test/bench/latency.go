package bench

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"github.com/miekg/dns"
	"k8s.io/client-go/kubernetes"
)

// latencyPoll is the pause between two queries of one poller: the
// resolution of the latency figures, small next to them.
const latencyPoll = 200 * time.Microsecond

// LatencyResult holds, per change, the time from the API write to the new
// answer.
type LatencyResult struct {
	Global, Kube []time.Duration
	// Update is the API server's round trip of each update.
	Update []time.Duration
	// Plugin is the plugin's own coredns_global_programming_duration_seconds
	// over the same changes (from the slices' trigger time).
	Plugin Histogram
}

// ProgrammingLatency adds an endpoint to a mirror slice of one of bases
// [0, bases) and removes it again, alternately, changes times; each time it
// polls the global block (globalAddr) and the kubernetes block answering
// from the controller's slices (kubeAddr), every latencyPoll, until both
// answer the new set (within a minute), and records how long each took from
// the moment the write was sent.
func (w World) ProgrammingLatency(ctx context.Context, client kubernetes.Interface, globalAddr, kubeAddr, metricsURL string, changes, bases int, logf func(string, ...any)) (*LatencyResult, error) {
	before, err := run.Scrape(metricsURL)
	if err != nil {
		return nil, err
	}
	res := &LatencyResult{}
	for k := range changes {
		i, add := (k/2)%bases, k%2 == 0
		var extra []Endpoint
		want := Records
		if add {
			extra = []Endpoint{{Hostname: fmt.Sprintf("%s-%d", Base(i), Pods), Addr: ChangeAddr(k / 2)}}
			want++
		}
		name := w.FQDN(Global(i))
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		var seen [2]time.Time // by the global block, by the kubernetes block
		var errs [2]error
		var pollers sync.WaitGroup
		for j, addr := range []string{globalAddr, kubeAddr} {
			pollers.Go(func() { seen[j], errs[j] = pollUntil(pctx, addr, name, want, latencyPoll) })
		}
		start, rtt, err := w.SetExtra(ctx, client, i, 0, extra...)
		if err != nil {
			cancel()
		}
		pollers.Wait()
		cancel()
		if err := cmp.Or(err, errs[0], errs[1]); err != nil {
			return nil, fmt.Errorf("change %d (%s to %d records): %w", k+1, name, want, err)
		}
		res.Global = append(res.Global, seen[0].Sub(start))
		res.Kube = append(res.Kube, seen[1].Sub(start))
		res.Update = append(res.Update, rtt)
		if (k+1)%50 == 0 {
			logf("programming latency: %d/%d changes", k+1, changes)
		}
	}
	after, err := run.Scrape(metricsURL)
	if err != nil {
		return nil, err
	}
	res.Plugin = histogram(after, "coredns_global_programming_duration_seconds").Minus(histogram(before, "coredns_global_programming_duration_seconds"))
	return res, nil
}

// afterAck is ds, each minus its change's API round trip: the time from the
// change being committed (at the latest) to the new answer.
func (l *LatencyResult) afterAck(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i := range ds {
		out[i] = ds[i] - l.Update[i]
	}
	return out
}

// pollUntil queries addr for name's A records every poll until there are
// want of them, and returns when it saw that.
func pollUntil(ctx context.Context, addr, name string, want int, poll time.Duration) (time.Time, error) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close()
	co := &dns.Conn{Conn: conn, UDPSize: dns.DefaultMsgSize}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	last := "no answer"
	for {
		m.Id = dns.Id()
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		if err := co.WriteMsg(m); err != nil {
			return time.Time{}, err
		}
		r, err := co.ReadMsg()
		now := time.Now()
		switch {
		case err != nil:
			last = err.Error()
		case r.Id == m.Id && len(r.Answer) == want:
			return now, nil
		case r.Id == m.Id:
			last = fmt.Sprintf("%d records", len(r.Answer))
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: still %s: %w", addr, last, ctx.Err())
		case <-time.After(poll):
		}
	}
}
