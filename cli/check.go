package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/build"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Check runs every check on cl, in order, handing each result to add as it
// ends.
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
	for _, c := range checks {
		cctx, cancel := budget()
		add(c.run(cctx, c, cl, g))
		cancel()
	}
}

// check is one of globalmirror check's checks: what it is about, its name
// (its row in README.md's table of checks, which says what it proves) and
// how it judges a cluster. Those about the global services judge what
// readGlobals found once for all of them.
type check struct {
	category Category
	id, name string // id is stable (Result.ID); name is prose
	run      func(ctx context.Context, c check, cl *Cluster, g globals) Result
}

// checks are every check, in the order they run and are written; a check
// that needs what an earlier one did not find is Skipped, naming that one.
// Those of the DNS that runs the global plugin (judgingDNS) judge the
// chart's forwarded CoreDNS in forwarded mode (forwarding.go), and say so.
var checks = []check{
	{CategoryKubernetes, "kubernetes-api", "Kubernetes API", checkVersion},
	{CategoryController, "controller-running", "controller running", checkController},
	{CategoryController, "controller-leader", "controller leader", checkLeader},
	{CategoryController, "rbac-of-the-controller", "RBAC of the controller", checkControllerRBAC},
	{CategoryDNS, "cluster-dns-image", "cluster DNS image", judgingDNS(checkDNSImage)},
	{CategoryDNS, "global-stanza", "global stanza", judgingDNS(checkStanza)},
	{CategoryDNS, "plugin-and-controller-agree", "plugin and controller agree", judgingDNS(checkAgreement)},
	{CategoryDNS, "rbac-of-the-cluster-dns", "RBAC of the cluster DNS", judgingDNS(checkDNSRBAC)},
	{CategoryDNS, "dns-forwarding", "zone forwarded", checkForwarding},
	{CategoryLinkerd, "linkerd-headless-mirrors", "Linkerd's headless mirrors", checkMirrors},
	{CategoryLinkerd, "drained-clusters", "drained clusters", checkDrains},
	{CategoryGlobals, "global-services-in-sync", "global services in sync", checkSync},
	{CategoryGlobals, "both-halves-serve-them", "both halves serve them", judgingDNS(checkServed)},
	{CategoryGlobals, "dns-answers", "DNS answers", checkProbe},
	{CategoryGlobals, "global-names-free", "global names free", checkConflicts},
}

// result is c's result at level; an OK one has no hint.
func (c check) result(level Level, detail, hint string) Result {
	r := result(c.category, c.name, level, detail, hint)
	r.ID = c.id
	return r
}

// skipped is c's result where the checks it needs (by name) did not pass:
// it could not be judged, and says so rather than fail again.
func (c check) skipped(needs ...string) Result {
	return c.result(Skipped, "not judged: it needs what the "+strings.Join(needs, " and ")+" check"+map[bool]string{true: "s", false: ""}[len(needs) > 1]+" did not find", "")
}

// unread is c's Warning where what it needs could not be read: not a
// finding, and the run could not check everything.
func (c check) unread(what, hint string) Result {
	r := c.result(Warning, "could not read "+what, hint)
	r.unread = true
	return r
}

// apiFailure is c's Warning where an API request stopped it (apiFailure).
func (c check) apiFailure(what string, err error, hint string) Result {
	r := apiFailure(c.category, c.name, what, err, hint)
	r.ID = c.id
	return r
}

// RunCheck connects and checks, and returns by ctx's deadline plus grace
// whatever happens: a kubeconfig's credential plugin that never returns, or
// a request that ignores its context, cannot hold it (client-go runs exec
// plugins and transports without a deadline of their own). Its report has
// every check, in order: those that did not run (the API server did not
// answer, the deadline came, a panic) are Skipped, and the report's Error
// says why.
func RunCheck(ctx context.Context, grace time.Duration, connect func(context.Context) (*Cluster, error)) Report {
	var mu sync.Mutex
	done := map[string]Result{}
	connected := false
	var unreachable error
	add := func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		done[r.ID] = r
	}
	ended, panicked := Bounded(ctx, grace, func() {
		cl, err := connect(ctx)
		mu.Lock()
		connected, unreachable = err == nil, err
		mu.Unlock()
		if err == nil {
			Check(ctx, cl, add)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	why := ""
	switch {
	case panicked != nil:
		why = fmt.Sprintf("internal error: %v (a bug of globalmirror check: please report it with this output)", panicked)
	case ended && timedOut(unreachable):
		why = "the API server: no answer before the timeout: " + errMessage(unreachable) + "; raise --timeout, or see why the API server is slow"
	case ended && unreachable != nil:
		why = "the API server did not answer: " + errMessage(unreachable) + "; is the kubeconfig's server reachable from here (--kubeconfig, --context)? a slow one needs a longer --timeout"
	case !ended && !connected:
		why = "the API server: no answer before the timeout: neither the server nor the kubeconfig's credential plugin (users[].user.exec) answered; " +
			"run any kubectl command with the same kubeconfig: a credential plugin waiting for a login or a device code hangs it too; else raise --timeout"
	case !ended:
		why = fmt.Sprintf("no answer before the timeout: the checks after the %d that ended were not run; raise --timeout, or see why the API server (or a CoreDNS pod it proxies to) is slow", len(done))
	}
	rs := make([]Result, 0, len(checks))
	for _, c := range checks {
		r, ok := done[c.id]
		if !ok {
			r = c.result(Skipped, "not run: "+why, "")
		}
		rs = append(rs, r)
	}
	return NewReport(rs, why)
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

// apiFailure is the Warning of a check an API request stopped: it could not
// read its evidence, so it says so, and why (refused to the user who runs
// check, unanswered in time, or else), rather than judge; the run then
// could not check everything (ExitCouldNotCheck).
func apiFailure(category Category, check, what string, err error, hint string) Result {
	var r Result
	switch {
	case apierrors.IsForbidden(err):
		r = result(category, check, Warning, "could not read: "+what+": forbidden: "+errMessage(err),
			"globalmirror check reads as you: let your user get, list and watch what it reads (a read-only ClusterRole such as view, plus pods/proxy and subjectaccessreviews)")
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		r = result(category, check, Warning, "could not read: "+what+": no answer before the timeout: "+err.Error(), "raise --timeout, or see why the API server is slow")
	default:
		if hint == "" {
			hint = "the API server's answer above says what it refused; kubectl get --raw '/readyz?verbose' says whether it is healthy"
		}
		r = result(category, check, Warning, "could not read: "+what+": "+errMessage(err), hint)
	}
	r.unread = true
	return r
}

// errMessage is an API error's message, or any other error's text.
func errMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
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

// timedOut reports whether err is a request that ran out of time.
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}
