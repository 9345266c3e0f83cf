package cli

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// checkServed compares how many global services each half serves, by its
// own gauge, with how many the command judges should exist (g.total, every
// base whose verdict is to build): the plugin on every pod of the judged
// DNS (coredns_global_globals; the chart's forwarded DNS in forwarded
// mode) and the controller's leader (globalmirror_globals, the largest of
// its replicas': the others manage none). Either half may be a change
// behind for a moment, so a difference is read again, every 2 s, three
// times in all, before it is an error.
func checkServed(ctx context.Context, c check, cl *Cluster, g globals) Result {
	if g.err != nil {
		return c.globalsFailure(g.err)
	}
	d := cl.judged()
	if d == nil || len(d.metrics) == 0 {
		return c.skipped("cluster DNS image")
	}
	// Again, the pods the image check found running the plugin.
	withPlugin := slices.DeleteFunc(slices.Clone(d.Pods), func(p corev1.Pod) bool { return d.metrics[p.Name] == "" })
	read := func(ctx context.Context) (dns, ctrl map[string]string) {
		bodies, errs := podMetrics(ctx, cl, withPlugin, metricsPort)
		dns = map[string]string{}
		for i, p := range withPlugin {
			if errs[i] == nil {
				dns[p.Name] = string(bodies[i])
			}
		}
		return dns, controllerMetrics(ctx, cl)
	}
	dns, ctrl := d.metrics, controllerMetrics(ctx, cl)
	var differ []string
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return c.result(Error, "still different when the check's time ended: "+strings.Join(differ, "; "), servedHint)
			case <-time.After(2 * time.Second):
			}
			dns, ctrl = read(ctx)
		}
		differ = servedDifferences(g.total, dns, ctrl)
		if len(differ) == 0 {
			break
		}
	}
	if len(differ) > 0 {
		return c.result(Error, fmt.Sprintf("%d global services should exist, but for 4 s %s", g.total, strings.Join(differ, "; ")), servedHint)
	}
	detail := fmt.Sprintf("%d global services answered by each of %d DNS pods", g.total, len(dns))
	if len(ctrl) == 0 {
		return c.result(Warning, detail+"; the controller's metrics could not be read, so whether it writes them is unknown",
			"see that the controller's pods run (controller running), and let your user get pods/proxy in the controller's namespace, through which check reads its metrics")
	}
	return c.result(OK, detail+" and written by the controller", "")
}

const servedHint = "a half that serves fewer is behind or stuck: the plugin's feeds (the pod's log, coredns_global_problems_total) or the controller (global services in sync, its log); one that serves more keeps what is gone. globalmirror status NAMESPACE/NAME shows one global"

// servedDifferences says which pod's gauge is not want: every DNS pod's
// coredns_global_globals, and the largest globalmirror_globals of the
// controller's pods. A pod whose metrics lack the gauge is a difference
// too; a controller with no pod read is not judged.
func servedDifferences(want int, dns, ctrl map[string]string) []string {
	var out []string
	for _, pod := range slices.Sorted(maps.Keys(dns)) {
		if n, ok := gaugeValue(dns[pod], "coredns_global_globals"); !ok {
			out = append(out, pod+" exports no coredns_global_globals")
		} else if n != want {
			out = append(out, fmt.Sprintf("DNS pod %s answers for %d", pod, n))
		}
	}
	if len(ctrl) == 0 {
		return out
	}
	most, read := 0, false
	for _, body := range ctrl {
		if n, ok := gaugeValue(body, "globalmirror_globals"); ok {
			most, read = max(most, n), true
		}
	}
	if !read {
		out = append(out, "no controller pod exports globalmirror_globals")
	} else if most != want {
		out = append(out, fmt.Sprintf("the controller writes %d", most))
	}
	return out
}

// gaugeValue is the value of the unlabelled gauge name in a Prometheus
// text exposition, as a whole number.
func gaugeValue(body, name string) (int, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	return int(v), true
}
