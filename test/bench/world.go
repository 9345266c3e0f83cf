// Package bench is the harness behind `make bench`: DNS throughput of the
// global plugin against the kubernetes and hosts plugins, programming latency
// of both halves, memory, controller scale and Go micro-benchmarks, written
// up as a markdown table. See test/bench/README.md.
package bench

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Zone is the cluster DNS zone every block serves.
const Zone = "cluster.local."

// Clusters mirror every base of the default world; each has Pods pods.
var Clusters = []string{"east", "west", "north"}

// Pods per base per cluster.
const Pods = 3

// Records in the A answer of a global name of the default world: every pod
// of every cluster.
var Records = len(Clusters) * Pods

// Pod addresses come from 198.18.0.0/15, the range set aside for
// benchmarks (RFC 2544): data only, never contacted. Base i, cluster c, pod p
// owns one address; the top changeAddrs are for endpoints the latency
// phase adds.
var addrBase = netip.MustParseAddr("198.18.0.0")

const (
	addrSpace   = 1 << 17
	changeAddrs = 1 << 13
	// MaxBases is the largest default world the address range holds.
	MaxBases = (addrSpace - changeAddrs) / 9
)

// sliceManagedBy marks the mirror slices as written by this harness, not by
// kube-controller-manager's mirroring controller, which would delete them:
// here there are no v1 Endpoints to mirror them from.
const sliceManagedBy = "bench.globalmirror.io"

// World is the benchmark's data in one namespace: bases s00000, s00001, ...,
// each exported from every cluster and mirrored headless by Linkerd.
type World struct {
	Namespace string
	// Clusters are the linked clusters; nil: the default Clusters.
	Clusters []string
	// NoEndpointMirrorServices leaves out the Services of Linkerd's
	// endpoint mirrors, keeping their slices. Neither half ever receives
	// them (the API server filters them out by label), and their ClusterIPs
	// cost this machine's API server more with each one it holds: 30,000
	// took half an hour to write.
	NoEndpointMirrorServices bool
	// HeadlessEndpointMirrors writes the endpoint mirrors' Services without
	// a ClusterIP: the objects a plugin that lists every Service lists in
	// Linkerd's shape, less the address the API server would allocate
	// (which is what costs it more with each Service).
	HeadlessEndpointMirrors bool
}

func (w World) clusters() []string {
	if w.Clusters == nil {
		return Clusters
	}
	return w.Clusters
}

// Records is how many A records a global name answers: every pod of every
// cluster.
func (w World) Records() int { return len(w.clusters()) * Pods }

// MaxBases is the largest world of these clusters the address range holds.
func (w World) MaxBases() int { return (addrSpace - changeAddrs) / w.Records() }

// Base is the name of base i.
func Base(i int) string { return fmt.Sprintf("s%05d", i) }

// Global is the global service of base i.
func Global(i int) string { return Base(i) + aggregate.DefaultSuffix }

// Mirror is Linkerd's headless mirror of base i from cluster c, in the
// default world.
func Mirror(i, c int) string { return World{}.Mirror(i, c) }

// Mirror is Linkerd's headless mirror of base i from cluster c.
func (w World) Mirror(i, c int) string { return Base(i) + "-" + w.clusters()[c] }

// FQDN is a service's name in the zone.
func (w World) FQDN(service string) string {
	return service + "." + w.Namespace + ".svc." + Zone
}

// Addr is the address of pod p of base i in cluster c, in the default world.
func Addr(i, c, p int) netip.Addr { return World{}.Addr(i, c, p) }

// Addr is the address of pod p of base i in cluster c.
func (w World) Addr(i, c, p int) netip.Addr { return offset((i*len(w.clusters())+c)*Pods + p) }

// ChangeAddr is the k-th address the latency phase adds.
func ChangeAddr(k int) netip.Addr { return offset(addrSpace - changeAddrs + k%changeAddrs) }

func offset(n int) netip.Addr {
	b := addrBase.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(n) // #nosec G115 -- n < 1<<17
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

var peerPort = corev1.ServicePort{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}

func (w World) mirrorLabels(c int) map[string]string {
	return map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: w.clusters()[c]}
}

// MirrorService is the headless mirror of base i from cluster c, as Linkerd's
// service mirror writes it.
func (w World) MirrorService(i, c int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: w.Mirror(i, c), Namespace: w.Namespace, Labels: w.mirrorLabels(c),
			Annotations: map[string]string{aggregate.AnnotationRemoteFQName: Base(i) + "." + w.Namespace + ".svc.cluster.local"},
		},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{peerPort}},
	}
}

// MirrorSlice is the EndpointSlice of that mirror as Kubernetes' mirroring
// controller writes it from Linkerd's Endpoints: the Linkerd labels copied,
// one ready endpoint with a hostname per pod, plus extra endpoints.
func (w World) MirrorSlice(i, c int, extra ...Endpoint) *discoveryv1.EndpointSlice {
	lbl := w.mirrorLabels(c)
	lbl[discoveryv1.LabelServiceName] = w.Mirror(i, c)
	lbl[discoveryv1.LabelManagedBy] = sliceManagedBy
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: w.Mirror(i, c) + "-m", Namespace: w.Namespace, Labels: lbl},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{
			Name: new(peerPort.Name), Port: new(peerPort.Port), Protocol: new(peerPort.Protocol),
		}},
	}
	eps := make([]Endpoint, 0, Pods+len(extra))
	for p := range Pods {
		eps = append(eps, Endpoint{Hostname: fmt.Sprintf("%s-%d", Base(i), p), Addr: w.Addr(i, c, p)})
	}
	for _, e := range append(eps, extra...) {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.Addr.String()},
			Hostname:   new(e.Hostname),
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
		})
	}
	return s
}

// Endpoint is one pod of a mirror slice.
type Endpoint struct {
	Hostname string
	Addr     netip.Addr
}

// Load creates the namespace (if missing) and the mirrors of bases [from, to)
// with up to workers requests in flight.
func (w World) Load(ctx context.Context, client kubernetes.Interface, from, to, workers int) error {
	if to > w.MaxBases() {
		return fmt.Errorf("%d bases: the address range holds at most %d", to, w.MaxBases())
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.Namespace}}
	if _, err := client.CoreV1().Namespaces().Get(ctx, w.Namespace, metav1.GetOptions{}); err != nil {
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := from; i < to; i++ {
		for c := range w.clusters() {
			g.Go(func() error { return w.createMirror(gctx, client, i, c) })
		}
	}
	return g.Wait()
}

// createMirror creates the headless mirror of base i from cluster c and its slice.
func (w World) createMirror(ctx context.Context, client kubernetes.Interface, i, c int) error {
	if _, err := client.CoreV1().Services(w.Namespace).Create(ctx, w.MirrorService(i, c), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("service %s: %w", w.Mirror(i, c), err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices(w.Namespace).Create(ctx, w.MirrorSlice(i, c), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("slice of %s: %w", w.Mirror(i, c), err)
	}
	return nil
}

// SetExtra rewrites the slice of base i from cluster c with extra endpoints
// after its pods, stamped with the trigger time the plugin's programming
// duration metric starts from. It returns once the API server answered the
// update, with the time just before it was sent and its round trip.
func (w World) SetExtra(ctx context.Context, client kubernetes.Interface, i, c int, extra ...Endpoint) (time.Time, time.Duration, error) {
	cur, err := client.DiscoveryV1().EndpointSlices(w.Namespace).Get(ctx, w.Mirror(i, c)+"-m", metav1.GetOptions{})
	if err != nil {
		return time.Time{}, 0, err
	}
	s := w.MirrorSlice(i, c, extra...)
	s.ResourceVersion = cur.ResourceVersion
	start := time.Now()
	s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: start.UTC().Format(time.RFC3339Nano)}
	_, err = client.DiscoveryV1().EndpointSlices(w.Namespace).Update(ctx, s, metav1.UpdateOptions{})
	return start, time.Since(start), err
}

// EndpointMirror is Linkerd's endpoint mirror of pod p of base i from
// cluster c: a ClusterIP Service named <hostname>-<cluster>, routed to the
// gateway.
func (w World) EndpointMirror(i, c, p int) string {
	return fmt.Sprintf("%s-%d-%s", Base(i), p, w.clusters()[c])
}

// gatewayAddr is every cluster's gateway: data only, never contacted.
const gatewayAddr = "192.0.2.1"

// EndpointMirrorService and EndpointMirrorSlice are what Linkerd writes for
// every mirrored pod besides the headless mirror (the mirror simulator
// writes them too): a ClusterIP Service with the mirror labels and the
// headless mirror's name, and the slice Kubernetes' mirroring controller
// makes of its Endpoints, one ready endpoint at the gateway.
func (w World) EndpointMirrorService(i, c, p int) *corev1.Service {
	lbl := w.mirrorLabels(c)
	lbl[aggregate.LabelHeadlessMirrorName] = w.Mirror(i, c)
	var clusterIP string
	if w.HeadlessEndpointMirrors {
		clusterIP = corev1.ClusterIPNone
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: w.EndpointMirror(i, c, p), Namespace: w.Namespace, Labels: lbl,
			Annotations: map[string]string{aggregate.AnnotationRemoteFQName: Base(i) + "." + w.Namespace + ".svc.cluster.local"},
		},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{peerPort}},
	}
}

func (w World) EndpointMirrorSlice(i, c, p int) *discoveryv1.EndpointSlice {
	lbl := w.mirrorLabels(c)
	lbl[aggregate.LabelHeadlessMirrorName] = w.Mirror(i, c)
	lbl[discoveryv1.LabelServiceName] = w.EndpointMirror(i, c, p)
	lbl[discoveryv1.LabelManagedBy] = sliceManagedBy
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: w.EndpointMirror(i, c, p) + "-m", Namespace: w.Namespace, Labels: lbl},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new(peerPort.Name), Port: new(int32(4143)), Protocol: new(peerPort.Protocol)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{gatewayAddr},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
		}},
	}
}

// LoadEndpointMirrors creates the endpoint mirrors of bases [from, to), as
// Load creates their headless mirrors: Linkerd's full shape.
func (w World) LoadEndpointMirrors(ctx context.Context, client kubernetes.Interface, from, to, workers int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := from; i < to; i++ {
		for c := range w.clusters() {
			for p := range Pods {
				g.Go(func() error { return w.createEndpointMirror(gctx, client, i, c, p) })
			}
		}
	}
	return g.Wait()
}

// createEndpointMirror creates the endpoint mirror of pod p of base i from
// cluster c and its slice.
func (w World) createEndpointMirror(ctx context.Context, client kubernetes.Interface, i, c, p int) error {
	if !w.NoEndpointMirrorServices {
		if _, err := client.CoreV1().Services(w.Namespace).Create(ctx, w.EndpointMirrorService(i, c, p), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("service %s: %w", w.EndpointMirror(i, c, p), err)
		}
	}
	if _, err := client.DiscoveryV1().EndpointSlices(w.Namespace).Create(ctx, w.EndpointMirrorSlice(i, c, p), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("slice of %s: %w", w.EndpointMirror(i, c, p), err)
	}
	return nil
}
