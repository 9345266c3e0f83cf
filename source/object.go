package source

import (
	"cmp"
	"hash/maphash"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The index holds minimal types, not API objects, the way the kubernetes
// plugin's object package does, and goes further: it is built from the watch
// events themselves (kubeclient.Feed), so it holds no informer's copy, key,
// index entry or queue slot per object; Services nothing reads are not held
// at all; an endpoint mirror's slice (one per mirrored pod, the bulk of a
// large world) is its name and one readiness bit; strings few objects differ
// in (namespaces, clusters, label values, port lists) are held once. The
// entries are turned back into (sparse, read-only) API objects only to
// aggregate one base, or when asked for one.

// nsName names an object in the index.
type nsName struct{ namespace, name string }

// cachedService is what the index keeps of a Service: what Classify,
// WrittenByGlobalmirror and the controller's ownership checks read. Of its
// labels, only those keys (key, value pairs: a map of its own costs several
// times that); ports and selector only of headless Services (members and
// globals are headless); its UID only where something owns or deletes by it
// (not of a headless mirror).
type cachedService struct {
	name, namespace   string
	uid               types.UID
	labels            []string
	remoteFQName      string // Linkerd's remote-svc-fq-name annotation
	includeMirrors    string // globalmirror's include-mirrors annotation
	clusterIP         string
	ports             []corev1.ServicePort
	selector          map[string]string
	deletionTimestamp *metav1.Time
	gen               uint32 // the list that last delivered it (store.go)
}

// service is c as a sparse Service; read-only, like everything from the index.
func (c *cachedService) service() *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.namespace, UID: c.uid, DeletionTimestamp: c.deletionTimestamp},
		Spec:       corev1.ServiceSpec{ClusterIP: c.clusterIP, Ports: c.ports, Selector: c.selector},
	}
	if len(c.labels) > 0 {
		svc.Labels = make(map[string]string, len(c.labels)/2)
		for i := 0; i < len(c.labels); i += 2 {
			svc.Labels[c.labels[i]] = c.labels[i+1]
		}
	}
	if c.remoteFQName != "" || c.includeMirrors != "" {
		svc.Annotations = map[string]string{}
		if c.remoteFQName != "" {
			svc.Annotations[aggregate.AnnotationRemoteFQName] = c.remoteFQName
		}
		if c.includeMirrors != "" {
			svc.Annotations[aggregate.AnnotationIncludeMirrors] = c.includeMirrors
		}
	}
	return svc
}

// sameAs reports whether c holds what o holds: a relist or an update of
// something not kept changes nothing.
func (c *cachedService) sameAs(o *cachedService) bool {
	a, b := *c, *o
	a.gen, b.gen = 0, 0
	return reflect.DeepEqual(a, b)
}

// serviceKeys are the label keys Classify, WrittenByGlobalmirror and the local selector read.
func serviceKeys(local labels.Selector) []string {
	keys := []string{
		aggregate.LabelMirroredService, aggregate.LabelClusterName, aggregate.LabelHeadlessMirrorName,
		aggregate.LabelManagedBy, aggregate.LabelBase,
	}
	if local != nil {
		reqs, _ := local.Requirements()
		for _, r := range reqs {
			keys = append(keys, r.Key())
		}
	}
	return keys
}

// stripService is what the index keeps of svc.
func (in *interner) stripService(svc *corev1.Service, keys []string) *cachedService {
	c := &cachedService{
		name:              svc.Name,
		namespace:         in.str(svc.Namespace),
		uid:               svc.UID,
		labels:            in.keep(svc.Labels, keys),
		remoteFQName:      remoteFQName(svc),
		clusterIP:         in.str(svc.Spec.ClusterIP),
		deletionTimestamp: svc.DeletionTimestamp,
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		c.ports, c.selector = in.servicePorts(svc.Spec.Ports), svc.Spec.Selector
		c.includeMirrors = svc.Annotations[aggregate.AnnotationIncludeMirrors]
		if svc.Labels[aggregate.LabelMirroredService] == "true" {
			c.uid = "" // a headless mirror is neither owned nor deleted by uid
		}
	}
	return c
}

// remoteFQName is svc's Linkerd remote-svc-fq-name annotation, or "" where
// it names the base the mirror's name does (Linkerd's own mirrors), so that
// Classify reads the same base without it.
func remoteFQName(svc *corev1.Service) string {
	fq := svc.Annotations[aggregate.AnnotationRemoteFQName]
	cluster := svc.Labels[aggregate.LabelClusterName]
	if fq == "" || cluster == "" || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return fq
	}
	base, _, _ := strings.Cut(fq, ".")
	if fromName, ok := strings.CutSuffix(svc.Name, "-"+cluster); ok && fromName == base && len(validation.IsDNS1035Label(base)) == 0 {
		return ""
	}
	return fq
}

// cachedSlice is what the index keeps of a member's EndpointSlice (not an
// endpoint mirror's: mirrorSlice).
type cachedSlice struct {
	name, namespace string
	serviceName     string // kubernetes.io/service-name
	triggerTime     string // endpoints.kubernetes.io/last-change-trigger-time
	addressType     discoveryv1.AddressType
	ports           []discoveryv1.EndpointPort
	endpoints       []cachedEndpoint
	// packed holds every endpoint's addresses in order, 4 or 16 bytes each
	// by the slice's family, when each is the canonical spelling of one (a
	// string each would cost 32 bytes or more); else raw holds them as they
	// came, for the aggregation to report.
	packed    string
	raw       []string
	hostnames string // every endpoint's hostname, one after the other
	// cluster is a headless mirror's slice's cluster; globalNamed are the
	// names of its endpoints' endpoint mirrors (<hostname>-<cluster>) that
	// are named like a global, which the index holds no Service of.
	cluster     string
	globalNamed []string
	gen         uint32
}

// cachedEndpoint is one endpoint: its addresses are the count from first
// on of its slice's, its hostname hostLen bytes at host in its slice's
// hostnames.
type cachedEndpoint struct {
	host                  uint32
	first, count, hostLen uint16 // a slice holds at most 1,000 endpoints of at most 100 addresses
	flags                 endpointFlags
}

type endpointFlags uint8

const (
	hasHostname endpointFlags = 1 << iota
	readyKnown                // Conditions.Ready is set
	isReady                   // and true
)

func (c *cachedSlice) sameAs(o *cachedSlice) bool {
	a, b := *c, *o
	a.gen, b.gen = 0, 0
	return reflect.DeepEqual(a, b)
}

// stripSlice is what the index keeps of a member's slice.
func (in *interner) stripSlice(sl *discoveryv1.EndpointSlice, suffix string) *cachedSlice {
	c := &cachedSlice{
		name:        sl.Name,
		namespace:   in.str(sl.Namespace),
		serviceName: prefixOf(sl.Name, sl.Labels[discoveryv1.LabelServiceName]),
		triggerTime: sl.Annotations[corev1.EndpointsLastChangeTriggerTime],
		addressType: discoveryv1.AddressType(in.str(string(sl.AddressType))),
		ports:       in.endpointPorts(sl.Ports),
	}
	if sl.Labels[discoveryv1.LabelManagedBy] == aggregate.EndpointSliceManagedBy {
		// globalmirror's own slices (native names add some to the local
		// service) are no member's endpoints: held, but under no service.
		c.serviceName, c.ports = "", nil
		return c
	}
	if sl.Labels[aggregate.LabelMirroredService] == "true" {
		c.cluster = in.str(sl.Labels[aggregate.LabelClusterName])
	}
	addrs, hostLen := 0, 0
	for i := range sl.Endpoints {
		e := &sl.Endpoints[i]
		addrs += len(e.Addresses)
		if e.Hostname != nil {
			if len(*e.Hostname) > math.MaxUint16 {
				return c // kept as an empty slice rather than misread, as below
			}
			hostLen += len(*e.Hostname)
		}
	}
	if addrs > math.MaxUint16 || len(sl.Endpoints) > math.MaxUint16 || hostLen > math.MaxUint32 {
		// Beyond what the API server admits (1,000 endpoints of 100
		// addresses): kept as an empty slice rather than misread.
		return c
	}
	c.packed, c.raw = packAddresses(sl, addrs)
	hostnames := make([]byte, 0, hostLen)
	c.endpoints = make([]cachedEndpoint, len(sl.Endpoints))
	first := 0
	for i, e := range sl.Endpoints {
		ce := cachedEndpoint{first: uint16(first), count: uint16(len(e.Addresses))}
		first += len(e.Addresses)
		if e.Hostname != nil {
			ce.host, ce.hostLen, ce.flags = uint32(len(hostnames)), uint16(len(*e.Hostname)), hasHostname
			hostnames = append(hostnames, *e.Hostname...)
		}
		if r := e.Conditions.Ready; r != nil {
			ce.flags |= readyKnown
			if *r {
				ce.flags |= isReady
			}
		}
		c.endpoints[i] = ce
		if c.cluster != "" && e.Hostname != nil {
			if name := *e.Hostname + "-" + c.cluster; strings.HasSuffix(name, suffix) {
				c.globalNamed = append(c.globalNamed, name)
			}
		}
	}
	c.hostnames = string(hostnames)
	return c
}

// packAddresses is the n addresses of sl's endpoints packed (see
// cachedSlice.packed), or as they came where one does not come back as it
// was from its bytes: not of the slice's family, not canonical, zoned.
func packAddresses(sl *discoveryv1.EndpointSlice, n int) (string, []string) {
	size := 0
	switch sl.AddressType {
	case discoveryv1.AddressTypeIPv4:
		size = 4
	case discoveryv1.AddressTypeIPv6:
		size = 16
	}
	packed := make([]byte, 0, n*size)
	for i := range sl.Endpoints {
		for _, a := range sl.Endpoints[i].Addresses {
			ip, err := netip.ParseAddr(a)
			if size == 0 || err != nil || ip.BitLen() != 8*size || ip.Zone() != "" || ip.String() != a {
				raw := make([]string, 0, n)
				for i := range sl.Endpoints {
					raw = append(raw, sl.Endpoints[i].Addresses...)
				}
				return "", raw
			}
			packed = append(packed, ip.AsSlice()...)
		}
	}
	return string(packed), nil
}

// address is the slice's i-th address.
func (c *cachedSlice) address(i int) string {
	if c.raw != nil {
		return c.raw[i]
	}
	if c.addressType == discoveryv1.AddressTypeIPv4 {
		var b [4]byte
		copy(b[:], c.packed[4*i:])
		return netip.AddrFrom4(b).String()
	}
	var b [16]byte
	copy(b[:], c.packed[16*i:])
	return netip.AddrFrom16(b).String()
}

// slice is c as a sparse EndpointSlice: what the aggregation reads.
func (c *cachedSlice) slice() *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: c.name, Namespace: c.namespace},
		AddressType: c.addressType,
		Ports:       c.ports,
		Endpoints:   make([]discoveryv1.Endpoint, len(c.endpoints)),
	}
	if c.serviceName != "" || c.cluster != "" {
		sl.Labels = map[string]string{}
		if c.serviceName != "" {
			sl.Labels[discoveryv1.LabelServiceName] = c.serviceName
		}
		if c.cluster != "" {
			sl.Labels[aggregate.LabelMirroredService] = "true"
			sl.Labels[aggregate.LabelClusterName] = c.cluster
		}
	}
	if c.triggerTime != "" {
		sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: c.triggerTime}
	}
	for i := range c.endpoints {
		e := &c.endpoints[i]
		out := discoveryv1.Endpoint{Addresses: make([]string, e.count)}
		for j := range out.Addresses {
			out.Addresses[j] = c.address(int(e.first) + j)
		}
		if e.flags&hasHostname != 0 {
			h := c.hostnames[e.host : e.host+uint32(e.hostLen)]
			out.Hostname = &h
		}
		if e.flags&readyKnown != 0 {
			out.Conditions.Ready = boolPtr(e.flags&isReady != 0)
		}
		sl.Endpoints[i] = out
	}
	return sl
}

// mirrorSlice is what the index keeps of an endpoint mirror's slice, in a
// list by name under its headless mirror: the endpoint mirror Service it
// belongs to and whether any endpoint is ready, all that readiness reads of
// it (aggregate.MirrorEndpointReady). Names are held as hashes (nameHash):
// an endpoint mirror is looked up by the name its headless mirror's
// endpoint gives it, never listed. A list, not a map: a map of a few
// entries costs several times their size.
type mirrorSlice struct {
	name    uint64 // the slice's
	service uint64 // its kubernetes.io/service-name
	gen     uint32
	ready   bool
}

// nameHash hashes the names of endpoint mirrors and their slices. Seeded
// per process: nobody can write two names that collide on purpose, and two
// of the up to a few thousand names under one headless mirror collide by
// chance once in 2^40 or more.
type nameHash maphash.Seed

func (h nameHash) of(name string) uint64 { return maphash.String(maphash.Seed(h), name) }

// find is the position of the slice whose name hashes to name in the list
// l, sorted by it, or where it belongs.
func find(l []mirrorSlice, name uint64) (int, bool) {
	return slices.BinarySearchFunc(l, name, func(m mirrorSlice, n uint64) int { return cmp.Compare(m.name, n) })
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

// prefixOf is s, sharing name's bytes where s begins name (a slice's name is
// generated from its service's), so that it costs no string of its own.
func prefixOf(name, s string) string {
	if len(s) < len(name) && strings.HasPrefix(name, s) {
		return name[:len(s)]
	}
	return s
}

// interner holds once the strings and port lists few objects differ in.
// Bounded, so that hostile input cannot grow it without end: past the
// bound, values are kept as they come.
type interner struct {
	strs  map[string]string
	lists map[string]any // label pairs and port lists
}

const internBound = 10000

func newInterner() *interner {
	return &interner{strs: map[string]string{}, lists: map[string]any{}}
}

func (in *interner) str(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := in.strs[s]; ok {
		return v
	}
	if len(in.strs) < internBound {
		in.strs[s] = s
	}
	return s
}

// keep is the key, value pairs of m's labels among keys, or nil.
func (in *interner) keep(m map[string]string, keys []string) []string {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	pairs := make([]string, 0, 2*n)
	for _, k := range keys {
		if v, ok := m[k]; ok {
			pairs = append(pairs, k, in.str(v))
		}
	}
	return internList(in, "l"+strings.Join(pairs, "\x00"), pairs)
}

func (in *interner) servicePorts(ps []corev1.ServicePort) []corev1.ServicePort {
	if len(ps) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("s")
	for _, p := range ps {
		b.WriteString(p.Name + "|" + string(p.Protocol) + "|" + optional(p.AppProtocol) + "|" +
			strconv.Itoa(int(p.Port)) + "|" + p.TargetPort.String() + "|" + strconv.Itoa(int(p.NodePort)) + ";")
	}
	return internList(in, b.String(), ps)
}

func (in *interner) endpointPorts(ps []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	if len(ps) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("e")
	for _, p := range ps {
		port := "-"
		if p.Port != nil {
			port = strconv.Itoa(int(*p.Port))
		}
		proto := "-"
		if p.Protocol != nil {
			proto = "=" + string(*p.Protocol)
		}
		b.WriteString(optional(p.Name) + "|" + proto + "|" + port + "|" + optional(p.AppProtocol) + ";")
	}
	return internList(in, b.String(), ps)
}

// internList is the list held under key (a spelling of ps, prefixed by its
// kind), or ps, now held.
func internList[P any](in *interner, key string, ps []P) []P {
	if v, ok := in.lists[key].([]P); ok {
		return v
	}
	if len(in.lists) < internBound {
		in.lists[key] = ps
	}
	return ps
}

// optional spells a set string as "=value", so that it differs from unset.
func optional(s *string) string {
	if s == nil {
		return "-"
	}
	return "=" + *s
}
