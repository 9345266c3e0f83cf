package global

import (
	"strings"

	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/miekg/dns"
)

// Query names are parsed here, as the kubernetes plugin's parse.go parses
// its requests; the stanza is parsed in setup.go.

// query is what a name below svc.<zone> says, parsed like the kubernetes
// plugin's parseRequest (without its pod and zonal forms).
type query struct {
	key   string // "service.namespace", the index key
	extra int    // labels left of the service; 3 means three or more
	// endpoint (extra 1) or port (extra 2), underscore not stripped
	first string
	// protocol (extra 2), underscore not stripped
	second string
	// both (extra 2), "first.second": a clusterset "hostname.clusterid"
	both string
	// native: the service does not end in the suffix; only a local service
	// that opted into native names makes it the plugin's.
	native bool
}

// clustersetHostQuery reports whether q names a per-pod name of the
// clusterset view, "<hostname>.<clusterid>.<service>...": two labels, neither
// a port or protocol (which start with "_"), as the kubernetes plugin tells
// its multicluster endpoint names from SRV names.
func (q *query) clustersetHostQuery() bool {
	return q.extra == 2 && !strings.HasPrefix(q.first, "_") && !strings.HasPrefix(q.second, "_")
}

// matchZone returns the index of the longest configured zone qname is in, or
// -1. It is dns.IsSubDomain (case-insensitive, label-wise, escapes honoured)
// without its allocations.
func (g *Global) matchZone(qname string) int {
	best := -1
	for i, z := range g.zones {
		if inZone(qname, z) && (best < 0 || len(z) > len(g.zones[best])) {
			best = i
		}
	}
	return best
}

// inZone reports whether name (fully qualified) is zone or below it.
func inZone(name, zone string) bool {
	if zone == "." {
		return true
	}
	if len(name) < len(zone) || !equalASCIIFold(name[len(name)-len(zone):], zone) {
		return false
	}
	if len(name) == len(zone) {
		return true
	}
	// The zone must start at a label boundary: an unescaped dot before it.
	dot := len(name) - len(zone) - 1
	if name[dot] != '.' {
		return false
	}
	backslashes := 0
	for i := dot - 1; i >= 0 && name[i] == '\\'; i-- {
		backslashes++
	}
	return backslashes%2 == 0
}

func equalASCIIFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// parseName reports whether name (lower case) is one this plugin may own:
// <labels...>.<service>.<namespace>.svc.<zone> where the namespace is
// watched. A service without the suffix is a native name (in the clusterset
// zone, where services are named by their base, it is the base).
func (g *Global) parseName(name, zone string, clusterset bool) (query, bool) {
	base, err := dnsutil.TrimZone(name, zone)
	if err != nil || base == "" {
		return query{}, false
	}
	// Up to five labels from the right: svc, namespace, service, then the
	// endpoint, or the protocol and the port. more: there are others left of them.
	var labels [5]string
	n, more := 0, false
	var key, both string
	if strings.IndexByte(base, '\\') < 0 {
		// Fast path, no allocation: split on dots from the right.
		var starts [5]int
		end := len(base)
		for n < len(labels) {
			i := strings.LastIndexByte(base[:end], '.')
			labels[n], starts[n] = base[i+1:end], i+1
			n++
			if i < 0 {
				break
			}
			end = i
		}
		more = n == len(labels) && starts[n-1] > 0
		if n >= 3 {
			key = base[starts[2] : starts[0]-1]
		}
		if n == 5 {
			both = base[starts[4] : starts[2]-1]
		}
	} else {
		// Escaped characters: split the way the kubernetes plugin does.
		segs := dns.SplitDomainName(base)
		for i := len(segs) - 1; i >= 0 && n < len(labels); i-- {
			labels[n] = segs[i]
			n++
		}
		more = len(segs) > len(labels)
		if n >= 3 {
			key = labels[2] + "." + labels[1]
		}
		if n == 5 {
			both = labels[4] + "." + labels[3]
		}
	}
	if n < 3 || labels[0] != "svc" {
		return query{}, false
	}
	service, namespace := labels[2], labels[1]
	_, global := aggregate.BaseOf(service, g.suffix)
	if g.namespaces != nil {
		if _, ok := g.namespaces[namespace]; !ok {
			return query{}, false
		}
	}
	q := query{key: key, extra: n - 3, native: !global && !clusterset}
	if more {
		q.extra = 3
	}
	switch q.extra {
	case 1:
		q.first = labels[3]
	case 2:
		q.first, q.second, q.both = labels[4], labels[3], both
	}
	return q, true
}

// stripUnderscore removes a leading underscore, as the kubernetes plugin does.
func stripUnderscore(s string) string {
	if len(s) > 0 && s[0] == '_' {
		return s[1:]
	}
	return s
}
