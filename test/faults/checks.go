package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/run"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// waitReady waits until m's CoreDNS reports ready (its first sync done).
func waitReady(ctx context.Context, m *member) error {
	c := with(m, func() *run.CoreDNS { return m.dns })
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := run.WaitHTTP(ctx, "http://127.0.0.1:"+strconv.Itoa(c.Ports["READY_PORT"])+"/ready", c.Process); err != nil {
		return err
	}
	return run.WaitDNS(ctx, c.Addr, c.Process)
}

// idleCheck: once everything converged, the controllers write nothing for
// the idle period while nothing they read changes. A window in which an
// input changed (a late write of the mirror simulator or of
// kube-controller-manager, catching up after the last API restart) proves
// nothing either way: it is started again and reported. If no window of
// idleAttempts is still, the check could not judge, and says so.
func (r *runner) idleCheck(ctx context.Context) error {
	if err := r.converged(ctx, "end of the faults", time.Now()); err != nil {
		return err
	}
	if err := r.controllersSettle(ctx); err != nil {
		return err
	}
	// snapshot is the controllers' writes so far and their inputs now.
	snapshot := func() (float64, map[string]string, error) {
		n, err := r.writes()
		if err != nil {
			return 0, nil, err
		}
		in, err := r.inputs(ctx)
		return n, in, err
	}
	const idleAttempts = 6
	for attempt := 1; attempt <= idleAttempts; attempt++ {
		before, inputs, err := snapshot()
		if err != nil {
			return err
		}
		if err := sleep(ctx, r.cfg.Idle); err != nil {
			return err
		}
		after, now, err := snapshot()
		if err != nil {
			return err
		}
		if changed := changedInputs(inputs, now); len(changed) > 0 {
			r.res.IdleRestarts = append(r.res.IdleRestarts, fmt.Sprintf("window %d: %d writes, inputs changed: %s",
				attempt, int(after-before), strings.Join(changed, ", ")))
			continue
		}
		r.res.IdleWrites = after - before
		if r.res.IdleWrites != 0 {
			r.res.IdleDetail = r.writesDetail()
		}
		return nil
	}
	r.res.IdleUnjudged = fmt.Sprintf("the controllers' inputs changed in each of %d idle windows of %v", idleAttempts, r.cfg.Idle)
	return nil
}

// inputs are the resourceVersions of what the controllers read in every
// cluster, the namespace's Services, Endpoints and EndpointSlices that
// globalmirror did not write, by "cluster kind name".
func (r *runner) inputs(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := r.eachObject(ctx, Namespace, func(cluster, kind string, o metav1.Object) {
		if !aggregate.WrittenByGlobalmirror(o.GetLabels()) {
			out[cluster+" "+kind+" "+o.GetName()] = o.GetResourceVersion()
		}
	})
	return out, err
}

// eachObject calls f with every Service, Endpoints and EndpointSlice of
// namespace ns ("": all) in every cluster: what Linkerd, Kubernetes and
// globalmirror write for these names.
func (r *runner) eachObject(ctx context.Context, ns string, f func(cluster, kind string, o metav1.Object)) error {
	for _, m := range r.members {
		svcs, err := m.c.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range svcs.Items {
			f(m.name, "Service", &svcs.Items[i])
		}
		eps, err := m.c.Client.CoreV1().Endpoints(ns).List(ctx, metav1.ListOptions{}) //nolint:staticcheck // Linkerd writes v1 Endpoints
		if err != nil {
			return err
		}
		for i := range eps.Items {
			f(m.name, "Endpoints", &eps.Items[i])
		}
		sl, err := m.c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range sl.Items {
			f(m.name, "EndpointSlice", &sl.Items[i])
		}
	}
	return nil
}

// changedInputs lists what was added, changed or removed between two
// fingerprints.
func changedInputs(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if w, ok := before[k]; !ok {
			out = append(out, k+" added")
		} else if w != v {
			out = append(out, k+" changed")
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k+" removed")
		}
	}
	slices.Sort(out)
	return out
}

// controllersSettle waits until every cluster has a leader and no controller has
// written for 15 s: a leader that replaced a killed one late in the fault
// phase (once the Lease ran out) first writes what the last faults changed,
// and a write that failed while an API server was down is retried after the
// work queue's growing per-item delay (5 ms doubling). The answers alone do
// not show that: the plugin serves them first.
func (r *runner) controllersSettle(ctx context.Context) error {
	_, err := await.Settle(ctx, 15*time.Second, 90*time.Second, 250*time.Millisecond, func(context.Context) (float64, string, error) {
		n, err := r.writes()
		if err != nil || r.led() {
			return n, "", err
		}
		return n, "not every cluster led", nil
	})
	if err != nil {
		return fmt.Errorf("the controllers did not settle (no write for 15 s, every cluster led): %w", err)
	}
	return nil
}

// led reports whether every cluster has a leading controller.
func (r *runner) led() bool {
	for _, m := range r.members {
		if !slices.ContainsFunc(m.controllers(), leads) {
			return false
		}
	}
	return true
}

// leads reports whether controller c leads its cluster's replicas.
func leads(c *run.Controller) bool {
	n, err := run.MetricSum(c.BaseURL+"/metrics", "leader_election_master_status")
	return err == nil && n == 1
}

// writesDetail lists every controller's writes by resource and verb, and its
// log's last lines, to find what was written.
func (r *runner) writesDetail() []string {
	var out []string
	for _, m := range r.members {
		for _, c := range m.controllers() {
			s, _ := run.Scrape(c.BaseURL + "/metrics")
			for _, series := range slices.Sorted(maps.Keys(s)) {
				if strings.HasPrefix(series, "globalmirror_api_writes_total{") {
					out = append(out, fmt.Sprintf("%s %s: %s %v", m.name, c.LogPath, series, s[series]))
				}
			}
			out = append(out, m.name+" "+c.LogPath+" log tail: "+c.Log(1500))
		}
	}
	return out
}

// writes sums the API writes of every running controller.
func (r *runner) writes() (float64, error) {
	total := 0.0
	for _, m := range r.members {
		for _, c := range m.controllers() {
			n, err := run.MetricSum(c.BaseURL+"/metrics", "globalmirror_api_writes_total")
			if err != nil {
				return 0, fmt.Errorf("%s: %w", m.name, err)
			}
			total += n
		}
	}
	return total, nil
}

// foreignObjectsCheck: no Service, Endpoints or EndpointSlice that
// globalmirror did not create carries a write of the controller (its field
// manager, from its user agent).
func (r *runner) foreignObjectsCheck(ctx context.Context) error {
	return r.eachObject(ctx, metav1.NamespaceAll, func(_, kind string, o metav1.Object) {
		if aggregate.WrittenByGlobalmirror(o.GetLabels()) {
			return
		}
		for _, f := range o.GetManagedFields() {
			if strings.HasPrefix(f.Manager, "globalmirror-controller") {
				r.res.Foreign = append(r.res.Foreign, fmt.Sprintf("%s %s/%s (%s %s)", kind, o.GetNamespace(), o.GetName(), f.Manager, f.Operation))
			}
		}
	})
}
