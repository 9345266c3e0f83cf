package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/globalmirror/globalmirror/controller"
	"github.com/globalmirror/globalmirror/plugin/global"
	"github.com/globalmirror/globalmirror/source"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// need is one request a component makes.
type need struct {
	verb, group, resource string
	namespace             string // empty: cluster-wide
	name                  string // empty: any object
}

// needsOf expands rules into the requests they allow, in each namespace.
func needsOf(rules []rbacv1.PolicyRule, namespaces []string) []need {
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	var out []need
	for _, ns := range namespaces {
		for _, r := range rules {
			names := r.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						for _, n := range names {
							out = append(out, need{v, g, res, ns, n})
						}
					}
				}
			}
		}
	}
	return out
}

// controllerNeeds are controller.Rules in the namespaces it watches, and
// its Lease's where it elects a leader.
func controllerNeeds(cl *Cluster) []need {
	if cl.Controller == nil {
		return nil
	}
	o := cl.Controller.Options
	out := needsOf(controller.Rules(), o.Namespaces)
	if o.LeaderElect {
		out = append(out, needsOf(controller.LeaseRules(o.LeaderElectID), []string{cl.Controller.LeaseNamespace})...)
	}
	return out
}

// dnsNeeds are global.Rules in the namespaces every stanza names together
// (cluster-wide if one names none).
func dnsNeeds(cl *Cluster) []need {
	found, _, _ := stanzas(cl)
	set := map[string]bool{}
	for _, st := range found {
		if len(st.Namespaces) == 0 {
			return needsOf(global.Rules(), nil)
		}
		for _, ns := range st.Namespaces {
			set[ns] = true
		}
	}
	return needsOf(global.Rules(), slices.Sorted(maps.Keys(set)))
}

func controllerAccounts(cl *Cluster) []string {
	if cl.Controller == nil {
		return nil
	}
	d := cl.Controller.Deployment
	return []string{d.Namespace + "/" + defaultSA(d.Spec.Template.Spec.ServiceAccountName)}
}

// dnsAccounts are the ServiceAccounts of every running pod of the judged
// DNS: during a rollout or with two Deployments behind one Service, they
// can differ.
func dnsAccounts(cl *Cluster) []string {
	d := cl.judged()
	if d == nil {
		return nil
	}
	set := map[string]bool{}
	for _, p := range d.Pods {
		set[p.Namespace+"/"+defaultSA(p.Spec.ServiceAccountName)] = true
	}
	return slices.Sorted(maps.Keys(set))
}

func defaultSA(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

// checkControllerRBAC and checkDNSRBAC are checkRBAC of each half.
func checkControllerRBAC(ctx context.Context, c check, cl *Cluster, _ globals) Result {
	return withLinkRights(ctx, c, cl, "the controller's EndpointSlices", controllerAccounts(cl),
		checkRBAC(ctx, c, cl, "controller", controllerAccounts(cl), controllerNeeds(cl)))
}

func checkDNSRBAC(ctx context.Context, c check, cl *Cluster, _ globals) Result {
	return withLinkRights(ctx, c, cl, "the global plugin's answers", dnsAccounts(cl),
		checkRBAC(ctx, c, cl, "cluster DNS", dnsAccounts(cl), dnsNeeds(cl)))
}

// withLinkRights turns r, a passed RBAC check, into a warning where an
// account may not read Linkerd's Links: it runs, but drains written on a
// Link (globalmirror drain CLUSTER) go unhonoured by what, while the
// other half may honour them.
func withLinkRights(ctx context.Context, c check, cl *Cluster, what string, accounts []string, r Result) Result {
	if r.Result != OK {
		return r
	}
	var denied []string
	for _, account := range accounts {
		no, err := refused(ctx, needsOf(source.LinkRules(), nil), func(ctx context.Context, n need) (bool, error) {
			return accountMay(ctx, cl, account, n)
		})
		if err != nil {
			return c.apiFailure("asking the API server what a ServiceAccount may do", err, "")
		}
		if len(no) > 0 {
			denied = append(denied, fmt.Sprintf("ServiceAccount %s may not %s", account, strings.Join(no, "; ")))
		}
	}
	if len(denied) == 0 {
		return r
	}
	return c.result(Warning, r.Detail+", but "+strings.Join(denied, ". ")+": drains written on Linkerd's Links (globalmirror drain CLUSTER) go unhonoured by "+what+"; drains of services (--exported, --service) are honoured",
		"grant list and watch of links.multicluster.linkerd.io cluster-wide (the chart's ClusterRoles do)")
}

// checkRBAC asks the API server, as each ServiceAccount the component runs
// as, for each request it makes.
func checkRBAC(ctx context.Context, c check, cl *Cluster, component string, accounts []string, needs []need) Result {
	if len(accounts) == 0 || len(needs) == 0 {
		if component == "controller" {
			return c.skipped("controller running")
		}
		return c.skipped("cluster DNS image")
	}
	var denied []string
	for _, account := range accounts {
		no, err := refused(ctx, needs, func(ctx context.Context, n need) (bool, error) {
			return accountMay(ctx, cl, account, n)
		})
		if err != nil {
			return c.apiFailure("asking the API server what a ServiceAccount may do", err, "")
		}
		if len(no) > 0 {
			denied = append(denied, fmt.Sprintf("ServiceAccount %s may not: %s", account, strings.Join(no, "; ")))
		}
	}
	if len(denied) > 0 {
		return c.result(Error, strings.Join(denied, ". "),
			"grant it (the chart's Roles grant exactly what each needs), or reinstall the chart with rbac.create=true")
	}
	if len(accounts) == 1 {
		return c.result(OK, fmt.Sprintf("ServiceAccount %s has the %d permissions it needs", accounts[0], len(needs)), "")
	}
	return c.result(OK, fmt.Sprintf("ServiceAccounts %s each have the %d permissions they need", strings.Join(accounts, ", "), len(needs)), "")
}

// accountMay asks the API server whether the ServiceAccount account
// (namespace/name) may make the request n.
func accountMay(ctx context.Context, cl *Cluster, account string, n need) (bool, error) {
	ns, sa, _ := strings.Cut(account, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + ns + ":" + sa,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: n.attributes(),
	}}
	got, err := cl.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("%s: %w", account, err)
	}
	return got.Status.Allowed, nil
}

// orAll is namespaces, or all of them where it is empty.
// mayRead is nil if the user may list and watch Services and EndpointSlices
// in each of namespaces (every namespace if none), else a Forbidden error
// naming what is missing where. One self-review per verb, resource and
// namespace, in parallel.
func mayRead(ctx context.Context, cl *Cluster, namespaces []string) error {
	var needs []need
	for _, ns := range orAll(namespaces) {
		for _, r := range []schema.GroupResource{{Resource: "services"}, {Group: "discovery.k8s.io", Resource: "endpointslices"}} {
			for _, verb := range []string{"list", "watch"} {
				needs = append(needs, need{namespace: ns, verb: verb, group: r.Group, resource: r.Resource})
			}
		}
	}
	no, err := refused(ctx, needs, func(ctx context.Context, n need) (bool, error) {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: n.attributes()}}
		got, err := cl.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("asking the API server what you may read: %w", err)
		}
		return got.Status.Allowed, nil
	})
	if err != nil {
		return err
	}
	if len(no) > 0 {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "",
			fmt.Errorf("your user may not %s", strings.Join(no, "; ")))
	}
	return nil
}

// refused asks allowed of each of needs, reviewsInFlight at a time (a
// stanza that watches many namespaces needs hundreds), and says those it
// refused, in needs' order: "verb resource[ name] where".
func refused(ctx context.Context, needs []need, allowed func(context.Context, need) (bool, error)) ([]string, error) {
	ok := make([]bool, len(needs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(reviewsInFlight)
	for i, n := range needs {
		g.Go(func() (err error) {
			ok[i], err = allowed(gctx, n)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var no []string
	for i, n := range needs {
		if ok[i] {
			continue
		}
		where := "cluster-wide"
		if n.namespace != "" {
			where = "in " + n.namespace
		}
		what := schema.GroupResource{Group: n.group, Resource: n.resource}.String()
		if n.name != "" {
			what += " " + n.name
		}
		no = append(no, fmt.Sprintf("%s %s %s", n.verb, what, where))
	}
	return no, nil
}

// attributes are what an access review asks of n.
func (n need) attributes() *authorizationv1.ResourceAttributes {
	return &authorizationv1.ResourceAttributes{Namespace: n.namespace, Verb: n.verb, Group: n.group, Resource: n.resource, Name: n.name}
}

// reviewsInFlight bounds the access reviews a check asks at once.
const reviewsInFlight = 16
