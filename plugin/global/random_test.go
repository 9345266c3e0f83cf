package global

import (
	"fmt"
	"github.com/globalmirror/globalmirror/test/fixture"
	"math/rand/v2"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/miekg/dns"
)

// randomWorld makes a namespace of random global services: a local member or
// not, one to three mirrors, slices of both families with random ports (none,
// unnamed, numberless, UDP), endpoints with random, missing, shared or
// overlong hostnames, random readiness, addresses repeated across members,
// endpoint mirrors with dead or live gateways, and local services that opted
// into native names.
func randomWorld(r *rand.Rand) []runtime.Object {
	const ns = "ns"
	var objs []runtime.Object
	portChoices := []discoveryv1.EndpointPort{
		{Name: new("peer"), Port: new(int32(7000)), Protocol: new(corev1.ProtocolTCP)},
		{Name: new("client"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)},
		{Name: new("gossip"), Port: new(int32(7946)), Protocol: new(corev1.ProtocolUDP)},
		{Name: new(""), Port: new(int32(9000)), Protocol: new(corev1.ProtocolTCP)},
		{Name: new("any"), Protocol: new(corev1.ProtocolTCP)},
		{Name: new("peer"), Port: new(int32(7001)), Protocol: new(corev1.ProtocolSCTP), AppProtocol: new("x")},
	}
	randPorts := func() []discoveryv1.EndpointPort {
		var out []discoveryv1.EndpointPort
		names := map[string]bool{}
		for _, p := range portChoices {
			if r.IntN(3) == 0 && !names[*p.Name] {
				names[*p.Name] = true
				out = append(out, p)
			}
		}
		return out
	}
	hosts := []string{"", "", "db-0", "db-1", "db-2", "web", "x-east", "a-very-long-hostname-that-is-almost-too-long-for-a-dns-label-x"}
	v4 := func() string { return fmt.Sprintf("192.0.2.%d", 1+r.IntN(12)) }
	v6 := func() string {
		if r.IntN(6) == 0 {
			return "2001:db8::" // dashed with a trailing "0"
		}
		return fmt.Sprintf("2001:db8::%x", 1+r.IntN(12))
	}
	randEndpoints := func(family discoveryv1.AddressType) []fixture.Endpoint {
		var eps []fixture.Endpoint
		for range r.IntN(5) {
			addr := v4()
			if family == discoveryv1.AddressTypeIPv6 {
				addr = v6()
			}
			e := fixture.Endpoint{Host: hosts[r.IntN(len(hosts))], Addrs: []string{addr}}
			switch r.IntN(4) {
			case 0:
				e.Ready = new(false)
			case 1:
				e.Ready = new(true)
			}
			eps = append(eps, e)
		}
		return eps
	}
	addSlices := func(svc *corev1.Service) {
		for i := range r.IntN(4) {
			family := discoveryv1.AddressTypeIPv4
			if r.IntN(3) == 0 {
				family = discoveryv1.AddressTypeIPv6
			}
			objs = append(objs, fixture.Slice(svc, fmt.Sprintf("%s-%d", svc.Name, i), family, randPorts(), randEndpoints(family)...))
		}
	}
	clusters := []string{"east", "west", "north"}
	endpointMirrors := map[string]bool{}
	for b := range 1 + r.IntN(4) {
		base := fmt.Sprintf("s%d", b)
		if r.IntN(2) == 0 {
			local := fixture.LocalService(ns, base, peer, client)
			if r.IntN(2) == 0 {
				local.Annotations = map[string]string{aggregate.AnnotationIncludeMirrors: "true"}
			}
			objs = append(objs, local)
			addSlices(local)
		}
		for _, c := range clusters[:r.IntN(len(clusters)+1)] {
			m := fixture.HeadlessMirror(ns, base, c, peer, client, gossip)
			objs = append(objs, m)
			addSlices(m)
			for _, h := range []string{"db-0", "db-1", "x-east"} {
				if r.IntN(3) == 0 && !endpointMirrors[h+"-"+c] {
					endpointMirrors[h+"-"+c] = true
					em, es := fixture.EndpointMirror(ns, h+"-"+c, c, m.Name, r.IntN(2) == 0)
					objs = append(objs, em, es)
				}
			}
		}
	}
	return objs
}

// TestDifferentialRandom compares the plugin with the kubernetes plugin on the
// controller's converged objects over many random worlds.
func TestDifferentialRandom(t *testing.T) {
	worlds := 40
	if testing.Short() {
		worlds = 10
	}
	qtypes := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeSOA, dns.TypeANY}
	queries := 0
	for seed := range uint64(worlds) {
		r := rand.New(rand.NewPCG(seed, 42))
		h := startHarness(t, defaultConfig(), randomWorld(r)...)
		ref := reference(t, h.g.ctrl.src, []string{"cluster.local."})
		h.g.Next = ref
		failed := false
		for _, name := range diffNames(h) {
			for _, qt := range qtypes {
				m := new(dns.Msg)
				m.SetQuestion(name, qt)
				if !compare(t, h.g, ref, m) {
					failed = true
				}
				queries++
			}
			if failed {
				t.Fatalf("world %d differs (see above)", seed)
			}
		}
		h.cancel()
	}
	t.Logf("%d worlds, %d queries", worlds, queries)
}
