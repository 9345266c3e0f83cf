package controller

import (
	"context"
	"errors"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/metrics"
	"github.com/globalmirror/globalmirror/controller/slicewriter"
	"github.com/globalmirror/globalmirror/source"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// sync makes the objects of one base match its plan: its global Service
// and slices, and the native-name slices of its local service. It returns
// the result label for the syncs metric.
func (c *Controller) sync(ctx context.Context, key source.Key) (string, error) {
	p := PlanOf(c.src, key)
	result, err := c.syncGlobal(ctx, p)
	if nerr := c.syncNative(ctx, p); nerr != nil && err == nil {
		return c.result(nerr)
	}
	return result, err
}

// syncNative keeps the extra EndpointSlices of a local service that opted
// into native names: its global's mirror endpoints, as slices of the local
// service (owned by it, managed by globalmirror), next to the slices
// Kubernetes writes for its own pods, which are never touched.
func (c *Controller) syncNative(ctx context.Context, p Plan) error {
	existing := c.owned.forService(p.Key.Namespace, p.Key.Base)
	if p.Local == nil {
		if len(slicewriter.Owned(existing)) == 0 {
			return nil
		}
		_, err := c.writer.DeleteAll(ctx, p.Key.Namespace, p.Key.Base, existing)
		return err
	}
	_, err := c.writer.Reconcile(ctx, p.Local, p.Native, existing)
	return err
}

// syncGlobal makes the global Service and slices of one base match its plan.
func (c *Controller) syncGlobal(ctx context.Context, p Plan) (string, error) {
	key, name, indexed := p.Key, p.Name, p.Owner
	if deleted := c.deletedService(key); deleted != "" && (indexed == nil || indexed.UID != deleted) {
		c.setDeletedService(key, "") // the index has seen the deletion
	}

	switch p.Verdict {
	case aggregate.VerdictYield, aggregate.VerdictConflict:
		// Someone else's Service owns the name: leave the base alone entirely.
		// The slices of an earlier global of ours are owned by a Service that is
		// gone; the garbage collector removes them.
		c.setManaged(key, 0, false)
		c.report.forget(key)
		if p.Verdict == aggregate.VerdictConflict {
			c.report.conflict(key, indexed)
			return metrics.ResultConflict, nil
		}
		c.report.noConflict(key)
		return metrics.ResultSuccess, nil
	}
	c.report.noConflict(key)
	if p.Verdict != aggregate.VerdictBuild {
		// VerdictRemove, or VerdictNone with slices of ours possibly left.
		if err := c.deleteGlobal(ctx, key, name, indexed); err != nil {
			return c.result(err)
		}
		// Mirrors without a global: the name is invalid (a base too long for
		// the suffix). Say so once; otherwise this clears what was reported.
		c.report.problems(key, nil, p.Problems())
		return metrics.ResultSuccess, nil
	}
	svc, err := c.ensureService(ctx, p.View, indexed)
	if errors.Is(err, errNameTaken) {
		return metrics.ResultConflict, nil // the feed will tell us who took it
	}
	if err != nil {
		return c.result(err)
	}
	c.report.problems(key, svc, p.Problems())
	endpoints, err := c.writer.Reconcile(ctx, svc, p.View, c.owned.forService(key.Namespace, name))
	if err == nil {
		c.setManaged(key, endpoints, true)
	}
	return c.result(err)
}

// deleteGlobal removes the global of a base that has no headless mirror left.
func (c *Controller) deleteGlobal(ctx context.Context, key source.Key, name string, indexed *corev1.Service) error {
	if _, err := c.writer.DeleteAll(ctx, key.Namespace, name, c.owned.forService(key.Namespace, name)); err != nil {
		return err
	}
	if err := c.deleteService(ctx, key, indexed); err != nil {
		return err
	}
	c.setManaged(key, 0, false)
	return nil
}

func (c *Controller) result(err error) (string, error) {
	switch {
	case err == nil:
		return metrics.ResultSuccess, nil
	case errors.Is(err, slicewriter.ErrStale):
		return metrics.ResultStale, err
	default:
		return metrics.ResultError, err
	}
}

// setManaged records how many endpoints the global of key has (exists=false:
// none, it is gone) and refreshes the gauges.
func (c *Controller) setManaged(key source.Key, endpoints int, exists bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.managedEndpoints -= c.managed[key]
	delete(c.managed, key)
	if exists {
		c.managed[key] = endpoints
		c.managedEndpoints += endpoints
	}
	c.metrics.Globals.Set(float64(len(c.managed)))
	c.metrics.Endpoints.Set(float64(c.managedEndpoints))
}

// forgetManaged zeroes the gauges as a term of leadership ends, its
// workers stopped: a standby manages nothing, and a replica that led
// before must not go on reporting what it wrote then (check reads the
// largest of the replicas' gauges as the leader's).
func (c *Controller) forgetManaged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.managed)
	c.managedEndpoints = 0
	c.metrics.Globals.Set(0)
	c.metrics.Endpoints.Set(0)
}

// onOwnedSlice queues the base of a global slice that changed in a way this
// controller did not cause (a user's edit or deletion, or a write it lost
// track of); echoes of its own writes are filtered by the tracker, except for
// a base whose last sync failed: an echo may be what it was waiting for (a
// cache that caught up with this controller's writes, ErrStale), and its
// rate-limited retry, after failures through an API outage, can be tens of
// seconds away, with a change of its members still unwritten.
func (c *Controller) onOwnedSlice(s *discoveryv1.EndpointSlice, deleted bool) {
	key, ok := baseOf(s, c.suffix)
	if !ok {
		return
	}
	q := c.currentQueue()
	failed := q.NumRequeues(key) > 0
	if deleted {
		expected := c.tracker.Has(s) && c.tracker.HandleDeletion(s)
		if !expected || failed {
			q.Add(key)
		}
		return
	}
	if c.tracker.ShouldSync(s) || failed {
		q.Add(key)
	}
}
