//lint:file-ignore SA1019 Linkerd's service mirror reads and writes v1 Endpoints, so the simulator does.

package mirrorsim

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations Linkerd's service mirror reads and writes.
const (
	// LabelExported marks a Service for mirroring; the simulator mirrors the
	// value "true", the default selector of a Linkerd Link.
	LabelExported                   = "mirror.linkerd.io/exported"
	LabelMirroredService            = "mirror.linkerd.io/mirrored-service"
	LabelClusterName                = "mirror.linkerd.io/cluster-name"
	LabelHeadlessMirrorSvcName      = "mirror.linkerd.io/headless-mirror-svc-name"
	AnnotationRemoteSvcFqName       = "mirror.linkerd.io/remote-svc-fq-name"
	AnnotationRemoteResourceVersion = "mirror.linkerd.io/remote-resource-version"
	AnnotationRemoteGatewayIdentity = "mirror.linkerd.io/remote-gateway-identity"
	// annotationOpaquePorts is copied onto mirrors even where a Link
	// excludes it.
	annotationOpaquePorts = "config.linkerd.io/opaque-ports"

	mirrorPrefix = "mirror.linkerd.io/"
)

// Gateway is where a link's mirrors send traffic: Linkerd's multicluster
// gateway of the target cluster, as seen from the source.
type Gateway struct {
	IP    netip.Addr
	Port  int32
	Alive bool // false after failed probes: gateway Endpoints turn not ready
}

// mirror builds the objects of one remote Service as mirrored from one
// cluster. It is pure: the same inputs give the same objects.
type mirror struct {
	cluster string
	domain  string // the remote cluster's DNS domain, e.g. cluster.local
	remote  *corev1.Service
	link    linkSpec
}

// linkSpec is what of a Link's spec changes the mirrors' metadata.
type linkSpec struct {
	// excludedLabels and excludedAnnotations (Link v1alpha3): keys not
	// copied from the exported Service, each exact or a prefix ending in
	// "/*".
	excludedLabels, excludedAnnotations []string
	// gatewayIdentity, where set, is written on the Endpoints the mirror
	// writes (AnnotationRemoteGatewayIdentity).
	gatewayIdentity string
}

// name of the mirror Service: db → db-east.
func (m mirror) name() string { return mirrorName(m.remote.Name, m.cluster) }

func mirrorName(remote, cluster string) string { return remote + "-" + cluster }

// excluded reports whether key matches one of patterns as Linkerd matches
// a Link's exclusions (cluster_watcher.go: isLabelExlucded,
// isAnnotationExlucded): equal, or, for a pattern "p/*", starting with p.
func excluded(key string, patterns []string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "/*"); ok && strings.HasPrefix(key, prefix) || key == p {
			return true
		}
	}
	return false
}

// labels of headless and ClusterIP mirrors and of endpoint mirrors: the
// remote labels without Linkerd's own and the Link's excludedLabels, plus
// the mirror labels (cluster_watcher.go: getMirrorServiceLabels). The
// Endpoints Linkerd writes are created with the same
// (getMirrorEndpointLabels).
func (m mirror) labels() map[string]string {
	l := map[string]string{}
	for k, v := range m.remote.Labels {
		if !strings.HasPrefix(k, mirrorPrefix) && !excluded(k, m.link.excludedLabels) {
			l[k] = v
		}
	}
	maps.Copy(l, m.ownLabels())
	return l
}

func (m mirror) ownLabels() map[string]string {
	return map[string]string{LabelMirroredService: "true", LabelClusterName: m.cluster}
}

// serviceAnnotations of headless and ClusterIP mirrors: every annotation
// of the exported Service but the topology ones and the Link's
// excludedAnnotations (the opaque-ports annotation always), plus the remote
// name and resource version (cluster_watcher.go: getCommonServiceAnnotations,
// getMirrorServiceAnnotations).
func (m mirror) serviceAnnotations() map[string]string {
	a := map[string]string{}
	for k, v := range m.remote.Annotations {
		if !topologyAnnotations[k] && !excluded(k, m.link.excludedAnnotations) || k == annotationOpaquePorts {
			a[k] = v
		}
	}
	a[AnnotationRemoteSvcFqName] = m.fqName("")
	a[AnnotationRemoteResourceVersion] = m.remote.ResourceVersion
	return a
}

// topologyAnnotations are never copied: topology hints are not
// multicluster aware (cluster_watcher.go: isAnnotationExlucded).
var topologyAnnotations = map[string]bool{
	"service.kubernetes.io/topology-aware-hints": true,
	"service.kubernetes.io/topology-mode":        true,
}

// fqName is the remote Service's DNS name, or with a hostname, its pod's.
func (m mirror) fqName(hostname string) string {
	n := m.remote.Name + "." + m.remote.Namespace + ".svc." + m.domain
	if hostname != "" {
		n = hostname + "." + n
	}
	return n
}

// ports are the remote ports as Linkerd copies them: name, protocol, port
// and target port; node ports (which mean nothing here) and app protocols
// are left out (cluster_watcher.go: remapRemoteServicePorts).
func (m mirror) ports() []corev1.ServicePort {
	ports := make([]corev1.ServicePort, 0, len(m.remote.Spec.Ports))
	for _, p := range m.remote.Spec.Ports {
		ports = append(ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: p.TargetPort})
	}
	return ports
}

// service is the mirror Service, db-east: the headless mirror, or for a
// Service not mirrored headless one virtual IP in front of the gateway.
func (m mirror) service(headless bool) *corev1.Service {
	spec := corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: m.ports()}
	if headless {
		spec = corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: m.ports()}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.name(), Namespace: m.remote.Namespace,
			Labels: m.labels(), Annotations: m.serviceAnnotations(),
		},
		Spec: spec,
	}
}

// endpointMirrorName: pod db-0 of db from east → db-0-east.
func (m mirror) endpointMirrorName(hostname string) string { return mirrorName(hostname, m.cluster) }

// endpointMirrorService is the ClusterIP Service standing for one remote pod,
// db-0-east, whose Endpoints point at the gateway: the headless mirror's
// labels and the remote Endpoints' version endpointsVersion when it was made
// (cluster_watcher_headless.go: createEndpointMirrorService). Linkerd
// never updates one: it deletes it when its pod leaves.
func (m mirror) endpointMirrorService(hostname, endpointsVersion string) *corev1.Service {
	l := m.labels()
	l[LabelHeadlessMirrorSvcName] = m.name()
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.endpointMirrorName(hostname), Namespace: m.remote.Namespace,
			Labels: l, Annotations: map[string]string{
				AnnotationRemoteSvcFqName:       m.fqName(hostname),
				AnnotationRemoteResourceVersion: endpointsVersion,
			},
		},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: m.ports()},
	}
}

// gatewayEndpoints are the Endpoints of a ClusterIP or endpoint mirror: the
// gateway, on the gateway port under each of the Service's port names; not
// ready while the gateway is down. They are also what Linkerd writes into a
// headless mirror's Endpoints on an update of the exported Service
// (cluster_watcher.go: handleRemoteExportedServiceUpdated): the gateway,
// without a hostname.
func (m mirror) gatewayEndpoints(svc *corev1.Service, gw Gateway) *corev1.Endpoints {
	subset := corev1.EndpointSubset{}
	addr := []corev1.EndpointAddress{{IP: gw.IP.String()}}
	if gw.Alive {
		subset.Addresses = addr
	} else {
		subset.NotReadyAddresses = addr
	}
	for _, p := range svc.Spec.Ports {
		subset.Ports = append(subset.Ports, corev1.EndpointPort{Name: p.Name, Port: gw.Port, Protocol: cmp.Or(p.Protocol, corev1.ProtocolTCP)})
	}
	return &corev1.Endpoints{
		ObjectMeta: m.endpointsMeta(svc),
		Subsets:    []corev1.EndpointSubset{subset},
	}
}

// headlessEndpoints are the Endpoints of the headless mirror: for each ready
// remote address with a hostname, the ClusterIP of its endpoint mirror, with
// the hostname and the remote ports. Addresses whose endpoint mirror has no
// ClusterIP yet are left out. Not ready, every address is a notReadyAddress,
// as Linkerd's updateReadiness moves them while the gateway is dead.
func (m mirror) headlessEndpoints(svc *corev1.Service, remote *corev1.Endpoints, clusterIPs map[string]string, ready bool) *corev1.Endpoints {
	eps := &corev1.Endpoints{ObjectMeta: m.endpointsMeta(svc)}
	if remote == nil {
		return eps
	}
	for _, rs := range remote.Subsets {
		var subset corev1.EndpointSubset
		for _, a := range rs.Addresses {
			if ip := clusterIPs[a.Hostname]; a.Hostname != "" && ip != "" {
				subset.Addresses = append(subset.Addresses, corev1.EndpointAddress{IP: ip, Hostname: a.Hostname})
			}
		}
		if len(subset.Addresses) == 0 {
			continue
		}
		slices.SortFunc(subset.Addresses, func(a, b corev1.EndpointAddress) int { return cmp.Compare(a.Hostname, b.Hostname) })
		if !ready {
			subset.Addresses, subset.NotReadyAddresses = nil, subset.Addresses
		}
		subset.Ports = slices.Clone(rs.Ports)
		eps.Subsets = append(eps.Subsets, subset)
	}
	return eps
}

// allNotReady reports whether eps has addresses and none of them is ready:
// what Linkerd leaves after writing them while the gateway was dead.
func allNotReady(eps *corev1.Endpoints) bool {
	ready, notReady := 0, 0
	for _, s := range eps.Subsets {
		ready += len(s.Addresses)
		notReady += len(s.NotReadyAddresses)
	}
	return ready == 0 && notReady > 0
}

// readyHostnames are the hostnames of the ready remote addresses, sorted and
// unique: the pods that get an endpoint mirror.
func readyHostnames(eps *corev1.Endpoints) []string {
	var hosts []string
	if eps == nil {
		return nil
	}
	for _, s := range eps.Subsets {
		for _, a := range s.Addresses {
			if a.Hostname != "" {
				hosts = append(hosts, a.Hostname)
			}
		}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// endpointsMeta names and labels Endpoints like their Service, which is what
// the EndpointSlice mirroring controller copies onto the slices, and
// annotates them with the remote name and the Link's gateway identity. Linkerd
// sets both only when it creates Endpoints; its updates change their
// subsets (and the identity), never their labels.
func (m mirror) endpointsMeta(svc *corev1.Service) metav1.ObjectMeta {
	a := map[string]string{AnnotationRemoteSvcFqName: svc.Annotations[AnnotationRemoteSvcFqName]}
	if m.link.gatewayIdentity != "" {
		a[AnnotationRemoteGatewayIdentity] = m.link.gatewayIdentity
	}
	return metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: maps.Clone(svc.Labels), Annotations: a}
}

// gatewayShaped reports whether a headless mirror's Endpoints hold an
// address without a hostname: the gateway Linkerd wrote on an update of the
// exported Service, since its headless path writes named addresses only.
func gatewayShaped(eps *corev1.Endpoints) bool {
	for _, s := range eps.Subsets {
		for _, a := range slices.Concat(s.Addresses, s.NotReadyAddresses) {
			if a.Hostname == "" {
				return true
			}
		}
	}
	return false
}

// mode is how a remote Service is mirrored.
type mode int

const (
	modeNone      mode = iota // not mirrored (yet)
	modeHeadless              // headless mirror plus endpoint mirrors
	modeClusterIP             // one ClusterIP mirror in front of the gateway
)

func (m mode) String() string { return [...]string{"none", "headless", "clusterIP"}[m] }

// mirrorMode decides, as Linkerd's service mirror does, how to mirror remote
// (nil: not exported), given its Endpoints (nil: not seen yet) and the
// existing mirror (nil: none). Linkerd decides a headless Service on its
// Endpoints once they have subsets (cluster_watcher_headless.go:
// createRemoteHeadlessService): headless if some address, ready or not, has
// a hostname (shouldExportAsHeadlessService), otherwise a ClusterIP mirror;
// without ports, not at all. The choice sticks while the mirror exists.
func mirrorMode(remote *corev1.Service, eps *corev1.Endpoints, existing *corev1.Service) mode {
	switch {
	case remote == nil:
		return modeNone
	case !isHeadless(remote):
		return modeClusterIP
	case existing != nil && isHeadless(existing):
		return modeHeadless
	case existing != nil:
		return modeClusterIP
	case len(remote.Spec.Ports) == 0, eps == nil, len(eps.Subsets) == 0:
		return modeNone
	case hasHostname(eps):
		return modeHeadless
	default:
		return modeClusterIP
	}
}

// hasHostname reports whether any address of eps, ready or not, has a hostname.
func hasHostname(eps *corev1.Endpoints) bool {
	for _, s := range eps.Subsets {
		for _, a := range slices.Concat(s.Addresses, s.NotReadyAddresses) {
			if a.Hostname != "" {
				return true
			}
		}
	}
	return false
}

func isHeadless(svc *corev1.Service) bool { return svc.Spec.ClusterIP == corev1.ClusterIPNone }
