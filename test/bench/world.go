// Package bench is the harness behind `make bench`: DNS throughput of the
// global plugin against the kubernetes and hosts plugins, programming latency
// of both halves, memory, controller scale and Go micro-benchmarks, written
// up as a markdown table. See test/bench/README.md.
package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/bulk"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// SliceSelector selects the slices a World wrote.
const SliceSelector = discoveryv1.LabelManagedBy + "=" + sliceManagedBy

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

// Mirror is Linkerd's headless mirror of base i from cluster c.
func (w World) Mirror(i, c int) string { return Base(i) + "-" + w.clusters()[c] }

// FQDN is a service's name in the zone.
func (w World) FQDN(service string) string {
	return service + "." + w.Namespace + ".svc." + Zone
}

// Addr is the address of pod p of base i in cluster c.
func (w World) Addr(i, c, p int) netip.Addr { return offset((i*len(w.clusters())+c)*Pods + p) }

// ChangeAddr is the k-th address the latency phase adds.
func ChangeAddr(k int) netip.Addr { return offset(addrSpace - changeAddrs + k%changeAddrs) }

func offset(n int) netip.Addr {
	b := addrBase.As4()
	binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])+uint32(n)) // #nosec G115 -- n < 1<<17
	return netip.AddrFrom4(b)
}

var peerPort = corev1.ServicePort{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}

func (w World) mirrorLabels(c int) map[string]string {
	return map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: w.clusters()[c]}
}

// service is a Service Linkerd's service mirror writes for base i: name,
// with labels lbl and clusterIP ("None": headless; empty: one allocated).
func (w World) service(i int, name string, lbl map[string]string, clusterIP string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: w.Namespace, Labels: lbl,
			Annotations: map[string]string{aggregate.AnnotationRemoteFQName: Base(i) + "." + w.Namespace + ".svc.cluster.local"},
		},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{peerPort}},
	}
}

// slice is the EndpointSlice Kubernetes' mirroring controller writes of the
// Service service (labelled lbl) from Linkerd's Endpoints: the labels
// copied, one ready endpoint at each of eps, on port.
func (w World) slice(service string, lbl map[string]string, port int32, eps ...Endpoint) *discoveryv1.EndpointSlice {
	lbl[discoveryv1.LabelServiceName] = service
	lbl[discoveryv1.LabelManagedBy] = sliceManagedBy
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: service + "-m", Namespace: w.Namespace, Labels: lbl},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new(peerPort.Name), Port: new(port), Protocol: new(peerPort.Protocol)}},
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.Addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}
		if e.Hostname != "" {
			ep.Hostname = new(e.Hostname)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// MirrorSlice is the slice of the headless mirror of base i from cluster c:
// one endpoint with a hostname per pod, plus extra endpoints.
func (w World) MirrorSlice(i, c int, extra ...Endpoint) *discoveryv1.EndpointSlice {
	eps := make([]Endpoint, 0, Pods+len(extra))
	for p := range Pods {
		eps = append(eps, Endpoint{Hostname: fmt.Sprintf("%s-%d", Base(i), p), Addr: w.Addr(i, c, p)})
	}
	return w.slice(w.Mirror(i, c), w.mirrorLabels(c), peerPort.Port, append(eps, extra...)...)
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
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return w.each(ctx, from, to, workers, func(ctx context.Context, i, c int) error { return w.createMirror(ctx, client, i, c) })
}

// each calls f for every cluster c of every base i in [from, to), up to
// workers at a time.
func (w World) each(ctx context.Context, from, to, workers int, f func(ctx context.Context, i, c int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := from; i < to; i++ {
		for c := range w.clusters() {
			g.Go(func() error { return f(gctx, i, c) })
		}
	}
	return g.Wait()
}

// create creates svc, unless nil, and slice, each retried on a timeout.
func (w World) create(ctx context.Context, client kubernetes.Interface, svc *corev1.Service, slice *discoveryv1.EndpointSlice) error {
	if svc != nil {
		if err := bulk.Create(ctx, client.CoreV1().Services(w.Namespace).Create, svc); err != nil {
			return fmt.Errorf("service %s: %w", svc.Name, err)
		}
	}
	if err := bulk.Create(ctx, client.DiscoveryV1().EndpointSlices(w.Namespace).Create, slice); err != nil {
		return fmt.Errorf("slice %s: %w", slice.Name, err)
	}
	return nil
}

// createMirror creates the headless mirror of base i from cluster c, as
// Linkerd's service mirror writes it, and its slice.
func (w World) createMirror(ctx context.Context, client kubernetes.Interface, i, c int) error {
	return w.create(ctx, client, w.service(i, w.Mirror(i, c), w.mirrorLabels(c), corev1.ClusterIPNone), w.MirrorSlice(i, c))
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
var gatewayAddr = netip.MustParseAddr("192.0.2.1")

// EndpointMirrorSlice is the slice Kubernetes' mirroring controller makes of
// the Endpoints of pod p's endpoint mirror: one ready endpoint at the gateway.
func (w World) EndpointMirrorSlice(i, c, p int) *discoveryv1.EndpointSlice {
	return w.slice(w.EndpointMirror(i, c, p), w.endpointMirrorLabels(i, c), 4143, Endpoint{Addr: gatewayAddr})
}

func (w World) endpointMirrorLabels(i, c int) map[string]string {
	lbl := w.mirrorLabels(c)
	lbl[aggregate.LabelHeadlessMirrorName] = w.Mirror(i, c)
	return lbl
}

// LoadEndpointMirrors creates the endpoint mirrors of bases [from, to), as
// Load creates their headless mirrors: Linkerd's full shape.
func (w World) LoadEndpointMirrors(ctx context.Context, client kubernetes.Interface, from, to, workers int) error {
	return w.each(ctx, from, to, workers, func(ctx context.Context, i, c int) error {
		for p := range Pods {
			if err := w.createEndpointMirror(ctx, client, i, c, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// createEndpointMirror creates what Linkerd writes for pod p of base i from
// cluster c besides the headless mirror (the mirror simulator writes it
// too): unless NoEndpointMirrorServices, a Service (ClusterIP unless
// HeadlessEndpointMirrors) with the mirror labels and the headless mirror's
// name; and its slice.
func (w World) createEndpointMirror(ctx context.Context, client kubernetes.Interface, i, c, p int) error {
	var svc *corev1.Service
	if !w.NoEndpointMirrorServices {
		clusterIP := "" // one allocated
		if w.HeadlessEndpointMirrors {
			clusterIP = corev1.ClusterIPNone
		}
		svc = w.service(i, w.EndpointMirror(i, c, p), w.endpointMirrorLabels(i, c), clusterIP)
	}
	return w.create(ctx, client, svc, w.EndpointMirrorSlice(i, c, p))
}
