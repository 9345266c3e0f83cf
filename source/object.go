package source

import (
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// The informer caches hold minimal types, not API objects, the way the
// kubernetes plugin's object package does: the Service cache holds every
// Service of the watched namespaces, both caches live in every CoreDNS, and
// an API object's struct alone is several times what is read of it. They are
// turned back into (sparse) API objects only to aggregate one base, or when
// asked for one.

// objectMeta is the identity the caches key, index and compare by.
type objectMeta struct {
	name, namespace string
	uid             types.UID
	resourceVersion string
}

func metaOf(m *metav1.ObjectMeta) objectMeta {
	return objectMeta{name: m.Name, namespace: m.Namespace, uid: m.UID, resourceVersion: m.ResourceVersion}
}

func (m *objectMeta) objUID() types.UID { return m.uid }

// GetObjectMeta lets cache.MetaNamespaceKeyFunc (through meta.Accessor) key
// the object.
func (m *objectMeta) GetObjectMeta() metav1.Object { return m.objectMeta() }

func (m *objectMeta) objectMeta() *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Name: m.name, Namespace: m.namespace, UID: m.uid, ResourceVersion: m.resourceVersion}
}

// cachedService is what the cache keeps of a Service: what Classify,
// WrittenByGlobalmirror and the controller's ownership checks read. Of its labels, only those keys
// (key, value pairs: a map of its own costs several times that); ports and
// selector only of headless Services (members and globals are headless).
type cachedService struct {
	objectMeta
	labels            []string
	remoteFQName      string // Linkerd's remote-svc-fq-name annotation
	includeMirrors    string // globalmirror's include-mirrors annotation
	clusterIP         string
	ports             []corev1.ServicePort
	selector          map[string]string
	deletionTimestamp *metav1.Time
}

// service is c as a sparse Service; read-only, like everything from a cache.
func (c *cachedService) service() *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: *c.objectMeta.objectMeta(),
		Spec:       corev1.ServiceSpec{ClusterIP: c.clusterIP, Ports: c.ports, Selector: c.selector},
	}
	if len(c.labels) > 0 {
		svc.Labels = make(map[string]string, len(c.labels)/2)
		for i := 0; i < len(c.labels); i += 2 {
			svc.Labels[c.labels[i]] = c.labels[i+1]
		}
	}
	svc.DeletionTimestamp = c.deletionTimestamp
	if c.remoteFQName != "" || c.includeMirrors != "" {
		svc.Annotations = map[string]string{}
		if c.remoteFQName != "" {
			svc.Annotations[aggregate.AnnotationRemoteFQName] = c.remoteFQName
		}
		if c.includeMirrors != "" {
			svc.Annotations[aggregate.AnnotationIncludeMirrors] = c.includeMirrors
		}
	}
	return svc
}

// Sparse is the Service again, for the deletions an informer's relist finds
// (kubeclient.Sparse).
func (c *cachedService) Sparse() runtime.Object { return c.service() }

// serviceStripper turns Services into cachedServices.
type serviceStripper struct {
	labels []string // the label keys Classify, WrittenByGlobalmirror and the local selector read
}

func newServiceStripper(local labels.Selector) serviceStripper {
	keep := []string{
		aggregate.LabelMirroredService, aggregate.LabelClusterName, aggregate.LabelHeadlessMirrorName,
		aggregate.LabelManagedBy, aggregate.LabelBase,
	}
	if local != nil {
		reqs, _ := local.Requirements()
		for _, r := range reqs {
			keep = append(keep, r.Key())
		}
	}
	return serviceStripper{labels: keep}
}

// strip is the Service informer's transform.
func (st serviceStripper) strip(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil // DeletedFinalStateUnknown holds an already stripped object
	}
	c := &cachedService{
		objectMeta:        metaOf(&svc.ObjectMeta),
		labels:            keep(svc.Labels, st.labels),
		remoteFQName:      svc.Annotations[aggregate.AnnotationRemoteFQName],
		clusterIP:         svc.Spec.ClusterIP,
		deletionTimestamp: svc.DeletionTimestamp,
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		c.ports, c.selector = svc.Spec.Ports, svc.Spec.Selector
		c.includeMirrors = svc.Annotations[aggregate.AnnotationIncludeMirrors]
	}
	return c, nil
}

// cachedSlice is what the cache keeps of a member's EndpointSlice. Of an
// endpoint mirror's slice (one per mirrored pod, the bulk of a large world)
// only whether any endpoint is ready: all that readiness reads of it
// (aggregate.MirrorEndpointReady).
type cachedSlice struct {
	objectMeta
	serviceName    string // kubernetes.io/service-name
	headlessMirror string // Linkerd's headless-mirror-svc-name, on endpoint mirrors' slices
	triggerTime    string // endpoints.kubernetes.io/last-change-trigger-time
	addressType    discoveryv1.AddressType
	ports          []discoveryv1.EndpointPort
	endpoints      []cachedEndpoint
	mirrorReady    bool // an endpoint mirror's slice: some endpoint is ready
	// cluster is a headless mirror's slice's cluster; globalNamed are the
	// names of its endpoints' endpoint mirrors (<hostname>-<cluster>) that
	// are named like a global, which the Service cache does not hold.
	cluster     string
	globalNamed []string
}

type cachedEndpoint struct {
	addresses []string
	hostname  *string
	ready     *bool
}

// stripMemberSlice is the member EndpointSlice informers' transform for the
// default suffix.
func stripMemberSlice(obj any) (any, error) { return sliceStripper{aggregate.DefaultSuffix}.strip(obj) }

// sliceStripper turns member EndpointSlices into cachedSlices.
type sliceStripper struct {
	suffix string
}

// strip is the member EndpointSlice informers' transform.
func (st sliceStripper) strip(obj any) (any, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	c := &cachedSlice{
		objectMeta:     metaOf(&sl.ObjectMeta),
		serviceName:    sl.Labels[discoveryv1.LabelServiceName],
		headlessMirror: sl.Labels[aggregate.LabelHeadlessMirrorName],
		triggerTime:    sl.Annotations[corev1.EndpointsLastChangeTriggerTime],
		addressType:    sl.AddressType,
		ports:          sl.Ports,
		endpoints:      make([]cachedEndpoint, len(sl.Endpoints)),
	}
	if sl.Labels[discoveryv1.LabelManagedBy] == aggregate.EndpointSliceManagedBy {
		// globalmirror's own slices (native names add some to the local
		// service) are no member's endpoints: cached, but under no service.
		c.serviceName = ""
		return c, nil
	}
	if c.headlessMirror != "" {
		c.ports, c.endpoints, c.addressType = nil, nil, ""
		for i := range sl.Endpoints {
			c.mirrorReady = c.mirrorReady || aggregate.EndpointReady(&sl.Endpoints[i])
		}
		return c, nil
	}
	if sl.Labels[aggregate.LabelMirroredService] == "true" {
		c.cluster = sl.Labels[aggregate.LabelClusterName]
	}
	for i, e := range sl.Endpoints {
		c.endpoints[i] = cachedEndpoint{addresses: e.Addresses, hostname: e.Hostname, ready: e.Conditions.Ready}
		if c.cluster != "" && e.Hostname != nil {
			if name := *e.Hostname + "-" + c.cluster; strings.HasSuffix(name, st.suffix) {
				c.globalNamed = append(c.globalNamed, name)
			}
		}
	}
	return c, nil
}

// slice is c as a sparse EndpointSlice: what the aggregation reads.
func (c *cachedSlice) slice() *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  *c.objectMeta.objectMeta(),
		AddressType: c.addressType,
		Ports:       c.ports,
		Endpoints:   make([]discoveryv1.Endpoint, len(c.endpoints)),
	}
	if c.serviceName != "" || c.headlessMirror != "" || c.cluster != "" {
		sl.Labels = map[string]string{}
		if c.serviceName != "" {
			sl.Labels[discoveryv1.LabelServiceName] = c.serviceName
		}
		if c.headlessMirror != "" {
			sl.Labels[aggregate.LabelHeadlessMirrorName] = c.headlessMirror
		}
		if c.cluster != "" {
			sl.Labels[aggregate.LabelMirroredService] = "true"
			sl.Labels[aggregate.LabelClusterName] = c.cluster
		}
	}
	if c.triggerTime != "" {
		sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: c.triggerTime}
	}
	for i, e := range c.endpoints {
		sl.Endpoints[i] = discoveryv1.Endpoint{
			Addresses: e.addresses, Hostname: e.hostname, Conditions: discoveryv1.EndpointConditions{Ready: e.ready},
		}
	}
	if c.mirrorReady {
		// What readiness reads of an endpoint mirror's slice: one ready endpoint.
		sl.Endpoints = []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
	}
	return sl
}

var ready = true

// Sparse is the slice again, for the deletions an informer's relist finds
// (kubeclient.Sparse).
func (c *cachedSlice) Sparse() runtime.Object { return c.slice() }

// asService is a Service informer's object (or the one a
// DeletedFinalStateUnknown holds) as a sparse Service.
func asService(obj any) (*corev1.Service, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	c, ok := obj.(*cachedService)
	if !ok {
		return nil, false
	}
	return c.service(), true
}

// asSlice is a member slice informer's object (or the one a
// DeletedFinalStateUnknown holds).
func asSlice(obj any) (*cachedSlice, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	c, ok := obj.(*cachedSlice)
	return c, ok
}

// keep is the key, value pairs of m's labels among keys, or nil.
func keep(m map[string]string, keys []string) []string {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	pairs := make([]string, 0, 2*n)
	for _, k := range keys {
		if v, ok := m[k]; ok {
			pairs = append(pairs, k, v)
		}
	}
	return pairs
}
