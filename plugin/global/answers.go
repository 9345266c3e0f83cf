package global

import (
	"math"
	"net"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/miekg/dns"
)

// entry is one "service" as the kubernetes plugin's findServices builds them
// for a headless service: one per ready endpoint address and port of its slice.
type entry struct {
	ip       string
	addr     net.IP // 4 bytes for A, 16 for AAAA, as msg.Service.HostType gives them
	v4       bool
	host     string // endpoint hostname, or the dashed IP when it has none
	port     int32  // -1: the endpoint's slice has no ports
	portName string
	proto    string
}

// answerSet is everything one global service answers, immutable once built.
// ServeDNS copies its records and sets the owner name; nothing else is done
// per query for the common names (the service and its per-pod names).
type answerSet struct {
	name      string // global service name
	namespace string
	key       string // "name.namespace", the index key
	all       *rrset
	hosts     map[string]*rrset // by (lower case) endpoint hostname
	endpoints int               // ready endpoints, for the gauge
	problems  map[string]string // detail -> reason, to count each problem once
	trigger   time.Time
}

// rrset holds the answers of one name.
type rrset struct {
	entries []entry
	a       []dns.A
	aaaa    []dns.AAAA
	srv     []srvSet // one per configured zone, in config order
}

// exists reports whether the name exists (has entries): NODATA rather than NXDOMAIN.
func (r *rrset) exists() bool { return r != nil && len(r.entries) > 0 }

type srvSet struct {
	srv       []dns.SRV
	extraA    []dns.A
	extraAAAA []dns.AAAA
}

// newAnswerSet turns a view into an answer set for the configured zones.
func newAnswerSet(v aggregate.View, ttl uint32, zones []string) *answerSet {
	s := &answerSet{
		name:      v.Name,
		namespace: v.Namespace,
		key:       v.Name + "." + v.Namespace,
		hosts:     map[string]*rrset{},
		trigger:   v.TriggerTime,
	}
	var entries []entry
	for _, ep := range v.Endpoints {
		if !ep.Ready {
			continue
		}
		s.endpoints++
		for _, ip := range ep.Addresses {
			addr := net.ParseIP(ip)
			if addr == nil {
				continue // aggregate only passes canonical addresses
			}
			e := entry{ip: ip, host: ep.Hostname}
			if a4 := addr.To4(); a4 != nil {
				e.addr, e.v4 = a4, true
			} else {
				e.addr = addr.To16()
			}
			if e.host == "" {
				e.host = dashedIP(ip)
			}
			if len(ep.Ports) == 0 {
				e.port = -1
				entries = append(entries, e)
				continue
			}
			for _, p := range ep.Ports {
				pe := e
				pe.port = -1
				if p.Port != nil {
					pe.port = *p.Port
				}
				if p.Name != nil {
					pe.portName = *p.Name
				}
				if p.Protocol != nil {
					pe.proto = string(*p.Protocol)
				}
				entries = append(entries, pe)
			}
		}
	}
	s.all = buildRRSet(entries, s.name, s.namespace, ttl, zones)

	byHost := map[string][]entry{}
	var order []string
	for _, e := range entries {
		h := strings.ToLower(e.host)
		if _, ok := byHost[h]; !ok {
			order = append(order, h)
		}
		byHost[h] = append(byHost[h], e)
	}
	for _, h := range order {
		s.hosts[h] = buildRRSet(byHost[h], s.name, s.namespace, ttl, zones)
	}
	if len(v.Problems) > 0 {
		s.problems = make(map[string]string, len(v.Problems))
		for _, p := range v.Problems {
			s.problems[p.Detail] = p.Reason
		}
	}
	return s
}

// dashedIP is the kubernetes plugin's endpoint name for an address without a hostname.
func dashedIP(ip string) string {
	if strings.Contains(ip, ".") {
		return strings.ReplaceAll(ip, ".", "-")
	}
	if strings.Contains(ip, ":") {
		h := strings.ReplaceAll(ip, ":", "-")
		if strings.HasSuffix(h, "-") {
			return h + "0"
		}
		return h
	}
	return ""
}

// buildRRSet computes the records for entries, the way plugin.A, plugin.AAAA
// and plugin.SRV (backend_lookup.go) compute them from the kubernetes plugin's
// services. Owner names of answers are left empty: they are the query name.
func buildRRSet(entries []entry, name, namespace string, ttl uint32, zones []string) *rrset {
	r := &rrset{entries: entries}
	seen := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		if _, dup := seen[e.ip]; dup {
			continue
		}
		seen[e.ip] = struct{}{}
		if e.v4 {
			r.a = append(r.a, dns.A{Hdr: dns.RR_Header{Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: e.addr})
		} else {
			r.aaaa = append(r.aaaa, dns.AAAA{Hdr: dns.RR_Header{Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: e.addr})
		}
	}
	if len(zones) > 0 {
		r.srv = make([]srvSet, len(zones))
	}
	for i, z := range zones {
		r.srv[i] = buildSRV(entries, name, namespace, ttl, z)
	}
	return r
}

// srvWeight is plugin.SRV's weight for n services of priority 0 and weight 0
// (each counts as 100), computed the same way, in floating point.
func srvWeight(n int) uint16 {
	w1 := 100.0 / float64(100*n)
	w1 *= 100
	weight := uint16(math.Floor(w1))
	if weight == 0 {
		weight = 1
	}
	return weight
}

type srvKey struct {
	target string
	port   uint16
	addr   string
}

// buildSRV computes SRV records and their additional addresses for zone (as
// the query spells it: the kubernetes plugin keeps the query's case there).
func buildSRV(entries []entry, name, namespace string, ttl uint32, zone string) srvSet {
	var out srvSet
	if len(entries) == 0 {
		return out
	}
	weight := srvWeight(len(entries))
	suffix := "." + name + "." + namespace + ".svc." + zone
	dup := make(map[srvKey]struct{}, 2*len(entries))
	targets := make(map[string]string)
	for _, e := range entries {
		if e.port == -1 {
			continue
		}
		target, ok := targets[e.host]
		if !ok {
			target = e.host + suffix
			targets[e.host] = target
		}
		port := uint16(e.port)
		if _, d := dup[srvKey{target: target, port: port}]; !d {
			dup[srvKey{target: target, port: port}] = struct{}{}
			out.srv = append(out.srv, dns.SRV{
				Hdr:      dns.RR_Header{Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl},
				Priority: 0, Weight: weight, Port: port, Target: target,
			})
		}
		if _, d := dup[srvKey{target: target, addr: e.ip}]; !d {
			dup[srvKey{target: target, addr: e.ip}] = struct{}{}
			hdr := dns.RR_Header{Name: target, Class: dns.ClassINET, Ttl: ttl}
			if e.v4 {
				hdr.Rrtype = dns.TypeA
				out.extraA = append(out.extraA, dns.A{Hdr: hdr, A: e.addr})
			} else {
				hdr.Rrtype = dns.TypeAAAA
				out.extraAAAA = append(out.extraAAAA, dns.AAAA{Hdr: hdr, AAAA: e.addr})
			}
		}
	}
	return out
}

// filterPort returns the entries a `_port._proto` name selects; an empty port
// or protocol matches any, as in the kubernetes plugin.
func filterPort(entries []entry, port, proto string) []entry {
	var out []entry
	for _, e := range entries {
		if (port == "" || match(port, e.portName)) && (proto == "" || match(proto, e.proto)) {
			out = append(out, e)
		}
	}
	return out
}

func match(a, b string) bool { return a == b || strings.EqualFold(a, b) }
