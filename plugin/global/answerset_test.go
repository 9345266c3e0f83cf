package global

import (
	"slices"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// A record's host is held behind its length in one byte: hosts are DNS
// labels (two in the clusterset view), and one longer than a byte counts is
// held cut, its address still answered, the hosts after it unharmed.
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
	if want := []string{"db-0", long[:maxHost], "db-2"}; !slices.Equal(hosts, want) {
		t.Errorf("hosts %q, want %q", hosts, want)
	}
	if got := s.hostRecords("db-2"); len(got) != 1 || s.ip(s.recs[got[0]].addr).String() != "10.0.0.3" {
		t.Errorf("db-2's records %v", got)
	}
	if s.naddrs() != 3 {
		t.Errorf("%d addresses, want 3", s.naddrs())
	}
}

// Globals whose endpoints have the same ports hold one port set between them.
func TestAnswerSetsSharePortSets(t *testing.T) {
	view := func(name string, port int32) aggregate.View {
		p := discoveryv1.EndpointPort{Name: new("peer"), Port: new(port)}
		return aggregate.View{Namespace: "ns", Name: name, Endpoints: []aggregate.Endpoint{{Addresses: []string{"10.0.0.1"},
			AddressType: discoveryv1.AddressTypeIPv4, Hostname: "db-0", Ready: true, Ports: []discoveryv1.EndpointPort{p}}}}
	}
	a, b, c := newAnswerSet(view("a-global", 7000)), newAnswerSet(view("b-global", 7000)), newAnswerSet(view("c-global", 7001))
	if &a.ports[0][0] != &b.ports[0][0] {
		t.Error("two globals of the same ports hold a port set each")
	}
	if c.ports[0][0].port != 7001 || a.ports[0][0].port != 7000 {
		t.Errorf("ports %v and %v, want 7000 and 7001", a.ports, c.ports)
	}
}
