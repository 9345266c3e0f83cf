package global

import (
	"context"
	"github.com/globalmirror/globalmirror/test/fixture"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/kubernetes/object"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// diffQtypes are the query types the differential tests ask for every name.
var diffQtypes = []uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeMX, dns.TypeCNAME,
	dns.TypeNS, dns.TypePTR, dns.TypeSOA, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeANY,
	dns.TypeDS, dns.TypeCAA, dns.TypeAXFR, dns.TypeIXFR, 65000,
}

// userService is the user's Service "taken-global" of the fixture, as the
// kubernetes plugin sees it: the plugin must leave that name to it.
func userService() *object.Service {
	o, _ := object.ToService(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-global", Namespace: "ns"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.60", ClusterIPs: []string{"10.96.0.60"}, Ports: fixture.ServicePorts(peer)},
	})
	return o.(*object.Service)
}

// diffNames are names in, below and around every global the source knows.
func diffNames(h *harness) []string {
	src := h.g.ctrl.src
	var names []string
	prefixes := []string{"", "nothere.", "a.b.c.", "x.db-0.", "_.", "_._.", "__peer._tcp."}
	for _, p := range []string{"_peer", "_client", "_gossip", "_", "peer", "_nope", "_PEER"} {
		for _, pr := range []string{"_tcp", "_udp", "_", "tcp", "_sctp", "_TCP"} {
			prefixes = append(prefixes, p+"."+pr+".")
		}
	}
	for _, base := range probedBases(src) {
		global := aggregate.GlobalName(base, src.Suffix())
		hosts := map[string]bool{}
		addMemberHosts(hosts, src, base, true)
		pfx := append([]string(nil), prefixes...)
		for host := range hosts {
			pfx = append(pfx, host+".", strings.ToUpper(host)+".", "_"+host+".")
		}
		for _, p := range pfx {
			for _, ns := range []string{"ns", "other"} {
				names = append(names,
					p+global+"."+ns+".svc.cluster.local.",
					p+base+"."+ns+".svc.cluster.local.",
					p+global+"."+ns+".pod.cluster.local.")
			}
		}
		names = append(names,
			strings.ToUpper(global)+".NS.SVC.CLUSTER.LOCAL.",
			global+".ns.svc.Cluster.Local.",
			"_peer._tcp."+global+".ns.svc.CLUSTER.local.",
			global+".ns.svc.", global+".ns.svc.example.org.")
	}
	return append(names, "cluster.local.", "svc.cluster.local.", "ns.svc.cluster.local.",
		"dns-version.cluster.local.", "ns.dns.cluster.local.", "example.org.", ".")
}

// exchange runs one query through h and returns the response and rcode.
func exchange(h plugin.Handler, m *dns.Msg) (*dns.Msg, int, error) {
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	rcode, err := h.ServeDNS(context.Background(), rec, m.Copy())
	return rec.Msg, rcode, err
}

// TestDifferential checks the contract: for every name and type, the plugin
// in front of the kubernetes plugin answers what the kubernetes plugin alone
// answers from the converged global Services and EndpointSlices.
func TestDifferential(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	ref := reference(t, h.g.ctrl.src, []string{"cluster.local."}, userService())
	h.g.Next = ref

	names := diffNames(h)
	n := 0
	for _, name := range names {
		for _, qt := range diffQtypes {
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			compare(t, h.g, ref, m)
			n++
		}
	}
	t.Logf("compared %d queries", n)
}

func compare(t *testing.T, g *Global, ref plugin.Handler, m *dns.Msg) bool {
	t.Helper()
	got, grc, gerr := exchange(g, m)
	want, wrc, werr := exchange(ref, m)
	if grc != wrc || (gerr == nil) != (werr == nil) || normalize(got) != normalize(want) {
		t.Errorf("%s %s:\nglobal (rcode %d, err %v):\n%s\nkubernetes (rcode %d, err %v):\n%s",
			m.Question[0].Name, dns.TypeToString[m.Question[0].Qtype], grc, gerr, normalize(got), wrc, werr, normalize(want))
		return false
	}
	return true
}
