package slicewriter

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The keys below are plain strings built from the fields, not
// k8s.io/endpointslice's hashes: those format their object with go-spew,
// and at some 90 per sync (each endpoint, each port set) they were half
// of the controller's CPU in a storm of 1,000 globals, CPU its writes'
// API server shares on small control planes.

// groupKey identifies the slices that can take an endpoint: one address family
// and one set of ports, since a slice has exactly one of each.
type groupKey struct {
	addressType discoveryv1.AddressType
	ports       portsKey
}

// portsKey identifies a set of ports whatever their order.
type portsKey string

// group is the desired endpoints of one groupKey.
type group struct {
	ports []discoveryv1.EndpointPort
	// order is the desired endpoints in view order, so new slices fill
	// deterministically; set finds an endpoint by identity (addresses+hostname).
	order []*discoveryv1.Endpoint
	set   map[endpointKey]*discoveryv1.Endpoint
}

// keyOf computes the group key of ports, and returns them sorted, in a copy:
// the ports may be shared with a cache.
func keyOf(addressType discoveryv1.AddressType, ports []discoveryv1.EndpointPort) (groupKey, []discoveryv1.EndpointPort) {
	sorted := slices.Clone(ports)
	if sorted == nil {
		sorted = []discoveryv1.EndpointPort{}
	}
	slices.SortFunc(sorted, comparePorts)
	var b strings.Builder
	for _, p := range sorted {
		writeOptional(&b, p.Name)
		writeOptional(&b, (*string)(p.Protocol))
		if p.Port != nil {
			b.WriteString(strconv.Itoa(int(*p.Port)))
		}
		b.WriteByte('/')
		writeOptional(&b, p.AppProtocol)
		b.WriteByte(';')
	}
	return groupKey{addressType, portsKey(b.String())}, sorted
}

// writeOptional writes s, its absence told apart from "", and a separator
// no name or protocol holds.
func writeOptional(b *strings.Builder, s *string) {
	if s != nil {
		b.WriteByte('=')
		b.WriteString(*s)
	}
	b.WriteByte('/')
}

func comparePorts(a, b discoveryv1.EndpointPort) int {
	return cmp.Or(compareOptional(a.Name, b.Name), compareOptional((*string)(a.Protocol), (*string)(b.Protocol)),
		compareOptional(a.Port, b.Port), compareOptional(a.AppProtocol, b.AppProtocol))
}

// compareOptional orders absent before any value.
func compareOptional[T cmp.Ordered](a, b *T) int {
	switch {
	case a == nil || b == nil:
		return cmp.Compare(btoi(a != nil), btoi(b != nil))
	default:
		return cmp.Compare(*a, *b)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// endpointKey is an endpoint's identity, as Kubernetes' EndpointSlice
// reconciler hashes it: its addresses in any order, its hostname and the
// object it points at.
type endpointKey string

func keyOfEndpoint(e *discoveryv1.Endpoint) endpointKey {
	addrs := e.Addresses
	if !slices.IsSorted(addrs) {
		addrs = slices.Sorted(slices.Values(addrs))
	}
	var b strings.Builder
	for _, a := range addrs {
		b.WriteString(a)
		b.WriteByte(',')
	}
	b.WriteByte('|')
	writeOptional(&b, e.Hostname)
	if ref := e.TargetRef; ref != nil {
		b.WriteString(ref.Namespace)
		b.WriteByte('/')
		b.WriteString(ref.Name)
	}
	return endpointKey(b.String())
}

// desiredGroups turns the view's endpoints into slice endpoints grouped by
// address family and ports. The view lists each endpoint once (aggregate
// merged the duplicates).
func desiredGroups(endpoints []aggregate.Endpoint) map[groupKey]*group {
	groups := map[groupKey]*group{}
	for i := range endpoints {
		ep := toSliceEndpoint(&endpoints[i])
		k, ports := keyOf(endpoints[i].AddressType, endpoints[i].Ports)
		g := groups[k]
		if g == nil {
			g = &group{ports: ports, set: map[endpointKey]*discoveryv1.Endpoint{}}
			groups[k] = g
		}
		g.set[keyOfEndpoint(ep)] = ep
		g.order = append(g.order, ep)
	}
	return groups
}

// toSliceEndpoint is the endpoint as written into a global slice: readiness
// always explicit, no targetRef (it would point into another cluster), zone and
// node name only when the member had them.
func toSliceEndpoint(e *aggregate.Endpoint) *discoveryv1.Endpoint {
	ready := e.Ready
	out := &discoveryv1.Endpoint{
		// Sorted, as Kubernetes writes them (a copy: the slice outlives the view).
		Addresses:  slices.Sorted(slices.Values(e.Addresses)),
		Conditions: discoveryv1.EndpointConditions{Ready: &ready},
	}
	if e.Hostname != "" {
		h := e.Hostname
		out.Hostname = &h
	}
	if e.Source != nil {
		out.Zone = cloneString(e.Source.Zone)
		out.NodeName = cloneString(e.Source.NodeName)
	}
	return out
}

func cloneString(s *string) *string {
	if s == nil {
		return nil
	}
	v := *s
	return &v
}
