package aggregate

import "fmt"

// AnnotationDrain drains a cluster's endpoints for maintenance, at the level
// its value names (Drain). On a Linkerd Link (metadata only, so every Link
// version works) it drains the cluster the Link is named after, which is
// the cluster name Linkerd suffixes that link's mirrors with; on a local
// member service, the local endpoints of that service's base (the local
// cluster has no Link). Linkerd copies every annotation of an exported
// Service onto its mirrors in every cluster that links it, so a local drain
// written in cluster X reaches each of those clusters on X's headless mirror,
// where it drains X's endpoints of that base: the drain is written once, in
// the cluster under maintenance.
const AnnotationDrain = "globalmirror.io/drain"

// Drain is how far a cluster's endpoints are drained. A drained endpoint
// is not ready, so every rule that reads readiness (NXDOMAIN or NODATA,
// what the controller writes ready) keeps its meaning; at DrainShared its
// own per-pod names still answer (Endpoint.NameReady).
type Drain uint8

const (
	// NotDrained: the endpoints are answered as their readiness says.
	NotDrained Drain = iota
	// DrainShared: the endpoints leave every shared answer (the global's
	// name, its SRV records, the clusterset service name, native names and
	// the controller's EndpointSlices, written not ready), so no new client
	// is sent to them, while their own per-pod names and PTR records keep
	// answering, so that members keep replicating.
	DrainShared
	// DrainAll: the endpoints leave every name, as if unlinked, with
	// nothing deleted.
	DrainAll
)

// Drain levels as the annotation spells them.
const (
	DrainSharedValue = "shared"
	DrainAllValue    = "all"
)

// String is the annotation's value that declares d ("" for none).
func (d Drain) String() string {
	switch d {
	case DrainShared:
		return DrainSharedValue
	case DrainAll:
		return DrainAllValue
	}
	return ""
}

// ParseDrain reads an AnnotationDrain value; absent or empty is NotDrained.
func ParseDrain(v string) (Drain, error) {
	switch v {
	case "":
		return NotDrained, nil
	case DrainSharedValue:
		return DrainShared, nil
	case DrainAllValue:
		return DrainAll, nil
	}
	return NotDrained, fmt.Errorf("unknown %s value %s: want %q or %q",
		AnnotationDrain, quote(v), DrainSharedValue, DrainAllValue)
}

// SkipInvalidDrain: an AnnotationDrain value that is neither level: on a
// Link, the drain it had stays; on a service it drains nothing.
const SkipInvalidDrain SkipReason = "InvalidDrain"

// ReasonInvalidDrain is the view's problem for a local member service whose
// drain annotation is neither level.
const ReasonInvalidDrain = "InvalidDrain"

// drainOf is the drain of member m: for a headless mirror, the stronger of
// its cluster's in drains (the Link's) and its own annotation's (copied by
// Linkerd from the exported service, a drain written in that cluster); for
// the local service its own annotation's; with the problem an unknown value
// is.
func drainOf(m Member, drains map[string]Drain, namespace string) (Drain, *Problem) {
	var link Drain
	if !m.Local() {
		link = drains[m.Cluster]
	}
	if m.Service == nil {
		return link, nil
	}
	d, err := ParseDrain(m.Service.Annotations[AnnotationDrain])
	if err != nil {
		return link, &Problem{ReasonInvalidDrain, "service " + namespace + "/" + m.Service.Name + ": " + err.Error() + "; it drains nothing"}
	}
	return max(link, d), nil
}
