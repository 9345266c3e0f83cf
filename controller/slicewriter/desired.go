package slicewriter

import (
	"slices"

	"github.com/globalmirror/globalmirror/aggregate"
	discoveryv1 "k8s.io/api/discovery/v1"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// groupKey identifies the slices that can take an endpoint: one address family
// and one set of ports, since a slice has exactly one of each.
type groupKey struct {
	addressType discoveryv1.AddressType
	ports       endpointsliceutil.PortMapKey
}

// group is the desired endpoints of one groupKey.
type group struct {
	ports []discoveryv1.EndpointPort
	// order is the desired endpoints in view order, so new slices fill
	// deterministically; set finds an endpoint by identity (addresses+hostname).
	order []*discoveryv1.Endpoint
	set   endpointsliceutil.EndpointSet
}

// keyOf computes the group key of ports without touching them: the hash helper
// sorts its argument in place and the ports may be shared with a cache.
func keyOf(addressType discoveryv1.AddressType, ports []discoveryv1.EndpointPort) (groupKey, []discoveryv1.EndpointPort) {
	sorted := slices.Clone(ports)
	if sorted == nil {
		sorted = []discoveryv1.EndpointPort{}
	}
	return groupKey{addressType, endpointsliceutil.NewPortMapKey(sorted)}, sorted
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
			g = &group{ports: ports, set: endpointsliceutil.EndpointSet{}}
			groups[k] = g
		}
		g.set.Insert(ep)
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
		// Cloned: the set's hashing sorts addresses in place.
		Addresses:  slices.Clone(e.Addresses),
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
