package controller

import (
	"context"
	"errors"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/source"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

const indexService = "globalmirror/global-service"

// OwnedSlices caches the EndpointSlices the controller writes, selected by
// their endpointslice managed-by label, so the reconciler can diff against
// them and so edits or deletions by anyone else get repaired. A feed per
// namespace keeps the cache (kubeclient.Feed: its lists take the path the
// API server offers, its watches resume, a 410 lists again).
type OwnedSlices struct {
	store   cache.Indexer // stripped slices, by namespace/name and by service
	feeds   kubeclient.Feeds
	onEvent sliceEvent
}

// sliceEvent is told about a slice that was added or updated (deleted=false)
// or deleted.
type sliceEvent func(s *discoveryv1.EndpointSlice, deleted bool)

// NewOwnedSlices builds the feeds of the global EndpointSlices in the
// namespaces cfg's feeds read (empty: all), through its API and counted
// by its Counters as they are; New adds its handler, Controller.Start runs
// them.
func NewOwnedSlices(cfg source.Config) (*OwnedSlices, error) {
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: aggregate.EndpointSliceManagedBy}).String()
	o := &OwnedSlices{
		store: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexService: byServiceName}),
	}
	feeds := source.NewFeeds(cfg)
	for _, ns := range namespaces {
		f, err := feeds.New(source.EndpointSlices, ns, sel, &ownedSink{o: o, namespace: ns})
		if err != nil {
			return nil, err
		}
		o.feeds = append(o.feeds, f)
	}
	return o, nil
}

// addHandler tells onEvent about every change of a global slice.
func (o *OwnedSlices) addHandler(onEvent sliceEvent) error {
	if o.onEvent != nil {
		return errors.New("controller: the owned slices have a handler already")
	}
	o.onEvent = onEvent
	return nil
}

func (o *OwnedSlices) start(ctx context.Context) { o.feeds.Start(ctx) }

func (o *OwnedSlices) hasSynced() bool { return o.feeds.HasSynced() }

// forService lists the cached slices labelled with the given service name.
func (o *OwnedSlices) forService(namespace, name string) []*discoveryv1.EndpointSlice {
	objs, _ := o.store.ByIndex(indexService, namespace+"/"+name)
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*discoveryv1.EndpointSlice))
	}
	return out
}

// bases lists the base of every cached slice.
func (o *OwnedSlices) bases(suffix string) []source.Key {
	var out []source.Key
	for _, obj := range o.store.List() {
		if k, ok := baseOf(obj.(*discoveryv1.EndpointSlice), suffix); ok {
			out = append(out, k)
		}
	}
	return out
}

// ownedSink keeps one namespace feed's slices in the store, and tells the
// handler of every change.
type ownedSink struct {
	o         *OwnedSlices
	namespace string // metav1.NamespaceAll: every namespace
	// delivered are the keys the current list delivered, the list marks
	// of the store's slices (source's listMarks, kept beside client-go's
	// store); nil outside a list.
	delivered map[string]bool
}

func (k *ownedSink) Listing() { k.delivered = map[string]bool{} }

func (k *ownedSink) Upsert(obj runtime.Object) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	cur := stripOwnedSlice(sl)
	key := cur.Namespace + "/" + cur.Name
	k.mark(key)
	if old, ok, _ := k.o.store.GetByKey(key); ok && kubeclient.SameVersion(old.(*discoveryv1.EndpointSlice).ResourceVersion, cur.ResourceVersion) {
		return
	}
	_ = k.o.store.Update(cur)
	k.o.tell(cur, false)
}

// Current implements kubeclient.CurrentSink: a relist decodes none of the
// slices that did not change.
func (k *ownedSink) Current(p *kubeclient.Peeked) bool {
	key := p.Namespace + "/" + p.Name // a string of its own: the marks keep it
	old, ok, _ := k.o.store.GetByKey(key)
	if !ok || !kubeclient.SameVersion(old.(*discoveryv1.EndpointSlice).ResourceVersion, p.ResourceVersion) {
		return false
	}
	k.mark(key)
	return true
}

func (k *ownedSink) mark(key string) {
	if k.delivered != nil {
		k.delivered[key] = true
	}
}

func (k *ownedSink) Delete(obj runtime.Object) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	cur := stripOwnedSlice(sl)
	_ = k.o.store.Delete(cur)
	k.o.tell(cur, true)
}

func (k *ownedSink) Listed() {
	for _, obj := range k.o.store.List() {
		sl := obj.(*discoveryv1.EndpointSlice)
		if (k.namespace == metav1.NamespaceAll || sl.Namespace == k.namespace) && !k.delivered[sl.Namespace+"/"+sl.Name] {
			_ = k.o.store.Delete(sl)
			k.o.tell(sl, true)
		}
	}
	k.delivered = nil
}

func (o *OwnedSlices) tell(sl *discoveryv1.EndpointSlice, deleted bool) {
	if o.onEvent != nil {
		o.onEvent(sl, deleted)
	}
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

// stripOwnedSlice is what the owned slices' cache keeps: everything the
// minimal-churn reconciling compares of the slices globalmirror writes.
func stripOwnedSlice(sl *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
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
	return out
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
