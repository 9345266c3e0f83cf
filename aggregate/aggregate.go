package aggregate

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Member is one service that contributes endpoints to a global service.
type Member struct {
	// Cluster is the remote cluster of a headless mirror; empty for the local service.
	Cluster string
	Service *corev1.Service
	Slices  []*discoveryv1.EndpointSlice
}

// Local reports whether m is the local service.
func (m Member) Local() bool { return m.Cluster == "" }

// Input is everything known about one base in one namespace.
type Input struct {
	Namespace string
	Base      string
	Suffix    string
	Members   []Member
	// EndpointMirrors has the EndpointSlices of the members' Linkerd
	// endpoint mirrors, by endpoint mirror name ("db-0-east"). Where a mirror
	// endpoint's endpoint mirror has slices, they decide its readiness (see
	// MirrorEndpointReady).
	EndpointMirrors map[string][]*discoveryv1.EndpointSlice
	// Drains are the drained clusters, by name (the Links' AnnotationDrain);
	// the local service's drain is its own annotation.
	Drains map[string]Drain
}

// Endpoint is one endpoint of the global service.
type Endpoint struct {
	// Addresses are of one family, as in the member's slice.
	Addresses   []string
	AddressType discoveryv1.AddressType
	// Hostname is the global per-pod name; empty when the member endpoint had
	// none or lost it (collision, invalid name).
	Hostname string
	// Ready: answered by the shared names and written ready; false while
	// its cluster is drained.
	Ready bool
	// ReadyBy says what decided the readiness the endpoint has undrained.
	ReadyBy Readiness
	// NameReady: its own per-pod names (and PTR) answer. Ready, or ready
	// but drained at DrainShared.
	NameReady bool
	// Drained is its cluster's drain.
	Drained Drain
	// Cluster is the remote cluster the endpoint came from; empty for local ones.
	Cluster string
	// Ports are the member slice's ports, shared, never modified.
	Ports []discoveryv1.EndpointPort
	// Source is the member endpoint, for fields the view does not interpret
	// (zone, node name, target reference).
	Source *discoveryv1.Endpoint
}

// Readiness is what decided an endpoint's readiness.
type Readiness uint8

const (
	// ByCondition: the member endpoint's own condition (a local pod's).
	ByCondition Readiness = iota
	// ByEndpointMirror: a mirror endpoint's Linkerd endpoint mirror, where
	// Linkerd reports its gateway's probe (MirrorEndpointReady).
	ByEndpointMirror
	// ByHeadlessMirror: a mirror endpoint without an endpoint mirror: the
	// headless mirror's own condition.
	ByHeadlessMirror
)

// String names r as status and the logs show it.
func (r Readiness) String() string {
	switch r {
	case ByEndpointMirror:
		return "its endpoint mirror"
	case ByHeadlessMirror:
		return "the headless mirror"
	}
	return "its own condition"
}

// Problem is something in the input that was skipped or changed.
type Problem struct {
	Reason string // CamelCase, low cardinality: for events and metric labels
	Detail string // human readable, names the object
}

// Problem reasons.
const (
	ReasonHostnameCollision = "HostnameCollision"
	ReasonInvalidHostname   = "InvalidHostname"
	ReasonInvalidAddress    = "InvalidAddress"
	ReasonInvalidName       = "InvalidGlobalName"
)

// View is the global service of one base.
type View struct {
	Namespace string
	Base      string
	Name      string
	// Ports is the union of the members' Service ports.
	Ports     []corev1.ServicePort
	Endpoints []Endpoint
	Problems  []Problem
	// TriggerTime is the newest endpoints.kubernetes.io/last-change-trigger-time of
	// the member slices; zero when none carries one.
	TriggerTime time.Time
}

// Exists reports whether the view describes a global service that should exist:
// at least one headless mirror and a valid name. A local service alone makes none.
func Exists(in Input) bool {
	if errs := IsDNS1035Label(GlobalName(in.Base, in.Suffix)); len(errs) > 0 {
		return false
	}
	return in.HasMirror()
}

// Native reports whether the base's local service opted into native names
// (AnnotationIncludeMirrors "true"): its own name then answers the view's
// endpoints, as its global does, whether or not a mirror exists yet.
func Native(in Input) bool {
	return slices.ContainsFunc(in.Members, func(m Member) bool {
		return m.Local() && m.Service != nil && m.Service.Annotations[AnnotationIncludeMirrors] == "true"
	})
}

// Mirrored is v with only the mirrors' endpoints: what native names add to
// the local service, whose own endpoints Kubernetes writes already.
func (v View) Mirrored() View {
	out := v
	out.Endpoints = slices.DeleteFunc(slices.Clone(v.Endpoints), func(e Endpoint) bool { return e.Cluster == "" })
	return out
}

// HasMirror reports whether a headless mirror is among the members.
func (in Input) HasMirror() bool {
	return slices.ContainsFunc(in.Members, func(m Member) bool { return !m.Local() })
}

// Aggregate computes the global view of in. Members may come in any order; the
// result is deterministic. Call Exists first: Aggregate does not decide whether
// the global should exist.
func Aggregate(in Input) View {
	v := View{Namespace: in.Namespace, Base: in.Base, Name: GlobalName(in.Base, in.Suffix)}
	if errs := IsDNS1035Label(v.Name); len(errs) > 0 {
		v.Problems = append(v.Problems, Problem{ReasonInvalidName, in.Namespace + "/" + v.Name + ": " + errs[0]})
		return v
	}
	members := slices.Clone(in.Members)
	// Priority: the local service first, then clusters by name. It decides
	// collisions and port conflicts.
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Cluster, b.Cluster) })

	v.Ports = unionPorts(members)
	for _, m := range members {
		drain, problem := drainOf(m, in.Drains, in.Namespace)
		if problem != nil {
			v.Problems = append(v.Problems, *problem)
		}
		v.addMember(m, in.EndpointMirrors, drain)
	}
	v.resolveCollisions()
	v.dedupe()
	slices.SortStableFunc(v.Endpoints, compareEndpoints)
	return v
}

// dedupe merges endpoints with the same family, name and addresses, which a
// member lists twice while Kubernetes moves an endpoint between slices. The
// copy is ready if either is, as DNS would answer it from either.
func (v *View) dedupe() {
	seen := make(map[string]int, len(v.Endpoints))
	out := v.Endpoints[:0]
	for _, ep := range v.Endpoints {
		k := string(ep.AddressType) + "|" + ep.Hostname + "|" + strings.Join(ep.Addresses, ",")
		if i, dup := seen[k]; dup {
			out[i].Ready = out[i].Ready || ep.Ready
			out[i].NameReady = out[i].NameReady || ep.NameReady
			continue
		}
		seen[k] = len(out)
		out = append(out, ep)
	}
	v.Endpoints = out
}

func (v *View) addMember(m Member, endpointMirrors map[string][]*discoveryv1.EndpointSlice, drain Drain) {
	slices := slices.Clone(m.Slices)
	// Deterministic order whatever the feed gave us.
	sortSlices(slices)
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN slices carry no addresses DNS could answer
		}
		if t, err := time.Parse(time.RFC3339Nano, s.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil && t.After(v.TriggerTime) {
			v.TriggerTime = t
		}
		for i := range s.Endpoints {
			src := &s.Endpoints[i]
			if !m.Local() && (src.Hostname == nil || *src.Hostname == "") {
				// Linkerd writes a headless mirror's addresses with their
				// hostnames only: one without is its gateway, written there
				// on an update of the exported Service
				// (handleRemoteExportedServiceUpdated). Never a member.
				continue
			}
			addrs, bad := validAddresses(src.Addresses, s.AddressType)
			if bad != "" {
				v.Problems = append(v.Problems, Problem{ReasonInvalidAddress,
					"endpoint slice " + s.Namespace + "/" + s.Name + ": " + bad})
			}
			if len(addrs) == 0 {
				continue
			}
			ep := Endpoint{
				Addresses:   addrs,
				AddressType: s.AddressType,
				Ready:       EndpointReady(src),
				Cluster:     m.Cluster,
				Ports:       s.Ports,
				Source:      src,
			}
			if src.Hostname != nil && *src.Hostname != "" {
				ep.Hostname = *src.Hostname
				if !m.Local() {
					ep.Hostname += "-" + m.Cluster
					ep.Ready = MirrorEndpointReady(ep.Ready, endpointMirrors[ep.Hostname])
					ep.ReadyBy = ByHeadlessMirror
					if len(endpointMirrors[ep.Hostname]) > 0 {
						ep.ReadyBy = ByEndpointMirror
					}
				}
				if errs := IsDNS1123Label(ep.Hostname); len(errs) > 0 {
					v.Problems = append(v.Problems, Problem{ReasonInvalidHostname,
						v.Namespace + "/" + v.Name + ": hostname " + quote(ep.Hostname) + " from " + memberName(m) + ": " + errs[0]})
					ep.Hostname = ""
				}
			}
			ep.NameReady = ep.Ready && drain != DrainAll
			if drain != NotDrained {
				ep.Ready, ep.Drained = false, drain
			}
			v.Endpoints = append(v.Endpoints, ep)
		}
	}
}

// EndpointReady reports whether e is ready: unless its condition says
// otherwise, as Kubernetes defines it.
func EndpointReady(e *discoveryv1.Endpoint) bool {
	return e.Conditions.Ready == nil || *e.Conditions.Ready
}

// MirrorEndpointReady is the readiness of a mirror endpoint, given the
// headless mirror's own condition and the EndpointSlices of its Linkerd
// endpoint mirror ("db-0-east" for the endpoint db-0 of cluster east).
// Where the endpoint mirror has slices, they decide, in both directions:
// ready if any of their endpoints is. Linkerd marks a dead gateway only on
// the endpoint mirrors, leaving the headless mirror ready; and a headless
// mirror written while the gateway was down stays not ready after it returns
// (Linkerd's endpoint repair skips headless mirrors) while its endpoint
// mirrors are repaired. Only without an endpoint mirror does the headless
// mirror's condition count.
func MirrorEndpointReady(headlessReady bool, endpointMirror []*discoveryv1.EndpointSlice) bool {
	if len(endpointMirror) == 0 {
		return headlessReady
	}
	for _, s := range endpointMirror {
		for i := range s.Endpoints {
			if EndpointReady(&s.Endpoints[i]) {
				return true
			}
		}
	}
	return false
}

// resolveCollisions removes the hostname from every endpoint whose name an
// endpoint of a higher-priority member already owns, per address family. The
// endpoints of one member may share a name (the member itself answers so).
func (v *View) resolveCollisions() {
	type key struct {
		host   string
		family discoveryv1.AddressType
	}
	owner := map[key]string{} // global hostname -> cluster that owns it
	for i := range v.Endpoints {
		ep := &v.Endpoints[i]
		if ep.Hostname == "" {
			continue
		}
		k := key{ep.Hostname, ep.AddressType}
		holder, taken := owner[k]
		if !taken {
			owner[k] = ep.Cluster
			continue
		}
		if holder != ep.Cluster {
			v.Problems = append(v.Problems, Problem{ReasonHostnameCollision,
				v.Namespace + "/" + v.Name + ": hostname " + quote(ep.Hostname) + " from " + clusterName(ep.Cluster) +
					" collides with " + clusterName(holder) + "; keeping its address without the name"})
			ep.Hostname = ""
		}
	}
}

func validAddresses(addrs []string, family discoveryv1.AddressType) ([]string, string) {
	for i, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err == nil && ip.Is4() == (family == discoveryv1.AddressTypeIPv4) && ip.String() == a {
			continue
		}
		// Rare: copy and keep only the valid ones.
		good := slices.Clone(addrs[:i])
		for _, b := range addrs[i+1:] {
			if ip, err := netip.ParseAddr(b); err == nil && ip.Is4() == (family == discoveryv1.AddressTypeIPv4) && ip.String() == b {
				good = append(good, b)
			}
		}
		return good, "address " + quote(a) + " is not a canonical " + string(family) + " address"
	}
	return addrs, ""
}

// unionPorts merges the members' Service ports by name, in priority order. A port
// whose name or port/protocol is already taken by a higher-priority member is
// dropped, since a Service may not have both.
func unionPorts(members []Member) []corev1.ServicePort {
	var out []corev1.ServicePort
	type pp struct {
		port  int32
		proto corev1.Protocol
	}
	names := map[string]bool{}
	numbers := map[pp]bool{}
	for _, m := range members {
		if m.Service == nil {
			continue
		}
		for _, p := range m.Service.Spec.Ports {
			proto := cmp.Or(p.Protocol, corev1.ProtocolTCP)
			if names[p.Name] || numbers[pp{p.Port, proto}] {
				continue
			}
			names[p.Name], numbers[pp{p.Port, proto}] = true, true
			out = append(out, corev1.ServicePort{
				Name:        p.Name,
				Protocol:    proto,
				AppProtocol: p.AppProtocol,
				Port:        p.Port,
				TargetPort:  p.TargetPort,
			})
		}
	}
	slices.SortFunc(out, func(a, b corev1.ServicePort) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Port, b.Port), strings.Compare(string(a.Protocol), string(b.Protocol)))
	})
	return out
}

func sortSlices(s []*discoveryv1.EndpointSlice) {
	slices.SortFunc(s, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
}

func compareEndpoints(a, b Endpoint) int {
	return cmp.Or(
		strings.Compare(string(a.AddressType), string(b.AddressType)),
		strings.Compare(a.Cluster, b.Cluster),
		strings.Compare(a.Hostname, b.Hostname),
		strings.Compare(a.Addresses[0], b.Addresses[0]),
	)
}

func memberName(m Member) string {
	if m.Service != nil {
		return m.Service.Name
	}
	return clusterName(m.Cluster)
}

func clusterName(c string) string {
	if c == "" {
		return "the local cluster"
	}
	return "cluster " + c
}
