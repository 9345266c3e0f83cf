//lint:file-ignore SA1019 Linkerd's service mirror reads and writes v1 Endpoints, so the simulator does.

package mirrorsim

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// reconcile makes the source's mirrors of one remote Service match the target
// and returns how many objects it wrote. Its reads come from caches; a stale
// cache shows up as a conflict or an AlreadyExists, and the key is retried.
// ev says which remote events it answers: as with Linkerd, a remote
// Endpoints event rewrites the headless mirror's Endpoints from the remote
// pods, and an update of the exported Service rewrites them to the gateway.
func (s *Simulator) reconcile(ctx context.Context, l *link, k key, ev remoteEvents) (int, error) {
	remote, err := l.services.Services(k.Namespace).Get(k.Name)
	if apierrors.IsNotFound(err) {
		remote = nil
	} else if err != nil {
		return 0, err
	}
	remoteEps, err := l.endpoints.Endpoints(k.Namespace).Get(k.Name)
	if apierrors.IsNotFound(err) {
		remoteEps = nil
	} else if err != nil {
		return 0, err
	}
	mirrorSvcName := mirrorName(k.Name, k.Cluster)
	existing, err := s.cachedService(k.Namespace, mirrorSvcName, k.Cluster)
	if err != nil {
		return 0, err
	}
	endpointMirrors, err := s.mirrorServices.Services(k.Namespace).List(labels.SelectorFromSet(labels.Set{
		LabelClusterName: k.Cluster, LabelHeadlessMirrorSvcName: mirrorSvcName,
	}))
	if err != nil {
		return 0, err
	}
	gw := Gateway{IP: s.opts.GatewayIP, Port: s.opts.GatewayPort, Alive: l.gatewayAlive.Load()}

	w := &writer{s: s, ctx: ctx}
	mode := mirrorMode(remote, remoteEps, existing)
	if existing != nil && mode != modeNone && isHeadless(existing) != (mode == modeHeadless) {
		// A Service's ClusterIP cannot change: the remote Service was
		// re-created with another type, so is its mirror.
		w.deleteService(k.Namespace, mirrorSvcName)
		existing = nil
	}
	m := mirror{cluster: k.Cluster, domain: s.opts.ClusterDomain, remote: remote, link: s.linkSpec()}
	// Linkerd updates a mirror Service only when the exported Service's
	// version differs from the one it last mirrored (cluster_watcher.go:
	// createOrUpdateService), and then rewrites its Endpoints to the
	// gateway (handleRemoteExportedServiceUpdated).
	serviceUpdated := existing != nil && remote != nil && existing.Annotations[AnnotationRemoteResourceVersion] != remote.ResourceVersion
	keep := map[string]bool{} // endpoint mirrors to keep

	switch mode {
	case modeNone:
		w.deleteService(k.Namespace, mirrorSvcName)
		w.deleteEndpoints(k.Namespace, mirrorSvcName)

	case modeClusterIP:
		if svc := w.applyService(m.service(false), existing); svc != nil {
			w.applyEndpoints(m.gatewayEndpoints(svc, gw))
		}

	case modeHeadless:
		svc := w.applyService(m.service(true), existing)
		if svc == nil {
			break
		}
		clusterIPs := map[string]string{}
		for _, host := range readyHostnames(remoteEps) {
			name := m.endpointMirrorName(host)
			keep[name] = true
			current, err := s.cachedService(k.Namespace, name, k.Cluster)
			if err != nil {
				w.fail(err)
				continue
			}
			if ep := w.applyService(m.endpointMirrorService(host, remoteEps.ResourceVersion), current); ep != nil {
				clusterIPs[host] = ep.Spec.ClusterIP
				w.applyEndpoints(m.gatewayEndpoints(ep, gw))
			}
		}
		if desired := s.headlessEndpoints(m, svc, remoteEps, clusterIPs, ev, serviceUpdated, gw); desired != nil {
			// Hostnames leave the headless mirror before their endpoint mirrors go.
			w.applyEndpoints(desired)
		}
	}

	if len(w.errs) > 0 {
		// Delete endpoint mirrors only once the headless mirror is written
		// without them; the retry will.
		return w.writes, errors.Join(w.errs...)
	}
	for _, em := range endpointMirrors {
		if !keep[em.Name] {
			w.deleteService(em.Namespace, em.Name)
			w.deleteEndpoints(em.Namespace, em.Name)
		}
	}
	return w.writes, errors.Join(w.errs...)
}

// headlessEndpoints are the Endpoints Linkerd writes for the headless
// mirror svc in answer to ev, or nil where it writes none:
//   - on their creation, the remote pods, ready
//     (cluster_watcher_headless.go: createHeadlessMirrorEndpoints);
//   - on an update of the exported Service, unless a remote Endpoints event
//     came after it, the gateway, with no hostname, on the gateway port
//     (cluster_watcher.go: handleRemoteExportedServiceUpdated);
//   - on a remote Endpoints event, the remote pods, ready as the gateway is
//     alive (cluster_watcher_headless.go: createOrUpdateHeadlessEndpoints,
//     cluster_watcher.go: updateReadiness);
//   - otherwise nothing new: the repair on a liveness change skips
//     headless mirrors (cluster_watcher.go: repairEndpoints), so a gateway
//     written there stays until the next remote Endpoints event, and pods
//     keep the readiness they were written with.
func (s *Simulator) headlessEndpoints(m mirror, svc *corev1.Service, remoteEps *corev1.Endpoints, clusterIPs map[string]string, ev remoteEvents, serviceUpdated bool, gw Gateway) *corev1.Endpoints {
	current, err := s.mirrorEndpoints.Endpoints(svc.Namespace).Get(svc.Name)
	switch {
	case err != nil: // not there yet: created ready
		return m.headlessEndpoints(svc, remoteEps, clusterIPs, true)
	case serviceUpdated && !(ev.endpoints && !ev.serviceLast):
		return m.gatewayEndpoints(svc, gw)
	case ev.endpoints:
		return m.headlessEndpoints(svc, remoteEps, clusterIPs, gw.Alive)
	case gatewayShaped(current):
		return nil
	default:
		return m.headlessEndpoints(svc, remoteEps, clusterIPs, !allNotReady(current))
	}
}

// cachedService returns the source's mirror Service `name` of cluster, nil if
// there is none. A Service of that name that is not cluster's mirror is an
// error: the simulator never touches what it does not own.
func (s *Simulator) cachedService(ns, name, cluster string) (*corev1.Service, error) {
	svc, err := s.mirrorServices.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if svc.Labels[LabelClusterName] != cluster {
		return nil, fmt.Errorf("service %s/%s belongs to cluster %q, not %q", ns, name, svc.Labels[LabelClusterName], cluster)
	}
	return svc, nil
}

// writer applies desired objects, collecting errors so that one failing
// object does not hold back the others, and counting writes.
type writer struct {
	s      *Simulator
	ctx    context.Context
	writes int
	errs   []error
}

func (w *writer) fail(err error) { w.errs = append(w.errs, err) }

// applyService creates desired, or updates current to it, and returns the
// Service as stored (with its ClusterIP), or nil after an error. Linkerd
// replaces a headless or ClusterIP mirror's labels, annotations and ports
// when the exported Service's version changed, and never updates an
// endpoint mirror.
func (w *writer) applyService(desired, current *corev1.Service) *corev1.Service {
	if current == nil {
		if err := w.ensureNamespace(desired.Namespace); err != nil {
			w.fail(err)
			return nil
		}
	}
	return apply(w, w.s.source.CoreV1().Services(desired.Namespace), "service", desired, current, serviceUpToDate,
		func(update, desired *corev1.Service) {
			update.Labels, update.Annotations, update.Spec.Ports = desired.Labels, desired.Annotations, desired.Spec.Ports
		})
}

// applyEndpoints creates desired, or updates the cached Endpoints' subsets
// and gateway identity to it; Linkerd never changes their labels once made.
func (w *writer) applyEndpoints(desired *corev1.Endpoints) {
	current, err := w.s.mirrorEndpoints.Endpoints(desired.Namespace).Get(desired.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		w.fail(err)
		return
	}
	apply(w, w.s.source.CoreV1().Endpoints(desired.Namespace), "endpoints", desired, current, endpointsUpToDate,
		func(update, desired *corev1.Endpoints) {
			update.Subsets = desired.Subsets
			if id, ok := desired.Annotations[AnnotationRemoteGatewayIdentity]; ok {
				update.Annotations = mergeAnnotations(update.Annotations, map[string]string{AnnotationRemoteGatewayIdentity: id})
			}
		})
}

// object is a Service or Endpoints pointer; client is its API in one namespace.
type object[T any] interface {
	*corev1.Service | *corev1.Endpoints
	metav1.Object
	DeepCopy() T
}

type client[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
}

// apply creates desired if current (from the cache) is nil, else updates
// current to desired as setContent writes it, and
// returns the object as stored, or nil after an error. If the cache is behind
// our own last write, the object is read live, so that a ready pod never
// drops out of the headless mirror meanwhile.
func apply[T object[T]](w *writer, c client[T], kind string, desired, current T,
	upToDate func(current, desired T) bool, setContent func(update, desired T)) T {
	if current == nil {
		created, err := c.Create(w.ctx, desired, metav1.CreateOptions{FieldManager: FieldManager})
		if err == nil {
			w.writes++
			return created
		}
		if !apierrors.IsAlreadyExists(err) {
			w.fail(fmt.Errorf("create %s %s/%s: %w", kind, desired.GetNamespace(), desired.GetName(), err))
			return nil
		}
		if current, err = c.Get(w.ctx, desired.GetName(), metav1.GetOptions{}); err == nil {
			err = owned(current, desired)
		}
		if err != nil {
			w.fail(err)
			return nil
		}
	}
	if upToDate(current, desired) {
		return current
	}
	update := current.DeepCopy()
	setContent(update, desired)
	updated, err := c.Update(w.ctx, update, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		w.fail(fmt.Errorf("update %s %s/%s: %w", kind, desired.GetNamespace(), desired.GetName(), err))
		return nil
	}
	w.writes++
	return updated
}

// owned fails for an object that is not this cluster's mirror: the simulator
// never touches what it did not write.
func owned(current, desired metav1.Object) error {
	if c, d := current.GetLabels()[LabelClusterName], desired.GetLabels()[LabelClusterName]; c != d {
		return fmt.Errorf("%s/%s exists and is not a mirror of cluster %q", current.GetNamespace(), current.GetName(), d)
	}
	return nil
}

// deleteService deletes a mirror Service if the cache has it.
func (w *writer) deleteService(ns, name string) {
	_, cached := w.s.mirrorServices.Services(ns).Get(name)
	w.deleteCached(cached, w.s.source.CoreV1().Services(ns), "service", ns, name)
}

// deleteEndpoints deletes mirror Endpoints if the cache has them.
func (w *writer) deleteEndpoints(ns, name string) {
	_, cached := w.s.mirrorEndpoints.Endpoints(ns).Get(name)
	w.deleteCached(cached, w.s.source.CoreV1().Endpoints(ns), "endpoints", ns, name)
}

// deleteCached deletes, and counts the write, unless the cache's get found nothing.
func (w *writer) deleteCached(get error, c deleter, kind, ns, name string) {
	if apierrors.IsNotFound(get) {
		return
	}
	if err := deleteObject(w.ctx, c, kind, ns, name); err != nil {
		w.fail(err)
		return
	}
	w.writes++
}

func (w *writer) ensureNamespace(ns string) error {
	if _, err := w.s.source.CoreV1().Namespaces().Get(w.ctx, ns, metav1.GetOptions{}); err == nil {
		return nil
	}
	_, err := w.s.source.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// deleter is the Services or Endpoints client of one namespace.
type deleter interface {
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// deleteObject deletes kind ns/name; one already gone is no error.
func deleteObject(ctx context.Context, c deleter, kind, ns, name string) error {
	if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s %s/%s: %w", kind, ns, name, err)
	}
	return nil
}

// serviceUpToDate: a headless or ClusterIP mirror is as Linkerd last wrote
// it while it names the exported Service's version; an endpoint mirror
// always is.
func serviceUpToDate(current, desired *corev1.Service) bool {
	if _, endpointMirror := desired.Labels[LabelHeadlessMirrorSvcName]; endpointMirror {
		return true
	}
	return current.Annotations[AnnotationRemoteResourceVersion] == desired.Annotations[AnnotationRemoteResourceVersion]
}

func endpointsUpToDate(current, desired *corev1.Endpoints) bool {
	if id, ok := desired.Annotations[AnnotationRemoteGatewayIdentity]; ok && current.Annotations[AnnotationRemoteGatewayIdentity] != id {
		return false
	}
	return equality.Semantic.DeepEqual(current.Subsets, desired.Subsets)
}

func mergeAnnotations(current, desired map[string]string) map[string]string {
	out := map[string]string{}
	maps.Copy(out, current)
	maps.Copy(out, desired)
	return out
}
