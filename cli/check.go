package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/build"
	"github.com/globalmirror/globalmirror/controller"
	"github.com/globalmirror/globalmirror/controller/slicewriter"
	"github.com/globalmirror/globalmirror/plugin/global"
	"github.com/globalmirror/globalmirror/source"
	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// Level is how a check ended.
type Level string

const (
	// OK: as it should be.
	OK Level = "ok"
	// Warning: works, but not as proven or advised; check still exits 0.
	Warning Level = "warning"
	// Error: broken, or could not be judged; check exits 1.
	Error Level = "error"
)

// Category is what a check is about; checks run, and are written, in the
// order of the constants below.
type Category string

const (
	CategoryKubernetes Category = "kubernetes"
	CategoryController Category = "controller"
	CategoryDNS        Category = "cluster DNS"
	CategoryLinkerd    Category = "linkerd"
	CategoryGlobals    Category = "global services"
)

// Result is one check: how it ended, what was found, and where it did not
// pass, what to do.
type Result struct {
	Category Category `json:"category"`
	Check    string   `json:"check"`
	Result   Level    `json:"result"`
	Detail   string   `json:"detail"`
	Hint     string   `json:"hint,omitempty"`
	// Doc is the check's row in the README of the command's release.
	Doc string `json:"doc"`
}

// Report is what `globalmirror check` says, in the same shape whether it
// passed, failed, or could not reach the API server at all.
type Report struct {
	// Success: no check ended in Error.
	Success bool     `json:"success"`
	Checks  []Result `json:"checks"`
}

// NewReport is the report of rs.
func NewReport(rs []Result) Report {
	return Report{Success: !slices.ContainsFunc(rs, func(r Result) bool { return r.Result == Error }), Checks: rs}
}

// Check runs every check on cl, in order, handing each result to add as it
// ends. A check that needs what an earlier one did not find fails and names
// that one.
func Check(ctx context.Context, cl *Cluster, add func(Result)) {
	// Each check may spend at most half of the time left, so that one
	// slow pod or feed leaves the checks after it theirs.
	budget := func() (context.Context, context.CancelFunc) {
		if deadline, ok := ctx.Deadline(); ok {
			return context.WithTimeout(ctx, time.Until(deadline)/2)
		}
		return context.WithCancel(ctx)
	}
	gctx, cancel := budget()
	g := readGlobals(gctx, cl)
	cancel()
	for _, check := range []func(ctx context.Context) Result{
		func(context.Context) Result { return checkVersion(cl) },
		func(ctx context.Context) Result { return checkController(ctx, cl) },
		func(ctx context.Context) Result { return checkLeader(ctx, cl) },
		func(ctx context.Context) Result {
			return checkRBAC(ctx, cl, CategoryController, "controller", controllerAccounts(cl), controllerNeeds(cl))
		},
		func(ctx context.Context) Result { return checkDNSImage(ctx, cl) },
		func(context.Context) Result { return checkStanza(cl) },
		func(context.Context) Result { return checkAgreement(cl) },
		func(ctx context.Context) Result {
			return checkRBAC(ctx, cl, CategoryDNS, "cluster DNS", dnsAccounts(cl), dnsNeeds(cl))
		},
		func(ctx context.Context) Result { return checkMirrors(ctx, cl) },
		func(context.Context) Result { return g.syncResult() },
		func(ctx context.Context) Result { return checkServed(ctx, cl, g) },
		func(context.Context) Result { return g.conflictResult() },
	} {
		cctx, cancel := budget()
		add(check(cctx))
		cancel()
	}
}

// RunCheck connects and checks, and returns by ctx's deadline plus grace
// whatever happens: a kubeconfig's credential plugin that never returns, or
// a request that ignores its context, cannot hold it (client-go runs exec
// plugins and transports without a deadline of their own). What did not
// end by then is one Error saying so; a panic is one Error too. Either way
// the report has its one shape.
func RunCheck(ctx context.Context, grace time.Duration, connect func(context.Context) (*Cluster, error)) []Result {
	var mu sync.Mutex
	var rs []Result
	connected := false
	add := func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		rs = append(rs, r)
	}
	ended, panicked := Bounded(ctx, grace, func() {
		cl, err := connect(ctx)
		if err != nil {
			add(Unreachable(err)[0])
			return
		}
		mu.Lock()
		connected = true
		mu.Unlock()
		Check(ctx, cl, add)
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case panicked != nil:
		return append(slices.Clone(rs), result(CategoryKubernetes, "globalmirror check", Error, fmt.Sprintf("internal error: %v", panicked),
			"a bug of globalmirror check: please report it with this output"))
	case ended:
		return slices.Clone(rs)
	case !connected:
		return append(slices.Clone(rs), result(CategoryKubernetes, "Kubernetes API", Error,
			"the API server: no answer before the timeout: neither the server nor the kubeconfig's credential plugin (users[].user.exec) answered",
			"run any kubectl command with the same kubeconfig: a credential plugin waiting for a login or a device code hangs it too; else raise --timeout"))
	}
	category := CategoryKubernetes
	if len(rs) > 0 {
		category = rs[len(rs)-1].Category
	}
	return append(slices.Clone(rs), result(category, "checks not finished", Error,
		fmt.Sprintf("no answer before the timeout: the check after the %d above did not end, nor the rest", len(rs)),
		"raise --timeout, or see why the API server (or a CoreDNS pod it proxies to) is slow"))
}

// Bounded runs fn and waits for it until ctx has ended and grace has
// passed: whether fn returned by then, and what it panicked with if it did.
// A fn still running is left to end on its own (client-go runs credential
// plugins and transports with no deadline of their own).
func Bounded(ctx context.Context, grace time.Duration, fn func()) (ended bool, panicked any) {
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		fn()
	}()
	select {
	case p := <-done:
		return true, p
	case <-ctx.Done():
	}
	select {
	case p := <-done:
		return true, p
	case <-time.After(grace):
		return false, nil
	}
}

// Unreachable is the report of a run whose API server did not answer.
func Unreachable(err error) []Result {
	return []Result{apiFailure(CategoryKubernetes, "Kubernetes API", "the API server", err,
		"is the kubeconfig's server reachable from here (--kubeconfig, --context)? a slow one needs a longer --timeout")}
}

func result(category Category, check string, level Level, detail, hint string) Result {
	if level == OK {
		hint = ""
	}
	return Result{Category: category, Check: check, Result: level, Detail: detail, Hint: hint, Doc: DocURL(check)}
}

// DocURL is where the README of the command's release says what check
// reads and when it passes: its row in the table of checks, anchored
// "check-" and the check's name in lower case, each run of other
// characters one hyphen. A build with no release (go test, go run) links
// to main.
func DocURL(check string) string {
	ref := "main"
	if build.Released() {
		ref = "v" + strings.TrimPrefix(build.Version, "v")
	}
	return "https://github.com/globalmirror/globalmirror/blob/" + ref + "/README.md#" + docAnchor(check)
}

func docAnchor(check string) string {
	var b strings.Builder
	b.WriteString("check")
	hyphen := true
	for _, r := range strings.ToLower(check) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if hyphen {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			hyphen = false
		} else {
			hyphen = true
		}
	}
	return b.String()
}

// apiFailure is the Error of a check an API request stopped, saying why:
// refused to the user who runs check, unanswered in time, or else.
func apiFailure(category Category, check, what string, err error, hint string) Result {
	switch {
	case apierrors.IsForbidden(err):
		return result(category, check, Error, what+": forbidden: "+errMessage(err),
			"globalmirror check reads as you: let your user get, list and watch what it reads (a read-only ClusterRole such as view, plus pods/proxy and subjectaccessreviews)")
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		return result(category, check, Error, what+": no answer before the timeout: "+err.Error(), "raise --timeout, or see why the API server is slow")
	}
	if hint == "" {
		hint = "the API server's answer above says what it refused; kubectl get --raw '/readyz?verbose' says whether it is healthy"
	}
	return result(category, check, Error, what+": "+errMessage(err), hint)
}

// errMessage is an API error's message, or any other error's text.
func errMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

func checkVersion(cl *Cluster) Result {
	const category, name = CategoryKubernetes, "Kubernetes API"
	v := cl.Version
	proven := build.KubernetesMinors()
	var list []string
	for _, m := range proven {
		list = append(list, fmt.Sprintf("1.%d", m))
	}
	minor, err := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err != nil || v.Major != "1" {
		return result(category, name, Error, fmt.Sprintf("version %s (major %q, minor %q) is not a Kubernetes 1.x release", v.GitVersion, v.Major, v.Minor),
			"globalmirror runs on Kubernetes 1.x")
	}
	detail := fmt.Sprintf("%s, reachable; proven on %s", v.GitVersion, strings.Join(list, ", "))
	switch {
	case minor < proven[0]:
		return result(category, name, Error, detail, fmt.Sprintf("upgrade to 1.%d or later: the chart requires it, and older API servers lack what both halves rely on", proven[0]))
	case !slices.Contains(proven, minor):
		return result(category, name, Warning, detail, fmt.Sprintf("1.%d is not among the releases the tests run on: it likely works, but no test proved it", minor))
	}
	return result(category, name, OK, detail, "")
}

func checkController(ctx context.Context, cl *Cluster) Result {
	const category, name = CategoryController, "controller running"
	if cl.ControllerErr != nil {
		return apiFailure(category, name, "looking for the controller", cl.ControllerErr, "")
	}
	c := cl.Controller
	if c == nil {
		return result(category, name, Error, "no globalmirror controller Deployment found",
			"install it: helm install globalmirror charts/globalmirror -n globalmirror-system --create-namespace")
	}
	d := c.Deployment
	id := d.Namespace + "/" + d.Name
	if len(c.Others) > 0 {
		return result(category, name, Error, fmt.Sprintf("%d controller releases: %s", 1+len(c.Others), strings.Join(append([]string{id}, c.Others...), ", ")),
			"each writes the global services of what it watches, against the others: keep one release (helm list -A)")
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	if d.Status.ReadyReplicas < 1 {
		return result(category, name, Error, fmt.Sprintf("%s: %d of %d replicas Ready", id, d.Status.ReadyReplicas, want),
			fmt.Sprintf("start it: kubectl -n %s scale deployment %s --replicas=2; if it runs, see why it is not Ready: kubectl -n %s describe pods -l %s",
				d.Namespace, d.Name, d.Namespace, labels.SelectorFromSet(d.Spec.Selector.MatchLabels)))
	}
	ok := result(category, name, OK, fmt.Sprintf("%s: %d of %d replicas Ready (caches synced)", id, d.Status.ReadyReplicas, want), "")
	return versionSkew(ok, "globalmirror_build_info", controllerMetrics(ctx, cl))
}

// controllerMetrics are the metrics of the controller's running pods, by
// name, read through the API server's pod proxy; a pod that could not be
// read is left out (what it runs is then unsaid, not wrong).
func controllerMetrics(ctx context.Context, cl *Cluster) map[string]string {
	d := cl.Controller.Deployment
	_, port, err := net.SplitHostPort(cl.Controller.Options.MetricsAddr)
	if err != nil || d.Spec.Selector == nil || cl.Client == nil {
		return nil
	}
	pods, err := cl.Client.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return nil
	}
	running := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil })
	bodies, errs := podMetrics(ctx, cl, running, func(*corev1.Pod) string { return port })
	out := map[string]string{}
	for i, p := range running {
		if errs[i] == nil {
			out[p.Name] = string(bodies[i])
		}
	}
	return out
}

// podMetrics reads the metrics of every pod at once, through the API
// server's pod proxy on the port port says: one that does not answer
// costs the others nothing.
func podMetrics(ctx context.Context, cl *Cluster, pods []corev1.Pod, port func(*corev1.Pod) string) ([][]byte, []error) {
	bodies, errs := make([][]byte, len(pods)), make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() {
			bodies[i], errs[i] = cl.Client.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, port(&p), "metrics", nil).DoRaw(ctx)
		})
	}
	wg.Wait()
	return bodies, errs
}

func checkLeader(ctx context.Context, cl *Cluster) Result {
	const category, name = CategoryController, "controller leader"
	c := cl.Controller
	if c == nil || c.Deployment.Status.ReadyReplicas < 1 {
		return result(category, name, Error, "no controller running", "see the controller running check")
	}
	if !c.Options.LeaderElect {
		if replicas := ptr.Deref(c.Deployment.Spec.Replicas, 1); replicas > 1 {
			return result(category, name, Error, fmt.Sprintf("leader election is off, with %d replicas: each writes the same global services against the others", replicas),
				"turn leader election on (the chart's default; --leader-elect=true), or run one replica")
		}
		return result(category, name, OK, "leader election is off: the one replica writes", "")
	}
	id := c.LeaseNamespace + "/" + c.Options.LeaderElectID
	lease, err := cl.Client.CoordinationV1().Leases(c.LeaseNamespace).Get(ctx, c.Options.LeaderElectID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return result(category, name, Error, "no Lease "+id, "the replicas cannot elect a leader: read their logs, and see the RBAC of the controller check")
	}
	if err != nil {
		return apiFailure(category, name, "reading Lease "+id, err, "")
	}
	pods, err := cl.Client.CoreV1().Pods(c.Deployment.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(c.Deployment.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return apiFailure(category, name, "listing the controller's pods", err, "")
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	var by string
	for _, p := range pods.Items {
		// client-go's leader election identity is the pod's name, "_", a UUID.
		if holder != "" && strings.HasPrefix(holder, p.Name+"_") && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			by = p.Name
		}
	}
	renewed := "never"
	fresh := false
	if t := lease.Spec.RenewTime; t != nil {
		age := time.Since(t.Time)
		renewed = age.Round(time.Second).String() + " ago"
		fresh = age <= c.Options.LeaseDuration
	}
	if by == "" || !fresh {
		if holder == "" {
			holder = "nobody"
		}
		return result(category, name, Error, fmt.Sprintf("Lease %s held by %s, renewed %s (lease duration %v); %d controller pods", id, holder, renewed, c.Options.LeaseDuration, len(pods.Items)),
			"no running replica leads, so nothing writes global services: a replica takes over once the Lease expires; if none does, read the replicas' logs")
	}
	return result(category, name, OK, fmt.Sprintf("%s holds Lease %s, renewed %s", by, id, renewed), "")
}

// checkDNSImage asks each cluster DNS pod's metrics (through the API
// server's pod proxy) for the global plugin's: an image with the plugin
// compiled in exports them, whatever its Corefile.
func checkDNSImage(ctx context.Context, cl *Cluster) Result {
	const category, name = CategoryDNS, "cluster DNS image"
	if cl.DNSErr != nil {
		return apiFailure(category, name, "reading the cluster DNS", cl.DNSErr, "is this cluster's DNS elsewhere? give its Service: --dns-service=NAMESPACE/NAME")
	}
	if len(cl.DNS.Pods) == 0 {
		return result(category, name, Error, "no running pod behind the cluster DNS Service "+cl.DNS.Service.Namespace+"/"+cl.DNS.Service.Name,
			"is this cluster's DNS elsewhere? give its Service: --dns-service=NAMESPACE/NAME")
	}
	bodies, errs := podMetrics(ctx, cl, cl.DNS.Pods, metricsPort)
	var without, unread []string
	for i, p := range cl.DNS.Pods {
		body, err := bodies[i], errs[i]
		switch {
		case apierrors.IsForbidden(err):
			unread = append(unread, fmt.Sprintf("%s: forbidden: %s", p.Name, errMessage(err)))
		case err != nil:
			unread = append(unread, fmt.Sprintf("%s: %v", p.Name, err))
		case !strings.Contains(string(body), "coredns_global_"):
			without = append(without, fmt.Sprintf("%s (%s)", p.Name, p.Spec.Containers[0].Image))
		default:
			if cl.DNS.metrics == nil {
				cl.DNS.metrics = map[string]string{}
			}
			cl.DNS.metrics[p.Name] = string(body)
		}
	}
	if len(unread) > 0 {
		return result(category, name, Error, "could not read the metrics of "+strings.Join(unread, "; "),
			"check reads each DNS pod's metrics through the API server: let your user get pods/proxy in "+cl.DNS.Service.Namespace+", and see that the pods serve metrics (the prometheus plugin)")
	}
	if len(without) > 0 {
		return result(category, name, Error, "without the global plugin: "+strings.Join(without, ", "),
			"run the globalmirror CoreDNS image as the chart's README patches it in (kubectl -n kube-system patch deployment/coredns: the image, and readiness every 2 s); the controller's Services answer through the stock plugin meanwhile, but not before it has written them, nor while it is down")
	}
	ok := result(category, name, OK, fmt.Sprintf("%d pods run an image with the global plugin (%s)", len(cl.DNS.Pods), cl.DNS.Pods[0].Spec.Containers[0].Image), "")
	return versionSkew(ok, "coredns_global_build_info", cl.DNS.metrics)
}

// versionSkew is ok unless the metrics of some pod (by name) say, in
// their metric's version label, a globalmirror release other than this
// command's: a minor apart is ‼, more is ✘, and a pod whose metrics do not
// say is ‼ (a release from before the metric).
func versionSkew(ok Result, metric string, metrics map[string]string) Result {
	find := regexp.MustCompile(regexp.QuoteMeta(metric) + `\{[^}]*\bversion="([^"]*)"`)
	worst := 0 // 0 none, 1 a minor apart or unsaid, 2 more
	var skewed []string
	for _, pod := range slices.Sorted(maps.Keys(metrics)) {
		m := find.FindStringSubmatch(metrics[pod])
		if m == nil {
			skewed, worst = append(skewed, pod+" (its release unsaid: older than "+metric+")"), max(worst, 1)
			continue
		}
		if skew := build.Skew(m[1], build.Version); skew > 0 {
			skewed, worst = append(skewed, pod+" "+m[1]), max(worst, skew)
		}
	}
	if worst == 0 {
		return ok
	}
	level := Warning
	if worst > 1 {
		level = Error
	}
	return result(ok.Category, ok.Check, level, fmt.Sprintf("%s; globalmirror releases other than this command's %s: %s", ok.Detail, build.Version, strings.Join(skewed, ", ")),
		"run the globalmirror command of the release the cluster runs, or upgrade the chart: the command judges with its own release's rules, which hold one minor release apart at most")
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

// stanzas are the global stanzas of the cluster DNS's Corefiles, by
// ConfigMap, and what keeps the others from being read.
func stanzas(cl *Cluster) (found map[string]*global.Stanza, problems []string) {
	found = map[string]*global.Stanza{}
	if cl.DNS == nil {
		return found, nil
	}
	for _, cm := range slices.Sorted(maps.Keys(cl.DNS.CorefileErrs)) {
		err := cl.DNS.CorefileErrs[cm]
		if apierrors.IsForbidden(err) {
			problems = append(problems, fmt.Sprintf("%s: forbidden: %s", cm, errMessage(err)))
		} else {
			problems = append(problems, fmt.Sprintf("%s: %v", cm, err))
		}
	}
	for _, cm := range slices.Sorted(maps.Keys(cl.DNS.Corefiles)) {
		b, st, unread, err := clusterBlock(cl.DNS.Corefiles[cm], cl.DNS.Files[cm])
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", cm, err))
		case st == nil && len(unread) > 0:
			problems = append(problems, fmt.Sprintf("%s: no global stanza in the server block of the kubernetes plugin, where it could be read (%s)", cm, strings.Join(unread, "; ")))
		case st == nil:
			problems = append(problems, cm+": no global stanza in the server block of the kubernetes plugin")
		default:
			served := kubernetesZones(b)
			if outside := zonesOutside(st.Zones, served); len(outside) > 0 {
				problems = append(problems, fmt.Sprintf("%s: global answers in %s, which is not the cluster's domain: the kubernetes plugin serves %s",
					cm, strings.Join(outside, " "), strings.Join(served, " ")))
				continue
			}
			found[cm] = st
		}
	}
	return found, problems
}

func checkStanza(cl *Cluster) Result {
	const category, name = CategoryDNS, "global stanza"
	if cl.DNSErr != nil {
		return result(category, name, Error, "the cluster DNS could not be read", "see the cluster DNS image check")
	}
	found, problems := stanzas(cl)
	if len(problems) > 0 {
		return result(category, name, Error, strings.Join(problems, "; "),
			"add to the server block that answers cluster.local (kubectl -n kube-system edit configmap coredns): global cluster.local { ttl 5 }; the reload plugin applies it")
	}
	if len(found) == 0 {
		return result(category, name, Error, "no Corefile found: the DNS pods load none from a ConfigMap volume",
			"check reads the Corefile a DNS pod names with -conf from the ConfigMap volume mounted there, as kubeadm's and the chart's CoreDNS load it; are the pods behind --dns-service CoreDNS?")
	}
	// The prometheus plugin says which plugins each pod's running
	// instance has: a stanza in the ConfigMap that a pod never loaded (no
	// reload plugin, or a Corefile it rejected) is not there at all.
	var unloaded []string
	for _, pod := range slices.Sorted(maps.Keys(cl.DNS.metrics)) {
		if !strings.Contains(cl.DNS.metrics[pod], `coredns_plugin_enabled{name="global"`) {
			unloaded = append(unloaded, pod)
		}
	}
	if len(unloaded) > 0 {
		return result(category, name, Error, "in the Corefile, but not loaded by "+strings.Join(unloaded, ", "),
			"CoreDNS loads an edited Corefile only with the reload plugin, and keeps the old one where it rejects the new: its log says why; restarting the pods loads it")
	}
	var out []string
	for _, cm := range slices.Sorted(maps.Keys(found)) {
		out = append(out, fmt.Sprintf("%s: zones %s", cm, strings.Join(found[cm].Zones, " ")))
	}
	return result(category, name, OK, strings.Join(out, "; "), "")
}

// checkAgreement compares what the global stanzas and the controller's
// flags say: both halves compute the same global services only so.
func checkAgreement(cl *Cluster) Result {
	const category, name = CategoryDNS, "plugin and controller agree"
	found, _ := stanzas(cl)
	if cl.Controller == nil || len(found) == 0 {
		return result(category, name, Error, "no controller or no global stanza to compare", "see the controller running and global stanza checks")
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
	for _, cm := range slices.Sorted(maps.Keys(found)) {
		st := found[cm]
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
	if len(diffs) > 0 {
		return result(category, name, Error, strings.Join(diffs, "; "),
			"give the stanza and the controller the same suffix, namespaces and local selector (the chart sets both from its values)")
	}
	return result(category, name, OK, fmt.Sprintf("suffix %q, namespaces %v (empty: all), local selector %q", o.Suffix, o.Namespaces, sel(o.LocalSelector)), "")
}

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
	found, _ := stanzas(cl)
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

// dnsAccounts are the ServiceAccounts of every running DNS pod: during a
// rollout or with two Deployments behind one Service, they can differ.
func dnsAccounts(cl *Cluster) []string {
	if cl.DNS == nil {
		return nil
	}
	set := map[string]bool{}
	for _, p := range cl.DNS.Pods {
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

// checkRBAC asks the API server, as each ServiceAccount the component runs
// as, for each request it makes.
func checkRBAC(ctx context.Context, cl *Cluster, category Category, component string, accounts []string, needs []need) Result {
	name := "RBAC of the " + component
	if len(accounts) == 0 || len(needs) == 0 {
		return result(category, name, Error, "no "+component+" found", "see the checks above")
	}
	var denied []string
	for _, account := range accounts {
		ns, sa, _ := strings.Cut(account, "/")
		no, err := refused(ctx, needs, func(ctx context.Context, n need) (bool, error) {
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
		})
		if err != nil {
			return apiFailure(category, name, "asking the API server what a ServiceAccount may do", err, "")
		}
		if len(no) > 0 {
			denied = append(denied, fmt.Sprintf("ServiceAccount %s may not: %s", account, strings.Join(no, "; ")))
		}
	}
	if len(denied) > 0 {
		return result(category, name, Error, strings.Join(denied, ". "),
			"grant it (the chart's Roles grant exactly what each needs), or reinstall the chart with rbac.create=true")
	}
	if len(accounts) == 1 {
		return result(category, name, OK, fmt.Sprintf("ServiceAccount %s has the %d permissions it needs", accounts[0], len(needs)), "")
	}
	return result(category, name, OK, fmt.Sprintf("ServiceAccounts %s each have the %d permissions they need", strings.Join(accounts, ", "), len(needs)), "")
}

// checkMirrors looks for Linkerd's headless mirrors, and for service
// mirrors that do not mirror headless services (-enable-headless-services
// is off by default).
func checkMirrors(ctx context.Context, cl *Cluster) Result {
	const category, name = CategoryLinkerd, "Linkerd's headless mirrors"
	svcs, err := cl.Client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: aggregate.LabelMirroredService + "=true"})
	if err != nil {
		return apiFailure(category, name, "listing Linkerd's mirrors", err, "")
	}
	var watched []string // empty: every namespace
	if cl.Controller != nil {
		watched = cl.Controller.Options.Namespaces
	}
	byCluster, unwatched := map[string]int{}, map[string]int{}
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP == corev1.ClusterIPNone && s.Labels[aggregate.LabelHeadlessMirrorName] == "" {
			byCluster[s.Labels[aggregate.LabelClusterName]]++
			if len(watched) > 0 && !slices.Contains(watched, s.Namespace) {
				unwatched[s.Namespace]++
			}
		}
	}
	mirrors, err := cl.Client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: "component in (linkerd-service-mirror, controller)," + aggregate.LabelClusterName})
	if err != nil {
		return apiFailure(category, name, "listing Linkerd's service mirrors", err, "")
	}
	var off []string
	for _, d := range mirrors.Items {
		if !mirrorsHeadless(d.Spec.Template.Spec.Containers) {
			off = append(off, fmt.Sprintf("%s/%s (cluster %s)", d.Namespace, d.Name, d.Labels[aggregate.LabelClusterName]))
		}
	}
	if len(off) > 0 {
		return result(category, name, Error, "service mirrors without -enable-headless-services: "+strings.Join(off, ", "),
			"link with headless mirroring: linkerd multicluster link --set enableHeadlessServices=true (or the multicluster chart's controllers[].enableHeadlessServices)")
	}
	if len(byCluster) == 0 {
		return result(category, name, Error, "no headless mirror in any namespace",
			"export a headless service in a linked cluster (label mirror.linkerd.io/exported=true), linked with headless mirroring (enableHeadlessServices=true)")
	}
	var per []string
	for _, c := range slices.Sorted(maps.Keys(byCluster)) {
		per = append(per, fmt.Sprintf("%s: %d", c, byCluster[c]))
	}
	detail := "headless mirrors by cluster: " + strings.Join(per, ", ")
	if len(unwatched) > 0 {
		var outside []string
		for _, ns := range slices.Sorted(maps.Keys(unwatched)) {
			outside = append(outside, fmt.Sprintf("%s: %d", ns, unwatched[ns]))
		}
		return result(category, name, Warning, detail+"; in namespaces the controller does not watch, so without a global: "+strings.Join(outside, ", "),
			"where they should have one, add those namespaces to the controller's --namespaces and to the global stanza's namespaces")
	}
	return result(category, name, OK, detail, "")
}

func mirrorsHeadless(containers []corev1.Container) bool {
	for _, c := range containers {
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			if a == "-enable-headless-services" || a == "--enable-headless-services" || strings.HasSuffix(a, "enable-headless-services=true") {
				return true
			}
		}
	}
	return false
}

// globals is what the global services check and the name conflicts check
// found: every base judged by aggregate.GlobalVerdict, as the controller
// judges it.
type globals struct {
	err       error
	total     int
	stuck     []string
	kinds     map[string]bool
	conflicts []string
}

// readGlobals judges every base in the index of the namespaces the
// controller watches. A base whose objects differ from its verdict is
// judged again, twice, 2 s apart: a change may be on its way.
func readGlobals(ctx context.Context, cl *Cluster) globals {
	if cl.Controller == nil {
		return globals{err: errNoController}
	}
	ctx, stop := context.WithCancel(ctx) // the index's watches end with the check
	defer stop()
	idx, err := Index(ctx, cl, cl.Controller.Options.Namespaces)
	if err != nil {
		return globals{err: err}
	}
	var g globals
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return globals{err: ctx.Err()}
			case <-time.After(2 * time.Second):
			}
		}
		owned, err := ownedSlices(ctx, cl, cl.Controller.Options.Namespaces)
		if err != nil {
			return globals{err: err}
		}
		g = globals{kinds: map[string]bool{}}
		for _, k := range idx.Keys() {
			j := judge(idx, k, owned)
			if j.verdict == aggregate.VerdictBuild {
				g.total++
			}
			if j.verdict == aggregate.VerdictConflict {
				g.conflicts = append(g.conflicts, fmt.Sprintf("%s/%s (owned by a Service globalmirror did not create; mirrors of %s exist)", k.Namespace, j.name, k.Base))
			}
			if len(j.diffs) > 0 {
				var kinds []string
				for _, d := range j.diffs {
					g.kinds[d.Kind] = true
					kinds = append(kinds, d.String())
				}
				g.stuck = append(g.stuck, fmt.Sprintf("%s/%s: %s", k.Namespace, j.name, strings.Join(kinds, "; ")))
			}
		}
		if len(g.stuck) == 0 {
			break
		}
	}
	slices.Sort(g.stuck)
	slices.Sort(g.conflicts)
	return g
}

var errNoController = errors.New("no controller: its flags say what a global is")

func (g globals) syncResult() Result {
	const category, name = CategoryGlobals, "global services in sync"
	if g.err != nil {
		return globalsFailure(name, g.err)
	}
	if len(g.stuck) > 0 {
		return result(category, name, Error, fmt.Sprintf("%d out of sync for 4 s: %s", len(g.stuck), strings.Join(g.stuck, ". ")),
			fmt.Sprintf("the controller has not written their %s: is it running and leading? read its log (sync failed) and globalmirror_syncs_total{result=\"error\"}; globalmirror status NAMESPACE/NAME shows one",
				strings.Join(slices.Sorted(maps.Keys(g.kinds)), ", ")))
	}
	return result(category, name, OK, fmt.Sprintf("%d global services, each with what its members give (addresses, hostnames, readiness, ports), none left to remove", g.total), "")
}

func (g globals) conflictResult() Result {
	const category, name = CategoryGlobals, "global names free"
	if g.err != nil {
		return globalsFailure(name, g.err)
	}
	if len(g.conflicts) > 0 {
		return result(category, name, Error, "name conflicts: "+strings.Join(g.conflicts, ", "),
			"rename or delete the Service that owns the global name (globalmirror never touches a Service it did not create); until then the name answers from that Service, not from the mirrors")
	}
	return result(category, name, OK, "no Service of anyone else owns a global name", "")
}

func globalsFailure(name string, err error) Result {
	if errors.Is(err, errNoController) {
		return result(CategoryGlobals, name, Error, err.Error(), "see the controller running check")
	}
	return apiFailure(CategoryGlobals, name, "reading the mirrors and global services", err, "")
}

// judgement is one base's verdict, and how its objects differ from it.
type judgement struct {
	name    string
	verdict aggregate.Verdict
	diffs   []slicewriter.Difference
}

// judge compares one base's global (and its native-name slices) with what
// the controller writes for it: the verdict, the Service, the slices.
func judge(idx *source.Source, k source.Key, owned map[string][]*discoveryv1.EndpointSlice) judgement {
	in := idx.Input(k)
	name := aggregate.GlobalName(k.Base, in.Suffix)
	owner := idx.Service(k.Namespace, name)
	j := judgement{name: name, verdict: aggregate.GlobalVerdict(in, owner)}
	add := func(kind, format string, args ...any) {
		j.diffs = append(j.diffs, slicewriter.Difference{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	globalSlices := owned[k.Namespace+"/"+name]
	switch j.verdict {
	case aggregate.VerdictBuild:
		view := aggregate.Aggregate(in)
		if owner == nil {
			add("service", "no Service %s", name)
			break
		}
		if controller.ServiceDiffers(owner, view) {
			add(slicewriter.DiffPorts, "the Service's ports or labels are not its members'")
		}
		j.diffs = append(j.diffs, slicewriter.Differences(owner, view, globalSlices)...)
	case aggregate.VerdictRemove:
		add("removal", "no headless mirror of %s is left, yet the global Service remains", k.Base)
	case aggregate.VerdictNone:
		if len(globalSlices) > 0 {
			add("removal", "%d EndpointSlices of a removed global remain", len(globalSlices))
		}
	}
	nativeSlices := owned[k.Namespace+"/"+k.Base]
	if aggregate.Native(in) {
		for _, m := range in.Members {
			if m.Local() {
				for _, d := range slicewriter.Differences(m.Service, aggregate.Aggregate(in).Mirrored(), nativeSlices) {
					add(d.Kind, "native names: %s", d.Detail)
				}
			}
		}
	} else if len(nativeSlices) > 0 {
		add("native names", "%d native-name EndpointSlices of %s remain, though it no longer opts in", len(nativeSlices), k.Base)
	}
	return j
}

// ownedSlices lists, once, every EndpointSlice globalmirror wrote in the
// namespaces (empty: all), by namespace/service.
func ownedSlices(ctx context.Context, cl *Cluster, namespaces []string) (map[string][]*discoveryv1.EndpointSlice, error) {
	sel := discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy
	var all []discoveryv1.EndpointSlice
	for _, ns := range orAll(namespaces) {
		l, err := cl.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, err
		}
		all = append(all, l.Items...)
	}
	return byService(all), nil
}

// byService keeps the slices globalmirror wrote, by namespace/service.
func byService(items []discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	out := map[string][]*discoveryv1.EndpointSlice{}
	for i := range items {
		if s := &items[i]; slicewriter.Owns(s) {
			key := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
			out[key] = append(out[key], s)
		}
	}
	return out
}

// Index builds the index both halves build, of namespaces (empty: all),
// as the controller's flags say, with the UIDs the controller keeps (its
// slices' owner is its Service's UID). It follows the cluster until ctx is done,
// and fails when its first lists have not ended by then.
func Index(ctx context.Context, cl *Cluster, namespaces []string) (*source.Source, error) {
	o := cl.Controller.Options
	sel, err := aggregate.ParseLocalSelector(o.LocalSelector)
	if err != nil {
		return nil, err
	}
	src, err := source.New(source.Config{Client: cl.Client, API: cl.Config, Namespaces: namespaces, Suffix: o.Suffix, LocalSelector: sel})
	if err != nil {
		return nil, err
	}
	// The feeds retry a list or a watch the API server refuses, without
	// end (and a list streams as a watch where the server can): ask first,
	// so that a refusal is reported as one, naming the verb.
	if err := mayRead(ctx, cl, namespaces); err != nil {
		return nil, err
	}
	src.Start(ctx)
	if !src.WaitForSync(ctx) {
		return nil, fmt.Errorf("listing the mirrors did not end: %w", ctx.Err())
	}
	return src, nil
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

// zonesOutside are those of zones that are none of served.
func zonesOutside(zones, served []string) []string {
	var out []string
	for _, z := range zones {
		if !slices.Contains(served, z) {
			out = append(out, z)
		}
	}
	return out
}

func orAll(namespaces []string) []string {
	if len(namespaces) == 0 {
		return []string{metav1.NamespaceAll}
	}
	return namespaces
}
