package slicewriter

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// plan is the writes that turn the existing slices into the desired ones.
type plan struct {
	create, update, delete []*discoveryv1.EndpointSlice
}

func (p plan) empty() bool { return len(p.create)+len(p.update)+len(p.delete) == 0 }

// planner maps desired endpoints onto existing slices with as few writes as
// possible, the way Kubernetes' EndpointSlice reconciler does: an endpoint stays
// in the slice that has it, a changed endpoint is rewritten in place, new
// endpoints go first into slices that are written anyway, then into one slice
// they all fit in, then into new slices; emptied slices are deleted, or reused
// for a new slice of the same family instead of a delete plus a create.
type planner struct {
	meta  sliceMeta
	limit int
}

func (pl planner) plan(desired map[groupKey]*group, existing []*discoveryv1.EndpointSlice) plan {
	existingByKey := map[groupKey][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k, _ := keyOf(s.AddressType, s.Ports)
		existingByKey[k] = append(existingByKey[k], s)
	}
	var p plan
	// Sorted keys and names keep the writes deterministic for one input.
	for _, k := range slices.SortedFunc(maps.Keys(desired), compareKeys) {
		pl.planGroup(&p, k, desired[k], existingByKey[k])
	}
	for _, k := range slices.SortedFunc(maps.Keys(existingByKey), compareKeys) {
		if desired[k] == nil {
			p.delete = append(p.delete, existingByKey[k]...)
		}
	}
	recycle(&p)
	return p
}

func (pl planner) planGroup(p *plan, k groupKey, g *group, existing []*discoveryv1.EndpointSlice) {
	slices.SortFunc(existing, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	placed := map[*discoveryv1.Endpoint]bool{}
	var updates, unchanged []*discoveryv1.EndpointSlice

	// 1. Keep what is still desired where it is; drop the rest.
	for _, s := range existing {
		var kept []discoveryv1.Endpoint
		changed := false
		for i := range s.Endpoints {
			want := g.set[keyOfEndpoint(&s.Endpoints[i])]
			if want == nil || placed[want] || len(kept) >= pl.limit {
				changed = true // gone, a duplicate, or over the limit
				continue
			}
			placed[want] = true
			kept = append(kept, *want)
			if !sameEndpoint(want, &s.Endpoints[i]) {
				changed = true
			}
		}
		switch {
		case len(kept) == 0:
			p.delete = append(p.delete, s)
		case changed || !pl.meta.matches(s):
			updates = append(updates, pl.meta.build(s, k.addressType, g.ports, kept))
		default:
			unchanged = append(unchanged, s)
		}
	}
	var remaining []*discoveryv1.Endpoint
	for _, ep := range g.order {
		if !placed[ep] {
			remaining = append(remaining, ep)
		}
	}

	// 2. Top up slices that are written anyway, fullest first.
	slices.SortStableFunc(updates, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(len(b.Endpoints), len(a.Endpoints)) })
	for _, s := range updates {
		remaining = fill(s, remaining, pl.limit)
	}

	// 3. Put the rest into one unchanged slice they all fit in, else new slices.
	for len(remaining) > 0 {
		var s *discoveryv1.EndpointSlice
		if i := sliceToFill(unchanged, len(remaining), pl.limit); i >= 0 {
			s = pl.meta.build(unchanged[i], k.addressType, g.ports, slices.Clone(unchanged[i].Endpoints))
			unchanged = slices.Delete(unchanged, i, i+1)
			updates = append(updates, s)
		} else {
			s = pl.meta.build(nil, k.addressType, g.ports, nil)
			p.create = append(p.create, s)
		}
		remaining = fill(s, remaining, pl.limit)
	}
	p.update = append(p.update, updates...)
}

// fill moves endpoints from remaining into s up to limit and returns the rest.
func fill(s *discoveryv1.EndpointSlice, remaining []*discoveryv1.Endpoint, limit int) []*discoveryv1.Endpoint {
	for len(remaining) > 0 && len(s.Endpoints) < limit {
		s.Endpoints = append(s.Endpoints, *remaining[0])
		remaining = remaining[1:]
	}
	return remaining
}

// sliceToFill is the fullest slice that still has room for n endpoints, or -1.
func sliceToFill(candidates []*discoveryv1.EndpointSlice, n, limit int) int {
	best := -1
	for i, s := range candidates {
		if len(s.Endpoints)+n <= limit && (best < 0 || len(s.Endpoints) > len(candidates[best].Endpoints)) {
			best = i
		}
	}
	return best
}

// recycle turns a create plus a delete of the same address family into one
// update of the slice that would have been deleted.
func recycle(p *plan) {
	for i := 0; i < len(p.create); i++ {
		c := p.create[i]
		j := slices.IndexFunc(p.delete, func(d *discoveryv1.EndpointSlice) bool { return d.AddressType == c.AddressType })
		if j < 0 {
			continue
		}
		c.Name, c.GenerateName, c.ResourceVersion = p.delete[j].Name, "", p.delete[j].ResourceVersion
		p.update = append(p.update, c)
		p.delete = slices.Delete(p.delete, j, j+1)
		p.create = slices.Delete(p.create, i, i+1)
		i--
	}
}

// sameEndpoint compares what the identity (keyOfEndpoint) leaves out.
// Readiness is compared as written: nil is not the same as true, since the
// global slices always say it explicitly.
func sameEndpoint(want, got *discoveryv1.Endpoint) bool {
	return endpointsliceutil.EndpointsEqualBeyondHash(want, got)
}

func compareKeys(a, b groupKey) int {
	return cmp.Or(strings.Compare(string(a.addressType), string(b.addressType)), strings.Compare(string(a.ports), string(b.ports)))
}
