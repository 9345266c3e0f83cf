package source

import (
	"cmp"
	"hash/maphash"
	"slices"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// mirrorSlice is what the index keeps of an endpoint mirror's slice, in a
// list sorted by key in its headless mirror's entry: the endpoint mirror
// Service it belongs to and whether any endpoint is ready, all that
// readiness reads of it (aggregate.MirrorEndpointReady). Names are stored as
// hashes (nameHash): an endpoint mirror is looked up by the name its
// headless mirror's endpoint gives it, never listed. Three words
// (TestMirrorSliceSize), the bulk of a large world's index: each hash gives
// up its low bits to its feed and the flags; kept in a list, not a
// map. Its version lets a relist skip all of it that is as it was
// (kubeclient.CurrentSink), making no garbage for it.
type mirrorSlice struct {
	key     uint64 // the slice's name hashed; the low bit, its feed
	service uint64 // its kubernetes.io/service-name hashed; the low two bits, its flags
	rv      kubeclient.Version
}

// The flags in a mirrorSlice's service.
const (
	mirrorReadyFlag     = 1 << iota // an endpoint is ready
	mirrorDeliveredFlag             // its list mark (listMarks)
	mirrorFlags         = mirrorReadyFlag | mirrorDeliveredFlag
)

// mirrorKey is the key of the slice whose name hashes to name, delivered
// by feed.
func mirrorKey(name uint64, feed sliceFeed) uint64 { return name&^1 | uint64(feed&1) }

// mirrorService is the service hash a mirrorSlice stores for a name's hash.
func mirrorService(name uint64) uint64 { return name &^ mirrorFlags }

func newMirrorSlice(name, service uint64, feed sliceFeed, ready bool, rv kubeclient.Version) mirrorSlice {
	m := mirrorSlice{key: mirrorKey(name, feed), service: mirrorService(service) | mirrorDeliveredFlag, rv: rv}
	if ready {
		m.service |= mirrorReadyFlag
	}
	return m
}

func (m mirrorSlice) feed() sliceFeed     { return sliceFeed(m.key & 1) }
func (m mirrorSlice) serviceHash() uint64 { return mirrorService(m.service) }
func (m mirrorSlice) ready() bool         { return m.service&mirrorReadyFlag != 0 }
func (m mirrorSlice) delivered() bool     { return m.service&mirrorDeliveredFlag != 0 }

// sameAs reports whether m and o say the same, whatever their versions and
// list mark.
func (m mirrorSlice) sameAs(o mirrorSlice) bool {
	return m.key == o.key && m.serviceHash() == o.serviceHash() && m.ready() == o.ready()
}

func (m mirrorSlice) withDelivered(delivered bool) mirrorSlice {
	m.service &^= mirrorDeliveredFlag
	if delivered {
		m.service |= mirrorDeliveredFlag
	}
	return m
}

// mirrorReady reports whether any of an endpoint mirror's slice's endpoints is ready.
func mirrorReady(sl *discoveryv1.EndpointSlice) bool {
	for i := range sl.Endpoints {
		if aggregate.EndpointReady(&sl.Endpoints[i]) {
			return true
		}
	}
	return false
}

// nameHash hashes the names of endpoint mirrors and their slices. Seeded
// per process: nobody can write two names that collide on purpose, and two
// of the up to a few thousand names under one headless mirror collide by
// chance (in the 62 or 63 bits kept) once in 2^40 or more.
type nameHash maphash.Seed

func (h nameHash) of(name string) uint64 { return maphash.String(maphash.Seed(h), name) }

// findMirror is the position of the slice of key in the list l, sorted by
// it, or where it belongs.
func findMirror(l []mirrorSlice, key uint64) (int, bool) {
	return slices.BinarySearchFunc(l, key, func(m mirrorSlice, k uint64) int { return cmp.Compare(m.key, k) })
}

// The sparse slices an endpoint mirror's readiness is read from: one ready
// endpoint, or none. Shared, never modified.
var (
	readyMirror    = []*discoveryv1.EndpointSlice{{Endpoints: []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: boolPtr(true)}}}}}
	notReadyMirror = []*discoveryv1.EndpointSlice{{}}
)

var (
	trueValue, falseValue = true, false
)

// boolPtr points at one of two shared values, so that sparse objects
// allocate nothing for a condition.
func boolPtr(b bool) *bool {
	if b {
		return &trueValue
	}
	return &falseValue
}
