package integration

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
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
	ns := namespaceFor(t)
	ctx := t.Context()

	eastDB := newWorkload(t, east, ns, "db", 3, "198.51.100.0/24")
	sim := startSim(t, source, ns)
	if err := sim.Link(ctx, "east", east.Config); err != nil {
		t.Fatal(err)
	}
	dnsSrv := startCoreDNS(t, source, ns, corefile)
	global := "db-global." + ns + ".svc.cluster.local."
	e0, e1, e2 := clusterIP(t, source, ns, "db-0-east"), clusterIP(t, source, ns, "db-1-east"), clusterIP(t, source, ns, "db-2-east")
	before, after := a(e0, e1, e2), a(e0, e1)
	expect(t, dnsSrv, global, dns.TypeA, before)

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
				got := dnsq.Summary(dnsq.Ask(net, dnsSrv.Addr, global, dns.TypeA, 0))
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
	// While it is down: the answers stay, CoreDNS stays ready.
	time.Sleep(2 * time.Second)
	expect(t, dnsSrv, global, dns.TypeA, before)
	expect(t, dnsSrv, "db-2-east."+global, dns.TypeA, a(e2))
	// A change in east now reaches the source only when it is back.
	if err := eastDB.Scale(ctx, 2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	expect(t, dnsSrv, global, dns.TypeA, before)
	n := answered.Load()

	if err := source.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server down for %v, %d queries answered meanwhile", time.Since(down).Round(time.Millisecond), n)
	back := time.Now()
	expect(t, dnsSrv, "db-2-east."+global, dns.TypeA, "NXDOMAIN +soa")
	expect(t, dnsSrv, global, dns.TypeA, after)
	t.Logf("caught up %v after the API server returned", time.Since(back).Round(time.Millisecond))

	close(stop)
	done.Wait()
	stop = make(chan struct{}) // for the deferred close
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("%d of %d answers during the outage were neither the old nor the new set, e.g. %q", len(bad), answered.Load(), bad[0])
	}
}
