package global

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/await"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// The large world of the memory and scale benchmarks, the shape `make bench`
// loads into a real API server: globals s000000, s000001, ... in "bench",
// each mirrored from three clusters with three ready pods apiece. Built here
// rather than with the shared test helpers so that these benchmarks depend
// only on the plugin's own code.

var largeClusters = []string{"east", "west", "north"}

const largePods = 3

// largeEndpoints is the number of ready endpoints of n globals.
func largeEndpoints(n int) int { return n * len(largeClusters) * largePods }

func largeBase(i int) string { return fmt.Sprintf("s%06d", i) }

// largeAddr is the address of pod p of base i in cluster c.
func largeAddr(i, c, p int) string { return largeAddrOf(i, c, p, len(largeClusters)) }

// largeAddrOf is the address of pod p of base i in cluster c of clusters.
func largeAddrOf(i, c, p, clusters int) string {
	k := (i*clusters+c)*largePods + p
	return fmt.Sprintf("10.%d.%d.%d", k>>16&255, k>>8&255, k&255)
}

// largeWorld is the mirror Services and EndpointSlices of n globals, as
// Linkerd and Kubernetes' mirroring controller write them: the headless
// mirrors and, with endpointMirrors, Linkerd's full shape, an endpoint
// mirror per pod (a ClusterIP Service <pod>-<cluster> routed to the gateway,
// and the slice mirrored from its Endpoints).
func largeWorld(n int, endpointMirrors bool) []k8sruntime.Object {
	return largeWorldOf(n, largeClusters, endpointMirrors)
}

// largeWorldOf is largeWorld with the given clusters.
func largeWorldOf(n int, clusters []string, endpointMirrors bool) []k8sruntime.Object {
	objs := make([]k8sruntime.Object, 0, 2*n*len(clusters)*(1+largePods))
	proto, port, portName := corev1.ProtocolTCP, int32(7000), "peer"
	for i := range n {
		base := largeBase(i)
		// The global Service the controller writes, which the plugin keeps
		// for its verdicts.
		objs = append(objs, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name: base + aggregate.DefaultSuffix, Namespace: "bench", UID: k8stypes.UID("svc/" + base + "-global"), ResourceVersion: "1",
				Labels: map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: base},
			},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
				Ports: []corev1.ServicePort{{Name: portName, Port: port, Protocol: proto}}},
		})
		for c, cluster := range clusters {
			name := base + "-" + cluster
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{
					Name: name, Namespace: "bench", UID: k8stypes.UID("svc/" + name), ResourceVersion: "1",
					Labels:      map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: cluster},
					Annotations: map[string]string{aggregate.AnnotationRemoteFQName: base + ".bench.svc.cluster.local"},
				},
				Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
					Ports: []corev1.ServicePort{{Name: portName, Port: port, Protocol: proto}}},
			}
			sl := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name: name + "-1", Namespace: "bench", UID: k8stypes.UID("slice/" + name), ResourceVersion: "1",
					Labels: map[string]string{discoveryv1.LabelServiceName: name,
						aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: cluster},
				},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
			}
			for p := range largePods {
				host := fmt.Sprintf("%s-%d", base, p)
				sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
					Addresses: []string{largeAddrOf(i, c, p, len(clusters))}, Hostname: new(host),
				})
				if endpointMirrors {
					objs = append(objs, endpointMirror(host, name, cluster, largeAddrOf(i, c, p, len(clusters)))...)
				}
			}
			objs = append(objs, svc, sl)
		}
	}
	return objs
}

// endpointMirror is Linkerd's endpoint mirror of pod host from cluster (a
// ClusterIP Service routed to the gateway) and its mirrored slice.
func endpointMirror(host, headless, cluster, clusterIP string) []k8sruntime.Object {
	name := host + "-" + cluster
	proto, port, portName := corev1.ProtocolTCP, int32(7000), "peer"
	labels := func() map[string]string {
		return map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: cluster,
			aggregate.LabelHeadlessMirrorName: headless}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "bench", UID: k8stypes.UID("svc/" + name), ResourceVersion: "1", Labels: labels(),
			Annotations: map[string]string{aggregate.AnnotationRemoteFQName: headless + ".bench.svc.cluster.local"},
		},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: portName, Port: port, Protocol: proto}}},
	}
	sliceLabels := labels()
	sliceLabels[discoveryv1.LabelServiceName] = name
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name + "-1", Namespace: "bench", UID: k8stypes.UID("slice/" + name), ResourceVersion: "1", Labels: sliceLabels,
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: new(int32(4143)), Protocol: &proto}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"192.0.2.1"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
		}},
	}
	return []k8sruntime.Object{svc, sl}
}

// startLarge builds and starts the plugin on a clientset with n large
// globals and waits until it answers for all of them; baseline, if not nil,
// runs once the clientset is filled, before the plugin exists. stop ends the
// plugin's feeds and worker; the caches and answer sets stay in g.
func startLarge(b *testing.B, world []k8sruntime.Object, baseline func()) (g *Global, client *fake.Clientset, stop func()) {
	b.Helper()
	client = fake.NewClientset(world...)
	// Lists give the plugin objects decoded from protobuf, as a real API
	// server's do: strings of their own, which cost the plugin what it
	// keeps of them, where the tracker's would be shared with the baseline.
	list := clienttesting.ObjectReaction(client.Tracker())
	client.PrependReactor("list", "*", func(a clienttesting.Action) (bool, k8sruntime.Object, error) {
		handled, obj, err := list(a)
		if err != nil {
			return handled, obj, err
		}
		decoded, err := fromWire(obj)
		return handled, decoded, err
	})
	cfg, err := parse(caddy.NewTestController("dns", "global"))
	if err != nil {
		b.Fatal(err)
	}
	if baseline != nil {
		baseline()
	}
	if g, err = newFromFake(cfg, client); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := g.ctrl.start(ctx)
	if err := await.Poll(ctx, 5*time.Minute, 10*time.Millisecond, func(context.Context) string {
		if !g.ctrl.ready() {
			return "index not ready"
		}
		return ""
	}); err != nil {
		cancel()
		b.Fatal(err)
	}
	return g, client, func() {
		cancel()
		<-stopped
	}
}

// fromWire is obj encoded to protobuf and decoded again, as a client reads it.
func fromWire(obj k8sruntime.Object) (k8sruntime.Object, error) {
	var out interface {
		k8sruntime.Object
		Unmarshal([]byte) error
	}
	switch obj.(type) {
	case *corev1.ServiceList:
		out = &corev1.ServiceList{}
	case *discoveryv1.EndpointSliceList:
		out = &discoveryv1.EndpointSliceList{}
	default:
		return obj, nil
	}
	b, err := obj.(interface{ Marshal() ([]byte, error) }).Marshal()
	if err != nil {
		return nil, err
	}
	return out, out.Unmarshal(b)
}
