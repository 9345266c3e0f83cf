package truth

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

var peer = fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}

func TestCompute(t *testing.T) {
	local := fixture.LocalService("ns", "db", peer)
	east := fixture.HeadlessMirror("ns", "db", "east", peer)
	west := fixture.HeadlessMirror("ns", "db", "west", peer)
	em, emSlice := fixture.EndpointMirror("ns", "db-1-east", "east", "db-east", false)
	taken := fixture.HeadlessMirror("ns", "taken", "east", peer)
	user := fixture.Service("ns", "taken-global", nil, "10.96.0.1", peer)
	svcs := []corev1.Service{*local, *east, *west, *em, *taken, *user}
	v4 := discoveryv1.AddressTypeIPv4
	sl := []discoveryv1.EndpointSlice{
		*fixture.Slice(local, "db-1", v4, nil, fixture.Ready("db-0", "192.0.2.1"), fixture.NotReady("db-1", "192.0.2.2"), fixture.Ready("db-0-west", "192.0.2.3")),
		*fixture.Slice(east, "db-east-1", v4, nil, fixture.Ready("db-0", "10.96.1.1"), fixture.Ready("db-1", "10.96.1.2")),
		*fixture.Slice(west, "db-west-1", v4, nil, fixture.Ready("db-0", "10.96.2.1"), fixture.Ready("", "10.96.2.2"), fixture.Ready("x", "bogus")),
		*emSlice,
	}
	w := Compute(svcs, sl, "-global")
	db := w.Globals["db-global"]
	// West's address without a hostname is Linkerd's gateway: no member.
	if want := []string{"10.96.1.1", "10.96.2.1", "192.0.2.1", "192.0.2.3"}; !slices.Equal(db.IPv4, want) {
		t.Errorf("db-global addresses %v, want %v", db.IPv4, want)
	}
	wantHosts := map[string][]string{"db-0": {"192.0.2.1"}, "db-0-east": {"10.96.1.1"}, "db-0-west": {"192.0.2.3"}}
	if !maps.EqualFunc(db.Hosts, wantHosts, slices.Equal) {
		t.Errorf("hosts %v, want %v (db-1-east behind a dead gateway, west's db-0 lost its name)", db.Hosts, wantHosts)
	}
	if !w.Theirs["taken-global"] || len(w.Globals) != 1 {
		t.Errorf("globals %v, theirs %v", slices.Collect(maps.Keys(w.Globals)), w.Theirs)
	}

	// East rewritten to Linkerd's gateway: its pods are its endpoint mirrors.
	sl[1] = *fixture.Slice(east, "db-east-1", v4, nil, fixture.Ready("", "192.0.2.254"))
	em0 := fixture.Service("ns", "db-0-east", fixture.MirrorLabels("east", aggregate.LabelHeadlessMirrorName, "db-east"), "10.96.1.1")
	db = Compute(append(svcs, *em0), sl, "-global").Globals["db-global"]
	if want := []string{"10.96.1.1", "10.96.2.1", "192.0.2.1", "192.0.2.3"}; !slices.Equal(db.IPv4, want) || !slices.Equal(db.Hosts["db-0-east"], []string{"10.96.1.1"}) {
		t.Errorf("east rewritten: addresses %v hosts %v, want %v and db-0-east at its endpoint mirror", db.IPv4, db.Hosts, want)
	}
}

// TestAgreesWithAggregate: over random worlds, this second implementation
// and package aggregate agree on every global's ready addresses and names.
func TestAgreesWithAggregate(t *testing.T) {
	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	for seed := range uint64(300) {
		svcs, sl := randomWorld(rand.New(rand.NewPCG(seed, 3)))
		w := Compute(svcs, sl, aggregate.DefaultSuffix)
		for base, in := range inputs(svcs, sl, sel) {
			name := aggregate.GlobalName(base, aggregate.DefaultSuffix)
			got, exists := w.Globals[name]
			if exists != aggregate.Exists(in) && !w.Theirs[name] {
				t.Fatalf("world %d: %s exists %v here, %v in aggregate", seed, name, exists, aggregate.Exists(in))
			}
			if !exists {
				continue
			}
			want := Global{Hosts: map[string][]string{}}
			for _, ep := range aggregate.Aggregate(in).Endpoints {
				if !ep.Ready {
					continue
				}
				for _, a := range ep.Addresses {
					if ep.AddressType == discoveryv1.AddressTypeIPv4 {
						want.IPv4 = append(want.IPv4, a)
					} else {
						want.IPv6 = append(want.IPv6, a)
					}
					if ep.Hostname != "" {
						want.Hosts[ep.Hostname] = append(want.Hosts[ep.Hostname], a)
					}
				}
			}
			want.IPv4, want.IPv6 = sortedUnique(want.IPv4), sortedUnique(want.IPv6)
			for h := range want.Hosts {
				want.Hosts[h] = sortedUnique(want.Hosts[h])
			}
			if !slices.Equal(got.IPv4, want.IPv4) || !slices.Equal(got.IPv6, want.IPv6) || !maps.EqualFunc(got.Hosts, want.Hosts, slices.Equal) {
				t.Fatalf("world %d, %s:\n here      %+v\n aggregate %+v", seed, name, got, want)
			}
		}
	}
}

// inputs groups a world into aggregate's inputs, the way package source does.
func inputs(svcs []corev1.Service, sl []discoveryv1.EndpointSlice, local labels.Selector) map[string]aggregate.Input {
	out := map[string]aggregate.Input{}
	slicesOf := map[string][]*discoveryv1.EndpointSlice{}
	for i := range sl {
		slicesOf[sl[i].Labels[discoveryv1.LabelServiceName]] = append(slicesOf[sl[i].Labels[discoveryv1.LabelServiceName]], &sl[i])
	}
	for i := range svcs {
		c, _ := aggregate.Classify(&svcs[i], local)
		if c.Role != aggregate.RoleHeadlessMirror && c.Role != aggregate.RoleLocal {
			continue
		}
		in := out[c.Base]
		in.Namespace, in.Base, in.Suffix = "ns", c.Base, aggregate.DefaultSuffix
		member := aggregate.Member{Cluster: c.Cluster, Service: &svcs[i], Slices: slicesOf[svcs[i].Name]}
		if c.Role == aggregate.RoleHeadlessMirror {
			member.Slices = rebuiltIfRewritten(member.Slices, &svcs[i], c.Cluster, svcs)
		}
		in.Members = append(in.Members, member)
		// As source gathers them: slices labelled as an endpoint mirror's
		// of this headless mirror, whether or not that Service still exists.
		for j := range sl {
			if sl[j].Labels[aggregate.LabelHeadlessMirrorName] == svcs[i].Name && c.Role == aggregate.RoleHeadlessMirror {
				if in.EndpointMirrors == nil {
					in.EndpointMirrors = map[string][]*discoveryv1.EndpointSlice{}
				}
				em := sl[j].Labels[discoveryv1.LabelServiceName]
				in.EndpointMirrors[em] = append(in.EndpointMirrors[em], &sl[j])
			}
		}
		out[c.Base] = in
	}
	return out
}

// rebuiltIfRewritten is what source reads of a headless mirror whose slices
// hold an address without a hostname (Linkerd's gateway) and which it never
// saw named, as in these worlds: a slice of the pods its endpoint mirrors
// stand for, where it has any.
func rebuiltIfRewritten(live []*discoveryv1.EndpointSlice, headless *corev1.Service, cluster string, svcs []corev1.Service) []*discoveryv1.EndpointSlice {
	if !slices.ContainsFunc(live, func(s *discoveryv1.EndpointSlice) bool {
		return slices.ContainsFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool { return e.Hostname == nil || *e.Hostname == "" })
	}) {
		return live
	}
	var eps []fixture.Endpoint
	for _, em := range svcs {
		if em.Labels[aggregate.LabelHeadlessMirrorName] == headless.Name && em.Labels[aggregate.LabelClusterName] == cluster {
			eps = append(eps, fixture.Endpoint{Host: strings.TrimSuffix(em.Name, "-"+cluster), Addrs: []string{em.Spec.ClusterIP}})
		}
	}
	if len(eps) == 0 {
		return live
	}
	return []*discoveryv1.EndpointSlice{fixture.Slice(headless, headless.Name+"-ipv4", discoveryv1.AddressTypeIPv4, nil, eps...)}
}

// randomWorld is a namespace of random bases: local services or not, one to
// three mirrors, endpoints with random hostnames (shared, missing, too long),
// readiness and addresses (some invalid), endpoint mirrors with live or dead
// gateways, and now and then a user's Service holding a global name.
func randomWorld(r *rand.Rand) ([]corev1.Service, []discoveryv1.EndpointSlice) {
	var svcs []corev1.Service
	var sl []discoveryv1.EndpointSlice
	hosts := []string{"", "db-0", "db-1", "db-0-east", "x", "a-very-long-hostname-that-is-almost-too-long-for-a-dns-label-xy"}
	addSlices := func(svc *corev1.Service) {
		for i := range r.IntN(3) {
			family, addr := discoveryv1.AddressTypeIPv4, func() string { return fmt.Sprintf("192.0.2.%d", 1+r.IntN(8)) }
			if r.IntN(4) == 0 {
				family, addr = discoveryv1.AddressTypeIPv6, func() string { return fmt.Sprintf("2001:db8::%x", 1+r.IntN(8)) }
			}
			var eps []fixture.Endpoint
			for range r.IntN(4) {
				e := fixture.Ready(hosts[r.IntN(len(hosts))], addr())
				if r.IntN(3) == 0 {
					e.Ready = new(r.IntN(2) == 0)
				}
				if r.IntN(10) == 0 {
					e.Addrs = []string{"010.0.0.1"}
				}
				eps = append(eps, e)
			}
			sl = append(sl, *fixture.Slice(svc, fmt.Sprintf("%s-%d", svc.Name, i), family, nil, eps...))
		}
	}
	for b := range 1 + r.IntN(3) {
		base := fmt.Sprintf("s%d", b)
		if r.IntN(2) == 0 {
			l := fixture.LocalService("ns", base, peer)
			svcs = append(svcs, *l)
			addSlices(l)
		}
		for _, c := range []string{"east", "west", "north"}[:r.IntN(4)] {
			m := fixture.HeadlessMirror("ns", base, c, peer)
			svcs = append(svcs, *m)
			addSlices(m)
			for _, h := range []string{"db-0", "db-1", "x"} {
				if r.IntN(3) == 0 && !slices.ContainsFunc(svcs, func(s corev1.Service) bool { return s.Name == h+"-"+c }) {
					em, es := fixture.EndpointMirror("ns", h+"-"+c, c, m.Name, r.IntN(2) == 0)
					if r.IntN(4) != 0 { // else deleted, its slice not collected yet
						svcs = append(svcs, *em)
					}
					sl = append(sl, *es)
				}
			}
		}
		if r.IntN(8) == 0 {
			svcs = append(svcs, *fixture.Service("ns", base+"-global", nil, "10.96.9.9", peer))
		}
	}
	return svcs, sl
}
