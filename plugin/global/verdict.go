package global

import "strings"

// Whose a global name is: the answer sets of rebuild follow
// aggregate.GlobalVerdict, the rule the controller writes by; a name with no
// answer set is decided here at query time.

// othersOwn reports whether a global name ("service.namespace", for which
// there is no answer set) is another's to answer: a Service of that name
// exists that globalmirror did not write, or the namespace is not watched.
func (dc *dnsController) othersOwn(key string) bool {
	name, ns, _ := strings.Cut(key, ".")
	return !dc.src.Watches(ns) || dc.src.Service(ns, name) != nil
}
