package source

import (
	"strconv"
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

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
