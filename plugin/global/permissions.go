package global

import rbacv1 "k8s.io/api/rbac/v1"

// Rules are the permissions the global plugin needs in every namespace its
// stanza names (cluster-wide without one): it lists and watches Services and
// EndpointSlices, and reads the Links' drains if it may (source.LinkRules),
// nothing more. The chart's ClusterRole for CoreDNS grants
// them (with the kubernetes plugin's), tested so, and `globalmirror check`
// asks the API server for each.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}
}
