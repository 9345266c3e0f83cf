package controller

import (
	"context"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/source"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const indexService = "globalmirror/global-service"

// OwnedSlices caches the EndpointSlices the controller writes, selected by
// their endpointslice managed-by label, so the reconciler can diff against
// them and so edits or deletions by anyone else get repaired.
type OwnedSlices struct {
	factories []informers.SharedInformerFactory
	informers []cache.SharedIndexInformer
}

// sliceEvent is told about a slice that was added or updated (deleted=false)
// or deleted.
type sliceEvent func(s *discoveryv1.EndpointSlice, deleted bool)

// NewOwnedSlices builds the informers of the global EndpointSlices in
// namespaces (empty: all); New adds its handlers, Controller.Start runs them.
func NewOwnedSlices(client kubernetes.Interface, namespaces []string) (*OwnedSlices, error) {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: aggregate.EndpointSliceManagedBy}).String()
	o := &OwnedSlices{}
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithNamespace(ns), informers.WithTransform(stripOwnedSlice))
		inf := f.InformerFor(&discoveryv1.EndpointSlice{}, source.SliceInformer(ns, sel))
		if err := inf.AddIndexers(cache.Indexers{indexService: byServiceName}); err != nil {
			return nil, err
		}
		o.factories = append(o.factories, f)
		o.informers = append(o.informers, inf)
	}
	return o, nil
}

// addHandler tells onEvent about every change of a global slice.
func (o *OwnedSlices) addHandler(onEvent sliceEvent) error {
	for _, inf := range o.informers {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
					onEvent(s, false)
				}
			},
			UpdateFunc: func(oldObj, newObj any) {
				old, ok1 := oldObj.(*discoveryv1.EndpointSlice)
				cur, ok2 := newObj.(*discoveryv1.EndpointSlice)
				if ok1 && ok2 && old.ResourceVersion != cur.ResourceVersion {
					onEvent(cur, false)
				}
			},
			DeleteFunc: func(obj any) {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
					onEvent(s, true)
				}
			},
		}); err != nil {
			return err
		}
	}
	return nil
}

func (o *OwnedSlices) start(ctx context.Context) {
	for _, f := range o.factories {
		f.Start(ctx.Done())
	}
}

func (o *OwnedSlices) hasSynced() bool {
	for _, inf := range o.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// forService lists the cached slices labelled with the given service name.
func (o *OwnedSlices) forService(namespace, name string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, inf := range o.informers {
		objs, _ := inf.GetIndexer().ByIndex(indexService, namespace+"/"+name)
		for _, obj := range objs {
			out = append(out, obj.(*discoveryv1.EndpointSlice))
		}
	}
	return out
}

// bases lists the base of every cached slice.
func (o *OwnedSlices) bases(suffix string) []source.Key {
	var out []source.Key
	for _, inf := range o.informers {
		for _, obj := range inf.GetStore().List() {
			if k, ok := baseOf(obj.(*discoveryv1.EndpointSlice), suffix); ok {
				out = append(out, k)
			}
		}
	}
	return out
}

// baseOf is the base a global slice belongs to (aggregate.ManagedBase).
func baseOf(s *discoveryv1.EndpointSlice, suffix string) (source.Key, bool) {
	b, ok := aggregate.ManagedBase(s.Labels, s.Labels[discoveryv1.LabelServiceName], suffix)
	return source.Key{Namespace: s.Namespace, Base: b}, ok
}

func byServiceName(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
}

// stripOwnedSlice is the owned slices' informer transform: everything the
// minimal-churn reconciling compares of the slices globalmirror writes.
func stripOwnedSlice(obj any) (any, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:              sl.Name,
			Namespace:         sl.Namespace,
			UID:               sl.UID,
			ResourceVersion:   sl.ResourceVersion,
			Generation:        sl.Generation,
			CreationTimestamp: sl.CreationTimestamp,
			DeletionTimestamp: sl.DeletionTimestamp,
			Labels:            sl.Labels,
			OwnerReferences:   sl.OwnerReferences,
			Annotations:       keepKeys(sl.Annotations, corev1.EndpointsLastChangeTriggerTime),
		},
		AddressType: sl.AddressType,
		Ports:       sl.Ports,
		Endpoints:   make([]discoveryv1.Endpoint, len(sl.Endpoints)),
	}
	for i, e := range sl.Endpoints {
		out.Endpoints[i] = discoveryv1.Endpoint{
			Addresses:  e.Addresses,
			Conditions: e.Conditions,
			Hostname:   e.Hostname,
			TargetRef:  e.TargetRef,
			NodeName:   e.NodeName,
			Zone:       e.Zone,
		}
	}
	return out, nil
}

// keepKeys is the part of m under keys, nil when that is empty.
func keepKeys(m map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
