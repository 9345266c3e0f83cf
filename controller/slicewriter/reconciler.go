// Package slicewriter writes the EndpointSlices of a global Service from its
// aggregated view with minimal churn: an unchanged view writes nothing, one
// changed endpoint rewrites one slice. It guards against its own stale cache
// with the EndpointSlice tracker Kubernetes' controllers use.
package slicewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/controller/metrics"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// ErrStale says the slice cache does not show the controller's own latest
// writes yet; retry once the feed caught up.
var ErrStale = errors.New("endpoint slice cache is older than this controller's own writes")

// Reconciler writes global EndpointSlices.
type Reconciler struct {
	client  kubernetes.Interface
	manager string // the field manager of every write
	tracker *endpointsliceutil.EndpointSliceTracker
	metrics *metrics.Metrics
	log     *slog.Logger
	limit   int
}

// NewReconciler returns a Reconciler that creates and updates slices as field
// manager fieldManager, puts at most maxPerSlice endpoints in a slice and
// logs each write at debug level to log (nil: nowhere). The tracker must be
// shared with the slice feed's handlers.
func NewReconciler(client kubernetes.Interface, fieldManager string, tracker *endpointsliceutil.EndpointSliceTracker, m *metrics.Metrics, maxPerSlice int, log *slog.Logger) *Reconciler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{client: client, manager: fieldManager, tracker: tracker, metrics: m, log: log, limit: maxPerSlice}
}

// Reconcile makes the slices of the global Service svc have exactly the view's
// endpoints, and returns how many endpoints they have. existing are the
// cached slices labelled with svc's name; those among them the writer does
// not own (Owns) are left alone.
func (r *Reconciler) Reconcile(ctx context.Context, svc *corev1.Service, view aggregate.View, existing []*discoveryv1.EndpointSlice) (endpoints int, err error) {
	existing = Owned(existing)
	if r.tracker.StaleSlices(svc, existing) {
		return 0, ErrStale
	}
	desired := desiredGroups(view.Endpoints)
	p := planner{meta: newSliceMeta(svc, view.Base, view.TriggerTime), limit: r.limit}.plan(desired, existing)
	for _, g := range desired {
		endpoints += len(g.order)
	}
	if p.empty() {
		// Track what we did not write, so later stale caches are noticed.
		for _, s := range existing {
			if !r.tracker.Has(s) {
				r.tracker.Update(s)
			}
		}
		return endpoints, nil
	}
	api := r.client.DiscoveryV1().EndpointSlices(svc.Namespace)
	// Creates and updates before deletes, so no endpoint is missing in between.
	if svc.DeletionTimestamp == nil {
		for _, s := range p.create {
			r.metrics.Write("endpointslices", "create")
			got, err := api.Create(ctx, s, metav1.CreateOptions{FieldManager: r.manager})
			if err != nil {
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					return endpoints, nil // nothing to do in a namespace going away
				}
				return endpoints, fmt.Errorf("create EndpointSlice for %s/%s: %w", svc.Namespace, svc.Name, err)
			}
			r.tracker.Update(got)
			r.log.Debug("created EndpointSlice", "slice", got.Namespace+"/"+got.Name, "service", svc.Name, "endpoints", len(got.Endpoints))
		}
	}
	for _, s := range p.update {
		r.metrics.Write("endpointslices", "update")
		got, err := api.Update(ctx, s, metav1.UpdateOptions{FieldManager: r.manager})
		if err != nil {
			return endpoints, fmt.Errorf("update EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
		}
		r.tracker.Update(got)
		r.log.Debug("updated EndpointSlice", "slice", got.Namespace+"/"+got.Name, "generation", got.Generation, "endpoints", len(got.Endpoints))
	}
	for _, s := range p.delete {
		if err := r.delete(ctx, s); err != nil {
			return endpoints, err
		}
	}
	return endpoints, nil
}

// DeleteAll deletes the slices among existing the writer owns, for a global
// Service that goes away. While the cache still shows slices it already
// deleted (or lacks ones it wrote), it deletes nothing and returns ErrStale,
// so that no deletion is sent twice.
func (r *Reconciler) DeleteAll(ctx context.Context, namespace, service string, existing []*discoveryv1.EndpointSlice) (int, error) {
	existing = Owned(existing)
	ref := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: service}}
	if r.tracker.StaleSlices(ref, existing) {
		return 0, ErrStale
	}
	if len(existing) == 0 {
		r.tracker.DeleteService(namespace, service) // every deletion seen: forget the service
		return 0, nil
	}
	n := 0
	for _, s := range existing {
		if err := r.delete(ctx, s); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (r *Reconciler) delete(ctx context.Context, s *discoveryv1.EndpointSlice) error {
	r.metrics.Write("endpointslices", "delete")
	// The UID precondition makes sure we delete the slice we looked at, not a
	// namesake created since.
	err := r.client.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
	}
	r.tracker.ExpectDeletion(s)
	r.log.Debug("deleted EndpointSlice", "slice", s.Namespace+"/"+s.Name)
	return nil
}

// Owned keeps the slices the writer owns (see Owns).
func Owned(in []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, s := range in {
		if Owns(s) {
			out = append(out, s)
		}
	}
	return out
}

// Owns reports whether s is a slice the writer may change or delete: both
// managed-by labels say globalmirror, the EndpointSlice controllers' label
// (which keeps Kubernetes' own controllers away) and the one on everything
// globalmirror writes (aggregate.WrittenByGlobalmirror).
func Owns(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == aggregate.EndpointSliceManagedBy && aggregate.WrittenByGlobalmirror(s.Labels)
}
