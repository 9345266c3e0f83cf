// Package truth computes, independently of globalmirror's own aggregation,
// what DNS should answer for the global services of one namespace at one
// moment: from the Services and EndpointSlices the API server holds (what
// Linkerd's mirrors, Kubernetes' controllers and the users say), by the
// rules of DESIGN.md, written again as plainly as possible. The fault runner
// compares the plugin's live answers with it. It is deliberately a second
// implementation: a bug shared with package aggregate would hide here.
package truth

import (
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Label and annotation keys, spelled out rather than imported from aggregate.
const (
	mirroredService = "mirror.linkerd.io/mirrored-service"
	clusterName     = "mirror.linkerd.io/cluster-name"
	headlessMirror  = "mirror.linkerd.io/headless-mirror-svc-name"
	exported        = "mirror.linkerd.io/exported"
	remoteFQName    = "mirror.linkerd.io/remote-svc-fq-name"
	managedBy       = "app.kubernetes.io/managed-by"
	sliceManagedBy  = "endpointslice.kubernetes.io/managed-by"
	serviceName     = "kubernetes.io/service-name"
)

// Global is what one global service should answer.
type Global struct {
	// IPv4 and IPv6 are the ready addresses, sorted.
	IPv4, IPv6 []string
	// Hosts maps each per-pod name's first label to its ready addresses, sorted.
	Hosts map[string][]string
}

// World is the expected answers of a namespace: by global name, the globals
// that exist; Theirs lists the global names a user's Service holds, which the
// plugin leaves to the next plugin.
type World struct {
	Globals map[string]Global
	Theirs  map[string]bool
}

// Compute works out the World of services and slices (one namespace) for the
// global suffix.
func Compute(services []corev1.Service, slicesList []discoveryv1.EndpointSlice, suffix string) World {
	w := World{Globals: map[string]Global{}, Theirs: map[string]bool{}}
	byName := map[string]*corev1.Service{}
	for i := range services {
		byName[services[i].Name] = &services[i]
	}
	// Slices by the service they belong to; globalmirror's own are no member's.
	slicesOf := map[string][]*discoveryv1.EndpointSlice{}
	for i := range slicesList {
		s := &slicesList[i]
		if s.Labels[sliceManagedBy] == "controller.globalmirror.io" {
			continue
		}
		slicesOf[s.Labels[serviceName]] = append(slicesOf[s.Labels[serviceName]], s)
	}

	membersOf := map[string][]member{}
	endpointMirrorsOf := map[string][]*corev1.Service{} // by headless mirror
	for i := range services {
		svc := &services[i]
		if hm := svc.Labels[headlessMirror]; hm != "" && svc.Labels[mirroredService] == "true" {
			endpointMirrorsOf[hm] = append(endpointMirrorsOf[hm], svc)
		}
		if base, cluster, ok := headlessMirrorOf(svc); ok {
			membersOf[base] = append(membersOf[base], member{svc, cluster})
		}
	}
	for base, ms := range membersOf {
		name := base + suffix
		if !dnsLabel(name) {
			continue // no global with an invalid name
		}
		if g := byName[name]; g != nil && g.Labels[managedBy] != "globalmirror" {
			w.Theirs[name] = true
			continue
		}
		if l := byName[base]; l != nil && l.Spec.ClusterIP == corev1.ClusterIPNone {
			if _, ok := l.Labels[exported]; ok {
				ms = append(ms, member{l, ""})
			}
		}
		// Priority: local first, then clusters by name.
		sort.Slice(ms, func(i, j int) bool { return ms[i].cluster < ms[j].cluster })
		w.Globals[name] = global(ms, slicesOf, endpointMirrorsOf)
	}
	return w
}

// member is a headless mirror of cluster, or the local service (cluster "").
type member struct {
	svc     *corev1.Service
	cluster string
}

// global computes one global from its members, in priority order, the
// slices by the service they belong to and the endpoint mirrors by their
// headless mirror.
func global(ms []member, slicesOf map[string][]*discoveryv1.EndpointSlice, endpointMirrorsOf map[string][]*corev1.Service) Global {
	type endpoint struct {
		family  discoveryv1.AddressType
		host    string
		addrs   []string
		ready   bool
		cluster string
	}
	var eps []endpoint
	for _, m := range ms {
		for _, s := range memberSlices(m, slicesOf, endpointMirrorsOf) {
			if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
				continue
			}
			for _, e := range s.Endpoints {
				var addrs []string
				for _, a := range e.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil && ip.String() == a && ip.Is4() == (s.AddressType == discoveryv1.AddressTypeIPv4) {
						addrs = append(addrs, a)
					}
				}
				if len(addrs) == 0 || m.cluster != "" && (e.Hostname == nil || *e.Hostname == "") {
					continue // a mirror's address without a name is Linkerd's gateway
				}
				ep := endpoint{family: s.AddressType, addrs: addrs, cluster: m.cluster,
					ready: e.Conditions.Ready == nil || *e.Conditions.Ready}
				if e.Hostname != nil && *e.Hostname != "" {
					ep.host = *e.Hostname
					if m.cluster != "" {
						ep.host += "-" + m.cluster
						if em := endpointMirrorSlices(slicesOf, m.svc.Name, ep.host); len(em) > 0 {
							ep.ready = anyReady(em)
						}
					}
					if !dnsLabel(ep.host) {
						ep.host = ""
					}
				}
				eps = append(eps, ep)
			}
		}
	}
	// Collisions: the first holder of a name in a family keeps it.
	holder := map[string]string{}
	for i := range eps {
		if eps[i].host == "" {
			continue
		}
		k := string(eps[i].family) + "/" + eps[i].host
		if c, taken := holder[k]; taken && c != eps[i].cluster {
			eps[i].host = ""
		} else if !taken {
			holder[k] = eps[i].cluster
		}
	}
	g := Global{Hosts: map[string][]string{}}
	for _, ep := range eps {
		if !ep.ready {
			continue
		}
		for _, a := range ep.addrs {
			if ep.family == discoveryv1.AddressTypeIPv4 {
				g.IPv4 = append(g.IPv4, a)
			} else {
				g.IPv6 = append(g.IPv6, a)
			}
			if ep.host != "" {
				g.Hosts[ep.host] = append(g.Hosts[ep.host], a)
			}
		}
	}
	g.IPv4, g.IPv6 = sortedUnique(g.IPv4), sortedUnique(g.IPv6)
	for h, a := range g.Hosts {
		g.Hosts[h] = sortedUnique(a)
	}
	return g
}

// memberSlices are m's slices, but for a headless mirror Linkerd rewrote to
// its gateway (an address without a hostname: an update of the exported
// Service), the pods its endpoint mirrors stand for, each its hostname at its
// ClusterIP: what Linkerd mirrored last, since it changes the endpoint
// mirrors only when it writes the pods again. Without endpoint mirrors, its
// named endpoints.
func memberSlices(m member, slicesOf map[string][]*discoveryv1.EndpointSlice, endpointMirrorsOf map[string][]*corev1.Service) []*discoveryv1.EndpointSlice {
	live := slicesOf[m.svc.Name]
	rewritten := m.cluster != "" && slices.ContainsFunc(live, func(s *discoveryv1.EndpointSlice) bool {
		return slices.ContainsFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool { return e.Hostname == nil || *e.Hostname == "" })
	})
	if !rewritten {
		return live
	}
	var out []*discoveryv1.EndpointSlice
	for _, em := range endpointMirrorsOf[m.svc.Name] {
		host, ok := strings.CutSuffix(em.Name, "-"+m.cluster)
		if !ok || em.Labels[clusterName] != m.cluster {
			continue
		}
		ips := em.Spec.ClusterIPs
		if len(ips) == 0 {
			ips = []string{em.Spec.ClusterIP}
		}
		for _, ip := range ips {
			family := discoveryv1.AddressTypeIPv4
			if strings.Contains(ip, ":") {
				family = discoveryv1.AddressTypeIPv6
			}
			out = append(out, &discoveryv1.EndpointSlice{AddressType: family,
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Hostname: &host}}})
		}
	}
	if len(out) == 0 {
		return live // no endpoint mirror: the named endpoints it has, if any
	}
	return out
}

// headlessMirrorOf says whether svc is a Linkerd headless mirror, and of
// which base and cluster.
func headlessMirrorOf(svc *corev1.Service) (base, cluster string, ok bool) {
	l := svc.Labels
	if l[mirroredService] != "true" || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return "", "", false
	}
	if _, isEndpointMirror := l[headlessMirror]; isEndpointMirror {
		return "", "", false
	}
	cluster = l[clusterName]
	if !dnsLabel(cluster) {
		return "", "", false
	}
	if fq := svc.Annotations[remoteFQName]; fq != "" {
		base, _, _ = strings.Cut(fq, ".")
		return base, cluster, dnsLabel(base) && base[0] >= 'a' && base[0] <= 'z'
	}
	base, found := strings.CutSuffix(svc.Name, "-"+cluster)
	return base, cluster, found && base != ""
}

// endpointMirrorSlices are the slices of the endpoint mirror of the headless
// mirror named host (a mirror endpoint's global hostname): those labelled as
// its mirrored slices. They count while they exist, also in the moment
// between the endpoint mirror Service's deletion and their garbage
// collection (the design's "whenever it has EndpointSlices").
func endpointMirrorSlices(slicesOf map[string][]*discoveryv1.EndpointSlice, mirror, host string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, s := range slicesOf[host] {
		if s.Labels[mirroredService] == "true" && s.Labels[headlessMirror] == mirror {
			out = append(out, s)
		}
	}
	return out
}

func anyReady(ss []*discoveryv1.EndpointSlice) bool {
	for _, s := range ss {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				return true
			}
		}
	}
	return false
}

// dnsLabel reports whether s is a DNS-1123 label: what a Service name, a
// cluster name and a hostname must be.
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func sortedUnique(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
