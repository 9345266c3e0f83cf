package source

import (
	"math"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
	endpoints uint16
	nameLen   uint8
	flags     sliceFlags
}

// sliceFlags are a indexedSlice's bits.
type sliceFlags uint8

const (
	fromLocalFeed sliceFlags = 1 << iota // delivered by the local feed (localFeed), else the mirror feed
	tailOnly                             // data has its name's tail only
	delivered                            // its list mark (listMarks)
)

// feed is the feed that delivered c.
func (c *indexedSlice) feed() sliceFeed {
	if c.flags&fromLocalFeed != 0 {
		return localFeed
	}
	return mirrorFeed
}

func (c *indexedSlice) setFeed(feed sliceFeed) {
	c.flags &^= fromLocalFeed
	if feed == localFeed {
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
	a.flags, b.flags, a.rv, b.rv = a.flags&^delivered, b.flags&^delivered, 0, 0
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
