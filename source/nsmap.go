package source

import "slices"

// nsMap maps a namespace and a name to V: one map per namespace keyed by the
// name alone: a slot's key is one string, not a pair of them, and a large
// index is mostly slots.
type nsMap[V any] map[string]map[string]V

func (m nsMap[V]) get(namespace, name string) V {
	return m[namespace][name]
}

func (m nsMap[V]) set(namespace, name string, v V) {
	in := m[namespace]
	if in == nil {
		in = map[string]V{}
		m[namespace] = in
	}
	in[name] = v
}

func (m nsMap[V]) del(namespace, name string) {
	in := m[namespace]
	delete(in, name)
	if len(in) == 0 {
		delete(m, namespace)
	}
}

func (m nsMap[V]) len() int {
	n := 0
	for _, in := range m {
		n += len(in)
	}
	return n
}

// each calls f with every entry; f may delete the entry it is given.
func (m nsMap[V]) each(f func(namespace, name string, v V)) {
	for ns, in := range m {
		for name, v := range in {
			f(ns, name, v)
		}
	}
}

// removeFrom removes v from the list m has under namespace and name, and
// the entry with its last element.
func removeFrom[V comparable](m nsMap[[]V], namespace, name string, v V) {
	rest := slices.DeleteFunc(m.get(namespace, name), func(o V) bool { return o == v })
	if len(rest) == 0 {
		m.del(namespace, name)
	} else {
		m.set(namespace, name, rest)
	}
}

// appendTo appends v to the list m has under namespace and name.
func appendTo[V any](m nsMap[[]V], namespace, name string, v V) {
	m.set(namespace, name, append(m.get(namespace, name), v))
}
