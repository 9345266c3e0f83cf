package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/source"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// errNameTaken: a Service globalmirror did not create appeared under the global
// name between the index's read and the write.
var errNameTaken = errors.New("global name taken by a Service globalmirror did not create")

// errBeingDeleted: the managed global is being deleted; it is recreated once gone.
var errBeingDeleted = errors.New("global Service is being deleted")

// desiredService is the global Service of view. Only these fields are ours;
// whatever the API server defaults (ipFamilyPolicy, ipFamilies,
// sessionAffinity...) is neither set nor compared.
func desiredService(view aggregate.View) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: view.Namespace,
			Name:      view.Name,
			Labels:    map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: view.Base},
		},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
			Ports:     slices.Clone(view.Ports),
		},
	}
}

// serviceDiffers reports whether cur lacks something of want: our labels, no
// selector, the same ports. Labels others added are left alone.
func serviceDiffers(cur, want *corev1.Service) bool {
	for k, v := range want.Labels {
		if cur.Labels[k] != v {
			return true
		}
	}
	return len(cur.Spec.Selector) > 0 ||
		!slices.EqualFunc(cur.Spec.Ports, want.Spec.Ports, func(a, b corev1.ServicePort) bool { return normalPort(a) == normalPort(b) })
}

// normalPort is p as the API server stores it, minus what it allocates.
func normalPort(p corev1.ServicePort) corev1.ServicePort {
	p.Protocol = cmp.Or(p.Protocol, corev1.ProtocolTCP)
	if p.TargetPort == (intstr.IntOrString{}) {
		p.TargetPort = intstr.FromInt32(p.Port)
	}
	p.NodePort = 0
	return p
}

// ensureService creates or repairs the global Service and returns it as stored.
// indexed is the index's (stripped) copy, nil when the index has none.
func (c *Controller) ensureService(ctx context.Context, view aggregate.View, indexed *corev1.Service) (*corev1.Service, error) {
	want := desiredService(view)
	api := c.client.CoreV1().Services(view.Namespace)
	cur := indexed
	if cur == nil {
		// The index may not show our own create yet: ask before creating.
		got, err := api.Get(ctx, view.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			c.metrics.Write("services", "create")
			created, err := api.Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
			if err != nil { // AlreadyExists included: the retry looks again
				return nil, fmt.Errorf("create Service %s/%s: %w", view.Namespace, view.Name, err)
			}
			c.log.Info("created global Service", "service", view.Namespace+"/"+view.Name, "base", view.Base)
			return created, nil
		case err != nil:
			return nil, err
		}
		if !aggregate.WrittenByGlobalmirror(got.Labels) {
			return nil, errNameTaken
		}
		cur = got
	}
	if cur.DeletionTimestamp != nil {
		return nil, errBeingDeleted
	}
	if !serviceDiffers(cur, want) {
		return cur, nil
	}
	// The index has a stripped copy: update the full, current object, and
	// only if it is still ours.
	fresh, err := api.Get(ctx, view.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if !aggregate.WrittenByGlobalmirror(fresh.Labels) || fresh.UID != cur.UID {
		return nil, fmt.Errorf("global Service %s/%s changed owner or identity; retrying", view.Namespace, view.Name)
	}
	if !serviceDiffers(fresh, want) {
		return fresh, nil
	}
	for k, v := range want.Labels {
		metav1.SetMetaDataLabel(&fresh.ObjectMeta, k, v)
	}
	fresh.Spec.Selector = nil
	fresh.Spec.Ports = want.Spec.Ports
	c.metrics.Write("services", "update")
	updated, err := api.Update(ctx, fresh, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("update Service %s/%s: %w", view.Namespace, view.Name, err)
	}
	c.log.Info("updated global Service", "service", view.Namespace+"/"+view.Name)
	return updated, nil
}

// deleteService deletes the global Service if globalmirror created it, and
// only the very object the index showed (UID precondition). A Service it
// deleted already, which a lagging index still shows, is not deleted again.
func (c *Controller) deleteService(ctx context.Context, key source.Key, indexed *corev1.Service) error {
	if indexed == nil || !aggregate.WrittenByGlobalmirror(indexed.Labels) || indexed.DeletionTimestamp != nil {
		return nil
	}
	if c.deletedService(key) == indexed.UID {
		return nil
	}
	c.metrics.Write("services", "delete")
	err := c.client.CoreV1().Services(indexed.Namespace).Delete(ctx, indexed.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &indexed.UID}})
	switch {
	case apierrors.IsNotFound(err):
		c.log.Info("global Service already gone", "service", indexed.Namespace+"/"+indexed.Name)
	case err != nil:
		return fmt.Errorf("delete Service %s/%s: %w", indexed.Namespace, indexed.Name, err)
	default:
		c.log.Info("deleted global Service: no headless mirror left", "service", indexed.Namespace+"/"+indexed.Name)
	}
	c.setDeletedService(key, indexed.UID)
	return nil
}

// deletedService is the UID of the global Service of key this controller
// deleted and the index may still show; empty when there is none.
func (c *Controller) deletedService(key source.Key) types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleted[key]
}

func (c *Controller) setDeletedService(key source.Key, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if uid == "" {
		delete(c.deleted, key)
	} else {
		c.deleted[key] = uid
	}
}
