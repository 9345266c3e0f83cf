package global

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Records are kept by host, and a record's host behind its length in one byte: hosts are DNS
// labels (two in the clusterset view), and one longer than a byte counts is
// kept cut, its address still answered, the hosts after it unharmed.
func TestAnswerSetHostsAreHeldWithTheirLength(t *testing.T) {
	long := strings.Repeat("a", 300)
	v := aggregate.View{Namespace: "ns", Name: "db-global", Endpoints: []aggregate.Endpoint{
		{Addresses: []string{"10.0.0.1"}, AddressType: discoveryv1.AddressTypeIPv4, Hostname: "db-0", Ready: true},
		{Addresses: []string{"10.0.0.2"}, AddressType: discoveryv1.AddressTypeIPv4, Hostname: long, Ready: true},
		{Addresses: []string{"10.0.0.3"}, AddressType: discoveryv1.AddressTypeIPv4, Hostname: "db-2", Ready: true},
	}}
	s := newAnswerSet(v)
	var hosts []string
	for i := range s.recs {
		hosts = append(hosts, s.host(&s.recs[i]))
	}
	if want := []string{long[:maxHost], "db-0", "db-2"}; !slices.Equal(hosts, want) {
		t.Errorf("hosts %q, want %q (by host)", hosts, want)
	}
	if lo, hi := s.hostRecords("db-2"); hi != lo+1 || s.ip(s.recs[lo].addr).String() != "10.0.0.3" {
		t.Errorf("db-2's records %d to %d", lo, hi)
	}
	if s.naddrs() != 3 {
		t.Errorf("%d addresses, want 3", s.naddrs())
	}
}

// Globals whose endpoints have the same ports share one interned port set.
func TestAnswerSetsSharePortSets(t *testing.T) {
	view := func(name string, port int32) aggregate.View {
		p := discoveryv1.EndpointPort{Name: new("peer"), Port: new(port)}
		return aggregate.View{Namespace: "ns", Name: name, Endpoints: []aggregate.Endpoint{{Addresses: []string{"10.0.0.1"},
			AddressType: discoveryv1.AddressTypeIPv4, Hostname: "db-0", Ready: true, Ports: []discoveryv1.EndpointPort{p}}}}
	}
	a, b, c := newAnswerSet(view("a-global", 7000)), newAnswerSet(view("b-global", 7000)), newAnswerSet(view("c-global", 7001))
	if a.ports != b.ports || &a.ports.sets[0][0] != &b.ports.sets[0][0] {
		t.Error("two globals of the same ports have a port set each")
	}
	// One of two port sets, the first shared: the shared list stays one.
	two := view("d-global", 7000)
	two.Endpoints = append(two.Endpoints, view("", 7001).Endpoints...)
	two.Endpoints[1].Addresses = []string{"10.0.0.2"}
	if d := newAnswerSet(two); len(d.ports.sets) != 2 || d.ports.sets[1][0].port != 7001 || len(a.ports.sets) != 1 || len(newAnswerSet(view("e-global", 7000)).ports.sets) != 1 {
		t.Errorf("two port sets: %v; the shared list now %v", d.ports.sets, a.ports.sets)
	}
	if c.ports.sets[0][0].port != 7001 || a.ports.sets[0][0].port != 7000 {
		t.Errorf("ports %v and %v, want 7000 and 7001", a.ports.sets, c.ports.sets)
	}
}

// A host's records are found by their lower-case host, in the order the
// entries give them, however the hosts are spelled.
func TestHostRecordsByLowerCaseHost(t *testing.T) {
	ep := func(host, addr string) aggregate.Endpoint {
		return aggregate.Endpoint{Addresses: []string{addr}, AddressType: discoveryv1.AddressTypeIPv4, Hostname: host, Ready: true}
	}
	for _, hosts := range [][]string{{"b", "a", "c", "a"}, {"B", "a", "C", "A"}} {
		v := aggregate.View{Namespace: "ns", Name: "db-global"}
		for i, h := range hosts {
			v.Endpoints = append(v.Endpoints, ep(h, "10.0.0."+strconv.Itoa(i+1)))
		}
		s := newAnswerSet(v)
		for host, want := range map[string][]string{"a": {"10.0.0.2", "10.0.0.4"}, "b": {"10.0.0.1"}, "c": {"10.0.0.3"}, "d": nil} {
			lo, hi := s.hostRecords(host)
			var got []string
			for i := lo; i < hi; i++ {
				got = append(got, s.ip(s.recs[i].addr).String())
			}
			if !slices.Equal(got, want) {
				t.Errorf("hosts %q: %s's records %v, want %v", hosts, host, got, want)
			}
		}
	}
}
