package source

import (
	"math"
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
	addrs           []string // every endpoint's, in order
	// cluster is a headless mirror's slice's cluster; globalNamed are the
	// names of its endpoints' endpoint mirrors (<hostname>-<cluster>) that
	// are named like a global, which the index holds no Service of.
	cluster     string
	globalNamed []string
	gen         uint32
}

// cachedEndpoint is one endpoint; its addresses are
// addrs[first:first+count] of its slice's.
type cachedEndpoint struct {
	hostname     string
	first, count uint16 // a slice holds at most 1,000 endpoints of at most 100 addresses
	flags        endpointFlags
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
	n := 0
	for i := range sl.Endpoints {
		n += len(sl.Endpoints[i].Addresses)
	}
	if n > math.MaxUint16 || len(sl.Endpoints) > math.MaxUint16 {
		// Beyond what the API server admits (1,000 endpoints of 100
		// addresses): kept as an empty slice rather than misread.
		return c
	}
	c.addrs = make([]string, 0, n)
	c.endpoints = make([]cachedEndpoint, len(sl.Endpoints))
	for i, e := range sl.Endpoints {
		ce := cachedEndpoint{first: uint16(len(c.addrs)), count: uint16(len(e.Addresses))}
		c.addrs = append(c.addrs, e.Addresses...)
		if e.Hostname != nil {
			ce.hostname, ce.flags = *e.Hostname, hasHostname
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
	return c
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
		out := discoveryv1.Endpoint{Addresses: c.addrs[e.first : e.first+e.count : e.first+e.count]}
		if e.flags&hasHostname != 0 {
			out.Hostname = &e.hostname
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
// it (aggregate.MirrorEndpointReady). A list, not a map: a map of a few
// entries costs several times their size.
type mirrorSlice struct {
	name    string
	service string // shares the name's bytes where it is its prefix
	ready   bool
	gen     uint32
}

// find is the position of the slice named name in the sorted list l, or
// where it belongs.
func find(l []mirrorSlice, name string) (int, bool) {
	return slices.BinarySearchFunc(l, name, func(m mirrorSlice, n string) int { return strings.Compare(m.name, n) })
}

// The sparse slices an endpoint mirror's readiness is read from: one ready
// endpoint, or none. Shared, never modified.
var (
	readyMirrorSlice    = &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: boolPtr(true)}}}}
	notReadyMirrorSlice = &discoveryv1.EndpointSlice{}
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
