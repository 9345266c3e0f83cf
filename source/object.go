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
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The index stores minimal types, not API objects, the way the kubernetes
// plugin's object package does, and goes further: it is built from the watch
// events themselves (kubeclient.Feed), so it has no client-go informer's
// copy, key, index entry or queue slot per object; Services nothing reads
// are not kept at all; an endpoint mirror's slice (one per mirrored pod, the bulk of a
// large world) is two name hashes and one readiness bit; a member slice is
// one string; what many objects share (namespaces, clusters, label pairs,
// port lists) is interned. The entries are turned back into (sparse,
// read-only) API objects only to aggregate one base, or when asked for one.

// nsName names an object in the index.
type nsName struct{ namespace, name string }

// indexedService is what the index keeps of a Service: what Classify,
// WrittenByGlobalmirror and the controller's ownership checks read. Of its
// labels, only those keys (key, value pairs: a map of its own costs several
// times that); ports and selector only of headless Services (members and
// globals are headless); its UID only where something owns or deletes by it
// (not of a headless mirror). What many Services share (namespace, labels,
// cluster IP "None", ports) is one interned serviceShape; what Linkerd's
// headless mirrors never have is in rare, nil for them. Stored in its
// Service's entry (store.go), whose key its name shares.
type indexedService struct {
	name  string
	shape *serviceShape
	rare  *serviceRare
	gen   uint32 // the list that last delivered it (store.go)
	rv    kubeclient.Version
	// memberBase is the base of a member (aggregate.Classify), "" for
	// any other Service: kept from the classification of the Service as
	// it came (serviceSink.upsert), as every slice of its members asks
	// for it.
	memberBase string
}

type serviceShape struct {
	namespace string
	labels    []string
	clusterIP string
	ports     []corev1.ServicePort
}

type serviceRare struct {
	uid               types.UID
	remoteFQName      string // Linkerd's remote-svc-fq-name annotation
	includeMirrors    string // globalmirror's include-mirrors annotation
	drain             string // globalmirror's drain annotation
	selector          map[string]string
	deletionTimestamp *metav1.Time
}

func (c *indexedService) namespace() string { return c.shape.namespace }

// label is the value of the kept label key, "" where it has none.
func (c *indexedService) label(key string) string {
	for i := 0; i+1 < len(c.shape.labels); i += 2 {
		if c.shape.labels[i] == key {
			return labelValue(c.shape.labels[i+1], c.name)
		}
	}
	return ""
}

// present reports whether c is a Service in the index (an entry's is empty
// where the entry has only slices).
func (c *indexedService) present() bool { return c.shape != nil }

// service is c as a sparse Service; read-only, like everything from the index.
func (c *indexedService) service() *corev1.Service {
	sh := c.shape
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: sh.namespace},
		Spec:       corev1.ServiceSpec{ClusterIP: sh.clusterIP, Ports: sh.ports},
	}
	if len(sh.labels) > 0 {
		svc.Labels = make(map[string]string, len(sh.labels)/2)
		for i := 0; i < len(sh.labels); i += 2 {
			svc.Labels[sh.labels[i]] = labelValue(sh.labels[i+1], c.name)
		}
	}
	if r := c.rare; r != nil {
		svc.UID, svc.DeletionTimestamp, svc.Spec.Selector = r.uid, r.deletionTimestamp, r.selector
		if r.remoteFQName != "" || r.includeMirrors != "" || r.drain != "" {
			svc.Annotations = map[string]string{}
			if r.remoteFQName != "" {
				svc.Annotations[aggregate.AnnotationRemoteFQName] = r.remoteFQName
			}
			if r.includeMirrors != "" {
				svc.Annotations[aggregate.AnnotationIncludeMirrors] = r.includeMirrors
			}
			if r.drain != "" {
				svc.Annotations[aggregate.AnnotationDrain] = r.drain
			}
		}
	}
	return svc
}

// sameAs reports whether c keeps what o keeps: a relist or an update of
// something not kept changes nothing.
func (c *indexedService) sameAs(o *indexedService) bool {
	a, b := *c, *o
	a.gen, b.gen, a.rv, b.rv = 0, 0, 0, 0
	return reflect.DeepEqual(a, b)
}

// A label value stored as "\x00<n>" is the Service's name but its last n
// bytes: a global's base label, its name less the suffix. So stored, it is
// the same for every global, whose label pairs and shape are then interned.
// No label value contains a NUL.
const fromName = "\x00"

// labelValue is the label value stored as v, of the Service named name.
func labelValue(v, name string) string {
	if rest, ok := strings.CutPrefix(v, fromName); ok {
		if n, err := strconv.Atoi(rest); err == nil && n <= len(name) {
			return name[:len(name)-n]
		}
	}
	return v
}

// stripService is what the index keeps of svc, a Service whose globals'
// names end in suffix; with keepUID, its UID where anything owns or deletes
// by it.
func (in *interner) stripService(svc *corev1.Service, keys []string, suffix string, keepUID bool) *indexedService {
	// Shared only where it is like others': a cluster IP or a label value
	// of its own (a global's base) would fill the interner with entries
	// used by one Service each.
	sh := serviceShape{namespace: in.str(svc.Namespace), clusterIP: svc.Spec.ClusterIP}
	shared := true
	switch sh.clusterIP {
	case corev1.ClusterIPNone:
		sh.clusterIP = corev1.ClusterIPNone
	case "":
	default:
		shared = false
	}
	var labelsKey, portsKey string
	var sharedLabels bool
	sh.labels, labelsKey, sharedLabels = in.keep(svc.Labels, keys, svc.Name, suffix)
	shared = shared && sharedLabels
	r := serviceRare{
		uid:               svc.UID,
		remoteFQName:      remoteFQName(svc),
		deletionTimestamp: svc.DeletionTimestamp,
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		sh.ports, portsKey = in.servicePorts(svc.Spec.Ports)
		r.selector = svc.Spec.Selector
		r.includeMirrors = svc.Annotations[aggregate.AnnotationIncludeMirrors]
		if svc.Labels[aggregate.LabelMirroredService] != "true" {
			r.drain = svc.Annotations[aggregate.AnnotationDrain] // a local service's (aggregate.Drain)
		}
		if svc.Labels[aggregate.LabelMirroredService] == "true" {
			r.uid = "" // a headless mirror is neither owned nor deleted by uid
		}
	}
	if !keepUID {
		r.uid = ""
	}
	c := &indexedService{name: svc.Name, shape: &sh, rv: kubeclient.ParseVersion(svc.ResourceVersion)}
	if shared {
		c.shape = in.serviceShape(sh, labelsKey+"\x01"+portsKey)
	}
	if r.uid != "" || r.remoteFQName != "" || r.includeMirrors != "" || r.drain != "" || r.deletionTimestamp != nil || r.selector != nil {
		c.rare = &r
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
	if fromName, ok := strings.CutSuffix(svc.Name, "-"+cluster); ok && fromName == base && len(aggregate.IsDNS1035Label(base)) == 0 {
		return ""
	}
	return fq
}

// indexedSlice is what the index keeps of a member's EndpointSlice (not an
// endpoint mirror's: mirrorSlice), in its service's entry (whose key is the
// service's name for it). What many slices share (namespace, family, ports,
// cluster) is one interned sliceShape; what few have is in rare.
type indexedSlice struct {
	shape *sliceShape
	// data has, in order: the slice's name, or, where it is named for
	// its service ("<service>-<tail>", as generated names are), its tail
	// (rare.name where it is longer than a byte counts); for each endpoint, one byte each of its address
	// count, its hostname's length and its flags; every endpoint's
	// addresses, packed, 4 or 16 bytes each by the slice's family, when
	// each is the canonical spelling of one (else rare.raw has them); every
	// endpoint's hostname. One string: no allocation per endpoint, address
	// or hostname.
	data      string
	rare      *sliceRare
	rv        kubeclient.Version
	gen       uint32
	endpoints uint16
	nameLen   uint8
	flags     sliceFlags
}

// sliceFlags are a indexedSlice's bits.
type sliceFlags uint8

const (
	fromLocalFeed sliceFlags = 1 << iota // delivered by the local feed (localFeed), else the mirror feed
	tailOnly                             // data has its name's tail only
)

// kind is the kind of the feed that delivered c: mirrorFeed or localFeed.
func (c *indexedSlice) kind() uint8 {
	if c.flags&fromLocalFeed != 0 {
		return localFeed
	}
	return mirrorFeed
}

func (c *indexedSlice) setKind(kind uint8) {
	c.flags &^= fromLocalFeed
	if kind == localFeed {
		c.flags |= fromLocalFeed
	}
}

type sliceShape struct {
	namespace   string
	addressType discoveryv1.AddressType
	ports       []discoveryv1.EndpointPort
	cluster     string // a headless mirror's slice's cluster
}

type sliceRare struct {
	name string // where it does not fit in data
	// trigger is endpoints.kubernetes.io/last-change-trigger-time in Unix
	// nanoseconds; 0 where it is unset or unreadable (the aggregation
	// ignores it then). Linkerd's mirrors carry none.
	trigger int64
	// raw has the addresses as they came where one does not pack (not of
	// the slice's family, not canonical, zoned), for the aggregation to
	// report.
	raw []string
	// globalNamed are the names of its endpoints' endpoint mirrors
	// (<hostname>-<cluster>) that are named like a global, which the index
	// keeps no Service of.
	globalNamed []string
}

func (c *indexedSlice) namespace() string { return c.shape.namespace }
func (c *indexedSlice) cluster() string   { return c.shape.cluster }

// nameKept is what data or rare keeps of the slice's name: all of it, or its tail (tailOnly).
func (c *indexedSlice) nameKept() string {
	if c.rare != nil && c.rare.name != "" {
		return c.rare.name
	}
	return c.data[:c.nameLen]
}

// name is the name of c, a slice of service.
func (c *indexedSlice) name(service string) string {
	if c.flags&tailOnly != 0 {
		return service + "-" + c.nameKept()
	}
	return c.nameKept()
}

// named reports whether name is the name of c, a slice of service.
func (c *indexedSlice) named(service, name string) bool {
	if c.flags&tailOnly == 0 {
		return c.nameKept() == name
	}
	tail := c.nameKept()
	return len(name) == len(service)+1+len(tail) && name[len(service)] == '-' &&
		strings.HasPrefix(name, service) && strings.HasSuffix(name, tail)
}

// namedFor reports whether a slice named name is named for service:
// "<service>-<tail>", as the names generated for its slices are.
func namedFor(name, service string) bool {
	return service != "" && len(name) > len(service)+1 && name[len(service)] == '-' && strings.HasPrefix(name, service)
}

// body is data past the name: the endpoints.
func (c *indexedSlice) body() string { return c.data[c.nameLen:] }

func (c *indexedSlice) globalNamed() []string {
	if c.rare == nil {
		return nil
	}
	return c.rare.globalNamed
}

// endpointHeader is the size of an endpoint's entry at the start of its
// slice's data: its address count (the API admits 100), the length of its
// hostname (a DNS label: 63) and its flags.
const endpointHeader = 3

type endpointFlags uint8

const (
	hasHostname endpointFlags = 1 << iota
	readyKnown                // Conditions.Ready is set
	isReady                   // and true
)

func (c *indexedSlice) sameAs(o *indexedSlice) bool {
	a, b := *c, *o
	a.gen, b.gen, a.rv, b.rv = 0, 0, 0, 0
	return reflect.DeepEqual(a, b)
}

// stripSlice is what the index keeps of a member's slice of service.
func (in *interner) stripSlice(sl *discoveryv1.EndpointSlice, service, suffix string) *indexedSlice {
	sh := sliceShape{namespace: in.str(sl.Namespace), addressType: discoveryv1.AddressType(in.str(string(sl.AddressType)))}
	c := &indexedSlice{rv: kubeclient.ParseVersion(sl.ResourceVersion)}
	name := sl.Name
	if namedFor(name, service) {
		name, c.flags = name[len(service)+1:], tailOnly
	}
	if t := triggerTime(sl.Annotations[corev1.EndpointsLastChangeTriggerTime]); t != 0 {
		c.rare = &sliceRare{trigger: t}
	}
	if len(name) > math.MaxUint8 {
		if c.rare == nil {
			c.rare = &sliceRare{}
		}
		c.rare.name, name = name, ""
	}
	c.data, c.nameLen = name, uint8(len(name))
	var portsKey string
	if sl.Labels[discoveryv1.LabelManagedBy] == aggregate.EndpointSliceManagedBy {
		// globalmirror's own slices are no member's (sliceService): not kept.
		c.shape = in.sliceShape(sh, "")
		return c
	}
	sh.ports, portsKey = in.endpointPorts(sl.Ports)
	if sl.Labels[aggregate.LabelMirroredService] == "true" {
		sh.cluster = in.str(sl.Labels[aggregate.LabelClusterName])
	}
	c.shape = in.sliceShape(sh, portsKey)
	addrs, hostLen := 0, 0
	for i := range sl.Endpoints {
		e := &sl.Endpoints[i]
		addrs += len(e.Addresses)
		if e.Hostname != nil {
			hostLen += len(*e.Hostname)
		}
		if len(e.Addresses) > math.MaxUint8 || (e.Hostname != nil && len(*e.Hostname) > math.MaxUint8) {
			return c // beyond what the API server admits, as below
		}
	}
	if len(sl.Endpoints) > math.MaxUint16 {
		// Beyond what the API server admits (1,000 endpoints of 100
		// addresses, hostnames of 63 bytes): kept as an empty slice rather
		// than misread.
		return c
	}
	packed, raw := packAddresses(sl, addrs)
	if raw != nil {
		if c.rare == nil {
			c.rare = &sliceRare{}
		}
		c.rare.raw = raw
	}
	at := len(name) // the first endpoint's header
	data := make([]byte, at+endpointHeader*len(sl.Endpoints), at+endpointHeader*len(sl.Endpoints)+len(packed)+hostLen)
	copy(data, name)
	data = append(data, packed...)
	for i, e := range sl.Endpoints {
		header := data[at+endpointHeader*i:]
		var flags endpointFlags
		if e.Hostname != nil {
			flags = hasHostname
			header[1] = byte(len(*e.Hostname))
			data = append(data, *e.Hostname...)
		}
		if r := e.Conditions.Ready; r != nil {
			flags |= readyKnown
			if *r {
				flags |= isReady
			}
		}
		header[0] = byte(len(e.Addresses))
		header[2] = byte(flags)
		if sh.cluster != "" && e.Hostname != nil {
			if name := *e.Hostname + "-" + sh.cluster; strings.HasSuffix(name, suffix) {
				if c.rare == nil {
					c.rare = &sliceRare{}
				}
				c.rare.globalNamed = append(c.rare.globalNamed, name)
			}
		}
	}
	c.data, c.endpoints = string(data), uint16(len(sl.Endpoints))
	return c
}

// triggerTime is a last-change-trigger-time as Unix nanoseconds, or 0 where
// the aggregation could not read it either, or it is beyond what they represent.
func triggerTime(s string) int64 {
	if s == "" {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !time.Unix(0, t.UnixNano()).Equal(t) {
		return 0
	}
	return t.UnixNano()
}

// packAddresses is the n addresses of sl's endpoints packed (see
// indexedSlice.data), or as they came where one does not come back as it
// was from its bytes: not of the slice's family, not canonical, zoned.
func packAddresses(sl *discoveryv1.EndpointSlice, n int) ([]byte, []string) {
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
				return nil, raw
			}
			packed = append(packed, ip.AsSlice()...)
		}
	}
	return packed, nil
}

// address is the slice's i-th address, its packed addresses starting at at
// in its body.
func (c *indexedSlice) address(body string, i, at int) string {
	if c.rare != nil && c.rare.raw != nil {
		return c.rare.raw[i]
	}
	if c.shape.addressType == discoveryv1.AddressTypeIPv4 {
		var b [4]byte
		copy(b[:], body[at+4*i:])
		return netip.AddrFrom4(b).String()
	}
	var b [16]byte
	copy(b[:], body[at+16*i:])
	return netip.AddrFrom16(b).String()
}

// slice is c, a slice of service, as a sparse EndpointSlice: what the
// aggregation reads.
func (c *indexedSlice) slice(service string) *discoveryv1.EndpointSlice {
	sh := c.shape
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: c.name(service), Namespace: sh.namespace},
		AddressType: sh.addressType,
		Ports:       sh.ports,
		Endpoints:   make([]discoveryv1.Endpoint, c.endpoints),
	}
	if service != "" || sh.cluster != "" {
		sl.Labels = map[string]string{}
		if service != "" {
			sl.Labels[discoveryv1.LabelServiceName] = service
		}
		if sh.cluster != "" {
			sl.Labels[aggregate.LabelMirroredService] = "true"
			sl.Labels[aggregate.LabelClusterName] = sh.cluster
		}
	}
	if c.rare != nil && c.rare.trigger != 0 {
		sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Unix(0, c.rare.trigger).UTC().Format(time.RFC3339Nano)}
	}
	n, body := int(c.endpoints), c.body()
	addrs := 0
	for i := range n {
		addrs += int(body[endpointHeader*i])
	}
	at := endpointHeader * n // the first address
	host := at               // the next hostname
	if c.rare == nil || c.rare.raw == nil {
		switch sh.addressType {
		case discoveryv1.AddressTypeIPv4:
			host += 4 * addrs
		case discoveryv1.AddressTypeIPv6:
			host += 16 * addrs
		}
	}
	next := 0 // the next address
	for i := range n {
		count, hostLen, flags := int(body[endpointHeader*i]), int(body[endpointHeader*i+1]), endpointFlags(body[endpointHeader*i+2])
		out := discoveryv1.Endpoint{Addresses: make([]string, count)}
		for j := range out.Addresses {
			out.Addresses[j] = c.address(body, next, at)
			next++
		}
		if flags&hasHostname != 0 {
			h := body[host : host+hostLen]
			host += hostLen
			out.Hostname = &h
		}
		if flags&readyKnown != 0 {
			out.Conditions.Ready = boolPtr(flags&isReady != 0)
		}
		sl.Endpoints[i] = out
	}
	return sl
}

// mirrorSlice is what the index keeps of an endpoint mirror's slice, in a
// list sorted by key in its headless mirror's entry: the endpoint mirror
// Service it belongs to and whether any endpoint is ready, all that
// readiness reads of it (aggregate.MirrorEndpointReady). Names are stored as
// hashes (nameHash): an endpoint mirror is looked up by the name its
// headless mirror's endpoint gives it, never listed. Three words
// (TestMirrorSliceSize), the bulk of a large world's index: each hash gives
// up its low bits to the feed's kind and the flags; kept in a list, not a
// map. Its version lets a relist skip all of it that is as it was
// (kubeclient.CurrentSink), making no garbage for it.
type mirrorSlice struct {
	key     uint64 // the slice's name hashed; the low bit, its feed's kind
	service uint64 // its kubernetes.io/service-name hashed; the low two bits, its flags
	rv      kubeclient.Version
}

// The flags in a mirrorSlice's service.
const (
	mirrorReadyFlag = 1 << iota // an endpoint is ready
	mirrorFreshFlag             // delivered since its feed's list began
	mirrorFlags     = mirrorReadyFlag | mirrorFreshFlag
)

// mirrorKey is the key of the slice whose name hashes to name, delivered
// by a feed of kind.
func mirrorKey(name uint64, kind uint8) uint64 { return name&^1 | uint64(kind&1) }

// mirrorService is the service hash a mirrorSlice stores for a name's hash.
func mirrorService(name uint64) uint64 { return name &^ mirrorFlags }

func newMirrorSlice(name, service uint64, kind uint8, ready bool, rv kubeclient.Version) mirrorSlice {
	m := mirrorSlice{key: mirrorKey(name, kind), service: mirrorService(service) | mirrorFreshFlag, rv: rv}
	if ready {
		m.service |= mirrorReadyFlag
	}
	return m
}

func (m mirrorSlice) feed() uint8         { return uint8(m.key & 1) }
func (m mirrorSlice) serviceHash() uint64 { return mirrorService(m.service) }
func (m mirrorSlice) ready() bool         { return m.service&mirrorReadyFlag != 0 }
func (m mirrorSlice) fresh() bool         { return m.service&mirrorFreshFlag != 0 }

// sameAs reports whether m and o say the same, whatever their versions and
// freshness.
func (m mirrorSlice) sameAs(o mirrorSlice) bool {
	return m.key == o.key && m.serviceHash() == o.serviceHash() && m.ready() == o.ready()
}

func (m mirrorSlice) withFresh(fresh bool) mirrorSlice {
	m.service &^= mirrorFreshFlag
	if fresh {
		m.service |= mirrorFreshFlag
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

// prefixOf is s, sharing name's bytes where s begins name (a slice's name is
// generated from its service's), so that it costs no string of its own.
func prefixOf(name, s string) string {
	if len(s) < len(name) && strings.HasPrefix(name, s) {
		return name[:len(s)]
	}
	return s
}

// interner stores once (interns) the strings and port lists few objects
// differ in.
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

// copyOf is str of a string that must not be kept itself (a Peeked's):
// the interned one, or a copy.
func (in *interner) copyOf(s string) string {
	if v, ok := in.strs[s]; ok {
		return v
	}
	return in.str(strings.Clone(s))
}

// keep is the key, value pairs of m's labels among keys, or nil, their
// spelling, and whether other Services may share them: not where a value is
// one Service's own (a global's base other than its name less suffix),
// which is not interned.
func (in *interner) keep(m map[string]string, keys []string, name, suffix string) ([]string, string, bool) {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		}
	}
	if n == 0 {
		return nil, "", true
	}
	pairs := make([]string, 0, 2*n)
	shared := true
	for _, k := range keys {
		v, ok := m[k]
		switch {
		case !ok:
			continue
		case k == aggregate.LabelBase && suffix != "" && v+suffix == name:
			v = in.str(fromName + strconv.Itoa(len(suffix)))
		case k == aggregate.LabelBase:
			shared = false
		default:
			v = in.str(v)
		}
		pairs = append(pairs, k, v)
	}
	if !shared {
		return pairs, "", false
	}
	key := "l" + strings.Join(pairs, "\x00")
	return internList(in, key, pairs), key, true
}

func (in *interner) servicePorts(ps []corev1.ServicePort) ([]corev1.ServicePort, string) {
	return internPorts(in, "s", ps, func(p corev1.ServicePort) string {
		return p.Name + "|" + string(p.Protocol) + "|" + optional(p.AppProtocol) + "|" +
			strconv.Itoa(int(p.Port)) + "|" + p.TargetPort.String() + "|" + strconv.Itoa(int(p.NodePort))
	})
}

func (in *interner) endpointPorts(ps []discoveryv1.EndpointPort) ([]discoveryv1.EndpointPort, string) {
	return internPorts(in, "e", ps, func(p discoveryv1.EndpointPort) string {
		port := "-"
		if p.Port != nil {
			port = strconv.Itoa(int(*p.Port))
		}
		proto := "-"
		if p.Protocol != nil {
			proto = "=" + string(*p.Protocol)
		}
		return optional(p.Name) + "|" + proto + "|" + port + "|" + optional(p.AppProtocol)
	})
}

// internPorts is the port list ps interned, and its key: kind, then each
// port spelled, followed by ";". nil and "" for none.
func internPorts[P any](in *interner, kind string, ps []P, spell func(P) string) ([]P, string) {
	if len(ps) == 0 {
		return nil, ""
	}
	var b strings.Builder
	b.WriteString(kind)
	for _, p := range ps {
		b.WriteString(spell(p) + ";")
	}
	return internList(in, b.String(), ps), b.String()
}

// serviceShape is the shape interned for sh, whose labels and ports are
// spelled by key.
func (in *interner) serviceShape(sh serviceShape, key string) *serviceShape {
	return internValue(in, "S"+sh.namespace+"\x00"+sh.clusterIP+"\x00"+key, sh)
}

// sliceShape is the shape interned for sh, whose ports are spelled by key.
func (in *interner) sliceShape(sh sliceShape, key string) *sliceShape {
	return internValue(in, "E"+sh.namespace+"\x00"+string(sh.addressType)+"\x00"+sh.cluster+"\x00"+key, sh)
}

// internValue is the value interned under key, or v, now interned.
func internValue[V any](in *interner, key string, v V) *V {
	if p, ok := in.lists[key].(*V); ok {
		return p
	}
	p := &v
	if len(in.lists) < internBound {
		in.lists[key] = p
	}
	return p
}

// internList is the list interned under key (a spelling of ps, prefixed by
// its kind), or ps, now interned.
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
