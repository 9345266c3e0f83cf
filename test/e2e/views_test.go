package e2e

import (
	"fmt"
	"testing"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/miekg/dns"
)

// viewsCorefile turns on the plugin's reverse and clusterset views; the
// kubernetes plugin behind it answers the other reverse names. KUBE_PORT
// serves the stock kubernetes plugin alone, for what a cluster answers
// without the plugin.
var viewsCorefile = run.Corefile(`
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
        ttl 1
        reverse
        clusterset home
    }
`+viewsKubernetes) + run.Server("KUBE_PORT", viewsKubernetes)

const viewsKubernetes = `    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
        ttl 1
    }
`

// testViews runs the real CoreDNS with the reverse and clusterset views over
// a local db and east's and west's mirrors, and follows readiness and an
// unlink through both, over UDP and TCP.
func testViews(t *testing.T, env *localkube.Env) {
	w := newWorld(t, env, "views")
	ctx := t.Context()
	w.Link(env.Cluster("west"))
	local := w.Workload(w.Source, "db", 2, "192.0.2.96/27")
	w.Workload(w.east, "db", 2, "198.51.100.192/26")
	w.Workload(env.Cluster("west"), "db", 1, "203.0.113.128/26")
	w.startCoreDNS(viewsCorefile)

	cs := func(name string) string { return name + "." + w.NS + ".svc.clusterset.local." }
	db := cs("db")
	all := dnsq.NoError(w.PodIP(local, 0), w.PodIP(local, 1), w.ClusterIP("db-0-east"), w.ClusterIP("db-1-east"), w.ClusterIP("db-0-west"))
	w.await("clusterset db", w.global, db, dns.TypeA, all)
	for _, c := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"db-0.home." + db, dns.TypeA, dnsq.NoError(w.PodIP(local, 0))},
		{"db-1.east." + db, dns.TypeA, dnsq.NoError(w.ClusterIP("db-1-east"))},
		{"db-0.west." + db, dns.TypeA, dnsq.NoError(w.ClusterIP("db-0-west"))},
		{"db-0.east." + db, dns.TypeAAAA, "NOERROR +soa"}, // NODATA
		{db, dns.TypeAAAA, "NOERROR +soa"},
		{"east." + db, dns.TypeA, "NXDOMAIN +soa"}, // no cluster-only names
		{"db-0-east." + db, dns.TypeA, "NXDOMAIN +soa"},
		{"db-9.east." + db, dns.TypeA, "NXDOMAIN +soa"},
		{"_db._tcp." + db, dns.TypeSRV, fmt.Sprintf("NOERROR 5432 db-0.east.%[1]s,5432 db-0.home.%[1]s,5432 db-0.west.%[1]s,5432 db-1.east.%[1]s,5432 db-1.home.%[1]s", db)},
		{"_nope._tcp." + db, dns.TypeSRV, "NXDOMAIN +soa"},
		{"dns-version.clusterset.local.", dns.TypeTXT, "NOERROR TXT"},
	} {
		w.await("clusterset", w.global, c.name, c.qtype, c.want)
	}

	// Reverse: one PTR, the global per-pod name. The stock plugin answers the
	// local pod with its own service's name, and a mirrored pod with
	// Linkerd's endpoint mirror Service.
	rev := func(ip string) string {
		name, err := dns.ReverseAddr(ip)
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	ptr := func(target string) string { return "NOERROR " + target }
	localIP, eastIP := w.PodIP(local, 0), w.ClusterIP("db-0-east")
	w.await("PTR of a local pod", w.global, rev(localIP), dns.TypePTR, ptr("db-0.db-global."+w.NS+".svc.cluster.local."))
	w.await("PTR of a mirrored pod", w.global, rev(eastIP), dns.TypePTR, ptr("db-0-east.db-global."+w.NS+".svc.cluster.local."))
	w.await("stock PTR of a local pod", w.kube, rev(localIP), dns.TypePTR, ptr("db-0.db."+w.NS+".svc.cluster.local."))
	w.await("stock PTR of a mirrored pod", w.kube, rev(eastIP), dns.TypePTR, ptr("db-0-east."+w.NS+".svc.cluster.local."))
	w.await("A of a reverse name the plugin holds", w.global, rev(eastIP), dns.TypeA, "NOERROR +soa")

	// A pod not ready at home: gone from both views at once; its reverse
	// name is the kubernetes plugin's again (which has no ready address for it).
	if err := local.SetReady(ctx, "db-0", false); err != nil {
		t.Fatal(err)
	}
	w.await("clusterset name of a not-ready pod", w.global, "db-0.home."+db, dns.TypeA, "NXDOMAIN +soa")
	w.await("PTR of a not-ready pod", w.global, rev(localIP), dns.TypePTR, "NXDOMAIN +soa")

	// West unlinked: its pod leaves the clusterset view and its PTR with it.
	westIP := w.ClusterIP("db-0-west")
	if err := w.Sim.Unlink(ctx, "west"); err != nil {
		t.Fatal(err)
	}
	w.await("clusterset db after the unlink", w.global, db, dns.TypeA,
		dnsq.NoError(w.PodIP(local, 1), w.ClusterIP("db-0-east"), w.ClusterIP("db-1-east")))
	w.await("clusterset name of an unlinked pod", w.global, "db-0.west."+db, dns.TypeA, "NXDOMAIN +soa")
	w.await("PTR of an unlinked pod", w.global, rev(westIP), dns.TypePTR, "NXDOMAIN +soa")
}
