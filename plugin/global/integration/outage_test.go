package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
)

// TestAPIServerOutage stops the source cluster's API server under a running
// CoreDNS: answers keep coming from the last state throughout (over UDP and
// TCP, never SERVFAIL), and changes made while it was down show up once it is
// back. It has clusters of its own, so that the outage disturbs no other test.
func TestAPIServerOutage(t *testing.T) {
	skipShort(t)
	t.Parallel()
	own := localkube.StartT(t, "outage-source", "outage-east")
	source, east := own.Cluster("outage-source"), own.Cluster("outage-east")
	s := scenario.New(t, source)
	ctx := t.Context()

	eastDB := s.Workload(east, "db", 3, "198.51.100.0/24")
	s.LinkAs("east", east)
	dnsSrv := s.StartCoreDNS(corefile)
	global := s.FQDN("db-global")
	e0, e1, e2 := s.ClusterIP("db-0-east"), s.ClusterIP("db-1-east"), s.ClusterIP("db-2-east")
	before, after := dnsq.NoError(e0, e1, e2), dnsq.NoError(e0, e1)
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, before)

	// Query continuously, over UDP and TCP, from now until the end.
	var (
		mu       sync.Mutex
		bad      []string
		answered atomic.Int64
		stop     = make(chan struct{})
		done     sync.WaitGroup
	)
	for _, net := range []string{"udp", "tcp"} {
		done.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				got := dnsq.Answer(net, dnsSrv.Addr, global, dns.TypeA)
				answered.Add(1)
				if got != before && got != after {
					mu.Lock()
					bad = append(bad, net+": "+got)
					mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	defer func() {
		close(stop)
		done.Wait()
	}()

	if err := source.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	// While it is down the answers stay and CoreDNS stays ready: every
	// check of the windows below asks both names over UDP and TCP and fails
	// at the first other answer.
	ready := fmt.Sprintf("http://127.0.0.1:%d/ready", dnsSrv.Ports["READY_PORT"])
	unchanged := func(context.Context) string {
		for _, net := range []string{"udp", "tcp"} {
			if got := dnsq.Answer(net, dnsSrv.Addr, global, dns.TypeA); got != before {
				return fmt.Sprintf("%s over %s: %q, want %q", global, net, got, before)
			}
			if got, want := dnsq.Answer(net, dnsSrv.Addr, "db-2-east."+global, dns.TypeA), dnsq.NoError(e2); got != want {
				return fmt.Sprintf("db-2-east.%s over %s: %q, want %q", global, net, got, want)
			}
		}
		resp, err := http.Get(ready)
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "not ready: " + resp.Status
		}
		return ""
	}
	s.Quiet("answers while the API server is down", 2*time.Second, unchanged)
	// A change in east now reaches the source only when it is back.
	if err := eastDB.Scale(ctx, 2); err != nil {
		t.Fatal(err)
	}
	s.Quiet("answers after a change in east while the API server is down", 3*time.Second, unchanged)
	n := answered.Load()

	if err := source.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server down for %v, %d queries answered meanwhile", time.Since(down).Round(time.Millisecond), n)
	back := time.Now()
	s.AnswerBoth(dnsSrv.Addr, "db-2-east."+global, dns.TypeA, "NXDOMAIN +soa")
	s.AnswerBoth(dnsSrv.Addr, global, dns.TypeA, after)
	t.Logf("caught up %v after the API server returned", time.Since(back).Round(time.Millisecond))

	close(stop)
	done.Wait()
	stop = make(chan struct{}) // for the deferred close
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("%d of %d answers during the outage were neither the old nor the new set, e.g. %q", len(bad), answered.Load(), bad[0])
	}
	logNamesThePlugin(t, dnsSrv.Log(1<<20))
}

// logNamesThePlugin checks that every line CoreDNS logged of the plugin's
// own (its lines, and those of the feeds it runs: package kubeclient and
// client-go's watches log through klog, which CoreDNS's kubernetes plugin
// takes over) says plugin/global, and that there are some.
func logNamesThePlugin(t *testing.T, log string) {
	t.Helper()
	ours := 0
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "feed=") && !strings.Contains(line, "Kubernetes API") {
			continue
		}
		ours++
		if !strings.Contains(line, "] plugin/global: ") {
			t.Errorf("a line of the plugin's names another: %s", line)
		}
	}
	if ours == 0 {
		t.Errorf("CoreDNS logged none of the plugin's lines:\n%s", log)
	}
}
