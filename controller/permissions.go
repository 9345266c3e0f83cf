package controller

import rbacv1 "k8s.io/api/rbac/v1"

// Rules are the permissions the controller needs in every namespace it
// watches (cluster-wide when it watches all): it lists and watches Services
// and EndpointSlices, gets a Service it may have just created, writes the
// global ones it owns, and reports collisions as Events (client-go's
// recorder creates and patches core/v1 Events; events.k8s.io is the same
// resource through the newer API). The chart's Roles are tested equal to
// these, and `globalmirror check` asks the API server for each. Besides
// them it reads the Links cluster-wide (source.LinkRules), if it may.
func Rules() []rbacv1.PolicyRule {
	write := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: write},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: write},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}

// LeaseRules are what leader election needs in the Lease's namespace:
// client-go's Lease lock gets, creates and updates its one Lease, named
// lease (create cannot be limited by name).
func LeaseRules(lease string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{lease}, Verbs: []string{"get", "update"}},
	}
}
