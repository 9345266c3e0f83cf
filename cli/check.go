package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/source"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// Result is one check: passed or not, what was found, and for a failure
// what to do.
type Result struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Hint   string `json:"hint,omitempty"`
}

// ProvenMinors are the Kubernetes minors globalmirror is tested on (the
// Makefile's version matrix).
var ProvenMinors = [2]int{31, 37}

// Check runs every check on cl, in order. Checks that need what an earlier
// one did not find fail with it.
func Check(ctx context.Context, cl *Cluster) []Result {
	var rs []Result
	add := func(r Result) { rs = append(rs, r) }
	add(checkVersion(cl))
	add(checkController(cl))
	add(checkLeader(ctx, cl))
	add(checkDNSImage(ctx, cl))
	stanza := checkStanza(cl)
	add(stanza)
	add(checkAgreement(cl))
	add(checkRBAC(ctx, cl, "controller", controllerServiceAccount(cl), controllerNeeds(cl)))
	add(checkRBAC(ctx, cl, "cluster DNS", dnsServiceAccount(cl), dnsNeeds(cl)))
	add(checkMirrors(ctx, cl))
	add(checkGlobals(ctx, cl))
	return rs
}

func pass(check, detail string) Result { return Result{Check: check, OK: true, Detail: detail} }

func fail(check, detail, hint string) Result {
	return Result{Check: check, Detail: detail, Hint: hint}
}

func checkVersion(cl *Cluster) Result {
	const name = "Kubernetes API"
	v := cl.Version
	minor, err := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err != nil {
		return fail(name, "version "+v.GitVersion+" has no minor number", "")
	}
	detail := fmt.Sprintf("%s, reachable (globalmirror is proven on 1.%d to 1.%d)", v.GitVersion, ProvenMinors[0], ProvenMinors[1])
	if v.Major != "1" || minor < ProvenMinors[0] || minor > ProvenMinors[1] {
		return fail(name, detail, "globalmirror is not tested on this version: its lists and watches may take a path no test ran")
	}
	return pass(name, detail)
}

func checkController(cl *Cluster) Result {
	const name = "controller running"
	c := cl.Controller
	if c == nil {
		return fail(name, "no globalmirror controller Deployment found",
			"install it: helm install globalmirror charts/globalmirror -n globalmirror-system --create-namespace")
	}
	d := c.Deployment
	id := d.Namespace + "/" + d.Name
	want := ptr.Deref(d.Spec.Replicas, 1)
	if d.Status.ReadyReplicas < 1 {
		return fail(name, fmt.Sprintf("%s: %d of %d replicas Ready", id, d.Status.ReadyReplicas, want),
			fmt.Sprintf("start it: kubectl -n %s scale deployment %s --replicas=2; if it runs, see why it is not Ready: kubectl -n %s describe pods -l %s",
				d.Namespace, d.Name, d.Namespace, labels.SelectorFromSet(d.Spec.Selector.MatchLabels)))
	}
	return pass(name, fmt.Sprintf("%s: %d of %d replicas Ready (caches synced)", id, d.Status.ReadyReplicas, want))
}

func checkLeader(ctx context.Context, cl *Cluster) Result {
	const name = "controller leader"
	c := cl.Controller
	if c == nil || cl.Controller.Deployment.Status.ReadyReplicas < 1 {
		return fail(name, "no controller running", "see the controller check")
	}
	if !c.Options.LeaderElect {
		return pass(name, "leader election is off: the one replica writes")
	}
	lease, err := cl.Client.CoordinationV1().Leases(c.LeaseNamespace).Get(ctx, c.Options.LeaderElectID, metav1.GetOptions{})
	if err != nil {
		return fail(name, fmt.Sprintf("Lease %s/%s: %v", c.LeaseNamespace, c.Options.LeaderElectID, err),
			"the replicas cannot elect a leader: check their logs and their RBAC on Leases")
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	pods, err := cl.Client.CoreV1().Pods(c.Deployment.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(c.Deployment.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return fail(name, err.Error(), "")
	}
	var by string
	for _, p := range pods.Items {
		if strings.HasPrefix(holder, p.Name+"_") && p.DeletionTimestamp == nil {
			by = p.Name
		}
	}
	renewed := time.Since(lease.Spec.RenewTime.Time)
	if by == "" || renewed > c.Options.LeaseDuration {
		return fail(name, fmt.Sprintf("Lease %s/%s held by %q, renewed %v ago (lease duration %v)",
			c.LeaseNamespace, c.Options.LeaderElectID, holder, renewed.Round(time.Second), c.Options.LeaseDuration),
			"no running replica leads: a standby takes over once the lease expires; if none does, read the replicas' logs")
	}
	return pass(name, fmt.Sprintf("%s holds Lease %s/%s, renewed %v ago", by, c.LeaseNamespace, c.Options.LeaderElectID, renewed.Round(time.Second)))
}

// checkDNSImage asks each cluster DNS pod's metrics (through the API
// server) for the global plugin's: an image with the plugin compiled in
// exports them, whatever its Corefile.
func checkDNSImage(ctx context.Context, cl *Cluster) Result {
	const name = "cluster DNS image"
	if cl.DNS == nil || len(cl.DNS.Pods) == 0 {
		return fail(name, "no running pod behind the cluster DNS Service", "is this cluster's DNS elsewhere? give its Service: --dns-service=NAMESPACE/NAME")
	}
	var without []string
	for _, p := range cl.DNS.Pods {
		body, err := cl.Client.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, metricsPort(&p), "metrics", nil).DoRaw(ctx)
		if err != nil || !strings.Contains(string(body), "coredns_global_") {
			without = append(without, fmt.Sprintf("%s (%s)", p.Name, p.Spec.Containers[0].Image))
		}
	}
	if len(without) > 0 {
		return fail(name, "without the global plugin: "+strings.Join(without, ", "),
			"run the globalmirror CoreDNS image: kubectl -n kube-system set image deployment/coredns coredns=<registry>/globalmirror-coredns:<version>; the controller's Services answer through the stock plugin meanwhile, but not before it has written them, nor while it is down")
	}
	return pass(name, fmt.Sprintf("%d pods run an image with the global plugin (%s)", len(cl.DNS.Pods), cl.DNS.Pods[0].Spec.Containers[0].Image))
}

func metricsPort(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "metrics" {
				return strconv.Itoa(int(port.ContainerPort))
			}
		}
	}
	return "9153"
}

func checkStanza(cl *Cluster) Result {
	const name = "global stanza"
	if cl.DNS == nil || len(cl.DNS.Corefiles) == 0 {
		return fail(name, "no Corefile found for the cluster DNS pods", "")
	}
	var missing, found []string
	for _, cm := range slices.Sorted(maps.Keys(cl.DNS.Corefiles)) {
		_, st, err := clusterBlock(cl.DNS.Corefiles[cm])
		switch {
		case err != nil:
			missing = append(missing, fmt.Sprintf("%s: %v", cm, err))
		case st == nil:
			missing = append(missing, cm+": no global stanza in the server block of the kubernetes plugin")
		default:
			found = append(found, fmt.Sprintf("%s: zones %s", cm, strings.Join(st.Zones, " ")))
		}
	}
	if len(missing) > 0 {
		return fail(name, strings.Join(missing, "; "),
			"add to the server block that answers cluster.local (kubectl -n kube-system edit configmap coredns): global cluster.local { ttl 5 }; the reload plugin applies it")
	}
	return pass(name, strings.Join(found, "; "))
}

// checkAgreement compares what the global stanzas and the controller's
// flags say: both halves compute the same global services only so.
func checkAgreement(cl *Cluster) Result {
	const name = "plugin and controller agree"
	if cl.Controller == nil || cl.DNS == nil {
		return fail(name, "not both found", "see the controller and global stanza checks")
	}
	o := cl.Controller.Options
	sel := func(s string) string {
		p, err := aggregate.ParseLocalSelector(s)
		if err != nil {
			return s
		}
		if p == nil {
			return aggregate.NoLocalSelector
		}
		return p.String()
	}
	var diffs []string
	stanzas := 0
	for _, cm := range slices.Sorted(maps.Keys(cl.DNS.Corefiles)) {
		_, st, err := clusterBlock(cl.DNS.Corefiles[cm])
		if err != nil || st == nil {
			continue
		}
		stanzas++
		if st.Suffix != o.Suffix {
			diffs = append(diffs, fmt.Sprintf("%s: suffix %q, the controller's --suffix %q", cm, st.Suffix, o.Suffix))
		}
		if a, b := slices.Sorted(slices.Values(st.Namespaces)), slices.Sorted(slices.Values(o.Namespaces)); !slices.Equal(a, b) {
			diffs = append(diffs, fmt.Sprintf("%s: namespaces %v, the controller's --namespaces %v (empty: all)", cm, a, b))
		}
		if a, b := sel(st.LocalSelector), sel(o.LocalSelector); a != b {
			diffs = append(diffs, fmt.Sprintf("%s: local_selector %q, the controller's --local-selector %q", cm, a, b))
		}
	}
	if stanzas == 0 {
		return fail(name, "no global stanza to compare", "see the global stanza check")
	}
	if len(diffs) > 0 {
		return fail(name, strings.Join(diffs, "; "),
			"give the stanza and the controller the same suffix, namespaces and local selector (the chart sets both from its values)")
	}
	return pass(name, fmt.Sprintf("suffix %q, namespaces %v (empty: all), local selector %q", o.Suffix, o.Namespaces, sel(o.LocalSelector)))
}

// need is one permission a component needs.
type need struct {
	verb, group, resource string
	namespace             string // empty: cluster-wide
	name                  string // empty: any object
}

func controllerNeeds(cl *Cluster) []need {
	var ns []string
	lease := ""
	if cl.Controller != nil {
		ns, lease = cl.Controller.Options.Namespaces, cl.Controller.LeaseNamespace
	}
	if len(ns) == 0 {
		ns = []string{""}
	}
	var out []need
	for _, n := range ns {
		for _, r := range []struct{ group, resource string }{{"", "services"}, {"discovery.k8s.io", "endpointslices"}} {
			for _, v := range []string{"list", "watch", "create", "update", "delete"} {
				out = append(out, need{v, r.group, r.resource, n, ""})
			}
		}
		out = append(out, need{"create", "", "events", n, ""}, need{"patch", "", "events", n, ""})
	}
	if lease != "" && cl.Controller.Options.LeaderElect {
		id := cl.Controller.Options.LeaderElectID
		out = append(out, need{"create", "coordination.k8s.io", "leases", lease, ""},
			need{"get", "coordination.k8s.io", "leases", lease, id}, need{"update", "coordination.k8s.io", "leases", lease, id})
	}
	return out
}

// dnsNeeds are the global plugin's: to list and watch Services and
// EndpointSlices in the namespaces its stanza names (empty: all).
func dnsNeeds(cl *Cluster) []need {
	namespaces := []string{""}
	if cl.DNS != nil {
		for _, cm := range slices.Sorted(maps.Keys(cl.DNS.Corefiles)) {
			if _, st, err := clusterBlock(cl.DNS.Corefiles[cm]); err == nil && st != nil && len(st.Namespaces) > 0 {
				namespaces = st.Namespaces
				break
			}
		}
	}
	var out []need
	for _, n := range namespaces {
		for _, v := range []string{"list", "watch"} {
			out = append(out, need{v, "", "services", n, ""}, need{v, "discovery.k8s.io", "endpointslices", n, ""})
		}
	}
	return out
}

func controllerServiceAccount(cl *Cluster) string {
	if cl.Controller == nil {
		return ""
	}
	d := cl.Controller.Deployment
	return d.Namespace + "/" + defaultSA(d.Spec.Template.Spec.ServiceAccountName)
}

func dnsServiceAccount(cl *Cluster) string {
	if cl.DNS == nil || len(cl.DNS.Pods) == 0 {
		return ""
	}
	p := cl.DNS.Pods[0]
	return p.Namespace + "/" + defaultSA(p.Spec.ServiceAccountName)
}

func defaultSA(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

// checkRBAC asks the API server, as the component's ServiceAccount, for
// each permission it needs.
func checkRBAC(ctx context.Context, cl *Cluster, component, account string, needs []need) Result {
	name := "RBAC of the " + component
	if account == "" {
		return fail(name, "no "+component+" found", "")
	}
	ns, sa, _ := strings.Cut(account, "/")
	var denied []string
	for _, n := range needs {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + ns + ":" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: n.namespace, Verb: n.verb, Group: n.group, Resource: n.resource, Name: n.name,
			},
		}}
		got, err := cl.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return fail(name, err.Error(), "")
		}
		if !got.Status.Allowed {
			where := "cluster-wide"
			if n.namespace != "" {
				where = "in " + n.namespace
			}
			what := schema.GroupResource{Group: n.group, Resource: n.resource}.String()
			if n.name != "" {
				what += " " + n.name
			}
			denied = append(denied, fmt.Sprintf("%s %s %s", n.verb, what, where))
		}
	}
	if len(denied) > 0 {
		return fail(name, fmt.Sprintf("ServiceAccount %s may not: %s", account, strings.Join(denied, "; ")),
			"grant it (the chart's ClusterRoles list what each needs), or reinstall the chart with rbac.create=true")
	}
	return pass(name, fmt.Sprintf("ServiceAccount %s has the %d permissions it needs", account, len(needs)))
}

// checkMirrors looks for Linkerd's headless mirrors, and for service
// mirrors that do not mirror headless services (-enable-headless-services
// is off by default).
func checkMirrors(ctx context.Context, cl *Cluster) Result {
	const name = "Linkerd's headless mirrors"
	svcs, err := cl.Client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: aggregate.LabelMirroredService + "=true"})
	if err != nil {
		return fail(name, err.Error(), "")
	}
	byCluster := map[string]int{}
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP == corev1.ClusterIPNone && s.Labels[aggregate.LabelHeadlessMirrorName] == "" {
			byCluster[s.Labels[aggregate.LabelClusterName]]++
		}
	}
	mirrors, _ := cl.Client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: "component in (linkerd-service-mirror, controller)," + aggregate.LabelClusterName})
	var off []string
	if mirrors != nil {
		for _, d := range mirrors.Items {
			headless := false
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, a := range append(slices.Clone(c.Command), c.Args...) {
					if a == "-enable-headless-services" || a == "--enable-headless-services" || strings.HasSuffix(a, "enable-headless-services=true") {
						headless = true
					}
				}
			}
			if !headless {
				off = append(off, fmt.Sprintf("%s/%s (cluster %s)", d.Namespace, d.Name, d.Labels[aggregate.LabelClusterName]))
			}
		}
	}
	if len(off) > 0 {
		return fail(name, "service mirrors without -enable-headless-services: "+strings.Join(off, ", "),
			"link with headless mirroring: linkerd multicluster link --set enableHeadlessServices=true (or the multicluster chart's controllers[].enableHeadlessServices)")
	}
	if len(byCluster) == 0 {
		return fail(name, "no headless mirror in any namespace",
			"export a headless service in a linked cluster (label mirror.linkerd.io/exported=true), linked with headless mirroring (enableHeadlessServices=true)")
	}
	var per []string
	for _, c := range slices.Sorted(maps.Keys(byCluster)) {
		per = append(per, fmt.Sprintf("%s: %d", c, byCluster[c]))
	}
	return pass(name, "headless mirrors by cluster: "+strings.Join(per, ", "))
}

// checkGlobals compares, for every global service, the ready addresses
// the aggregation gives from the mirrors and local services with those of
// the controller's EndpointSlices; a difference that lasts is a global the
// controller is stuck on.
func checkGlobals(ctx context.Context, cl *Cluster) Result {
	const name = "global services in sync"
	if cl.Controller == nil {
		return fail(name, "no controller", "see the controller check")
	}
	ctx, stop := context.WithCancel(ctx) // the index's watches end with the check
	defer stop()
	idx, err := Index(ctx, cl, cl.Controller.Options.Namespaces)
	if err != nil {
		return fail(name, err.Error(), "")
	}
	var stuck []string
	total := 0
	for attempt := range 3 {
		stuck, total = nil, 0
		for _, k := range idx.Keys() {
			in := idx.Input(k)
			if !aggregate.Exists(in) {
				continue
			}
			total++
			v := aggregate.Aggregate(in)
			missing, extra, err := compareSlices(ctx, cl, v)
			if err != nil {
				return fail(name, err.Error(), "")
			}
			if len(missing)+len(extra) > 0 {
				stuck = append(stuck, fmt.Sprintf("%s/%s (missing %v, extra %v)", v.Namespace, v.Name, missing, extra))
			}
		}
		if len(stuck) == 0 || attempt == 2 {
			break
		}
		time.Sleep(2 * time.Second) // a change on its way
	}
	if len(stuck) > 0 {
		return fail(name, fmt.Sprintf("%d of %d out of sync for 4 s: %s", len(stuck), total, strings.Join(stuck, "; ")),
			"the controller has not written them: read its log (sync failed) and globalmirror_syncs_total{result=\"error\"}; globalmirror status NAMESPACE/NAME shows one")
	}
	return pass(name, fmt.Sprintf("%d global services, each with the ready addresses its members give", total))
}

// Index builds the index both halves build, of namespaces (empty: all),
// as the controller's flags say. It follows the cluster until ctx is done.
func Index(ctx context.Context, cl *Cluster, namespaces []string) (*source.Source, error) {
	o := cl.Controller.Options
	sel, err := aggregate.ParseLocalSelector(o.LocalSelector)
	if err != nil {
		return nil, err
	}
	src, err := source.New(source.Config{Client: cl.Client, API: cl.Config, Namespaces: namespaces, Suffix: o.Suffix, LocalSelector: sel, NoUIDs: true})
	if err != nil {
		return nil, err
	}
	src.Start(ctx)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !src.WaitForSync(wctx) {
		return nil, fmt.Errorf("listing the mirrors did not end within a minute")
	}
	return src, nil
}

// compareSlices lists the ready addresses v has that the controller's
// EndpointSlices of it lack, and those they have that v does not.
func compareSlices(ctx context.Context, cl *Cluster, v aggregate.View) (missing, extra []string, err error) {
	l, err := cl.Client.DiscoveryV1().EndpointSlices(v.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + v.Name + "," + discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy})
	if err != nil {
		return nil, nil, err
	}
	want, got := map[string]bool{}, map[string]bool{}
	for _, e := range v.Endpoints {
		if e.Ready {
			for _, a := range e.Addresses {
				want[a] = true
			}
		}
	}
	for _, s := range l.Items {
		for _, e := range s.Endpoints {
			if aggregate.EndpointReady(&e) {
				for _, a := range e.Addresses {
					got[a] = true
				}
			}
		}
	}
	for a := range want {
		if !got[a] {
			missing = append(missing, a)
		}
	}
	for a := range got {
		if !want[a] {
			extra = append(extra, a)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return missing, extra, nil
}
