//lint:file-ignore SA1019 Linkerd's service mirror reads and writes v1 Endpoints, so the simulator does.

package mirrorsim

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// expectObject fails t unless want and got are semantically equal (nil and
// empty the same), showing a unified diff of their JSON.
func expectObject(t *testing.T, what string, want, got any) {
	t.Helper()
	if !equality.Semantic.DeepEqual(want, got) {
		t.Errorf("%s (-want +got):\n%s", what, diff.Diff(want, got))
	}
}

func remoteDB() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db", Namespace: "shop", ResourceVersion: "42",
			Labels: map[string]string{
				"app": "db", LabelExported: "true", "mirror.linkerd.io/other": "x",
			},
			Annotations: map[string]string{
				"meta.helm.sh/release-name":                  "db",
				"service.kubernetes.io/topology-mode":        "Auto",
				"service.kubernetes.io/topology-aware-hints": "auto",
				"argocd.argoproj.io/tracking-id":             "shop:/Service:shop/db",
				"config.linkerd.io/opaque-ports":             "5432",
			},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{
				{Name: "db", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromInt32(15432)},
				{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9187, NodePort: 30001},
			},
		},
	}
}

func remoteEndpoints(ready, notReady map[string]string) *corev1.Endpoints {
	subset := corev1.EndpointSubset{Ports: []corev1.EndpointPort{
		{Name: "db", Port: 15432, Protocol: corev1.ProtocolTCP},
		{Name: "metrics", Port: 9187, Protocol: corev1.ProtocolTCP},
	}}
	for host, ip := range ready {
		subset.Addresses = append(subset.Addresses, corev1.EndpointAddress{IP: ip, Hostname: host})
	}
	for host, ip := range notReady {
		subset.NotReadyAddresses = append(subset.NotReadyAddresses, corev1.EndpointAddress{IP: ip, Hostname: host})
	}
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Subsets:    []corev1.EndpointSubset{subset},
	}
}

var wantPorts = []corev1.ServicePort{
	{Name: "db", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromInt32(15432)},
	{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9187},
}

func TestHeadlessService(t *testing.T) {
	m := mirror{cluster: "east", domain: "cluster.local", remote: remoteDB()}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db-east", Namespace: "shop",
			Labels: map[string]string{
				"app": "db", LabelMirroredService: "true", LabelClusterName: "east",
			},
			// Every annotation of the exported Service but the topology ones.
			Annotations: map[string]string{
				"meta.helm.sh/release-name":      "db",
				"argocd.argoproj.io/tracking-id": "shop:/Service:shop/db",
				"config.linkerd.io/opaque-ports": "5432",
				AnnotationRemoteSvcFqName:        "db.shop.svc.cluster.local",
				AnnotationRemoteResourceVersion:  "42",
			},
		},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: wantPorts},
	}
	expectObject(t, "headless mirror", want, m.service(true))
	want.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: wantPorts}
	expectObject(t, "ClusterIP mirror", want, m.service(false))

	// A Link's exclusions, exact or by prefix; opaque ports are kept.
	m.link = linkSpec{excludedLabels: []string{"app"}, excludedAnnotations: []string{"argocd.argoproj.io/*", "meta.helm.sh/release-name", "config.linkerd.io/opaque-ports"}}
	want.Labels = map[string]string{LabelMirroredService: "true", LabelClusterName: "east"}
	delete(want.Annotations, "meta.helm.sh/release-name")
	delete(want.Annotations, "argocd.argoproj.io/tracking-id")
	expectObject(t, "ClusterIP mirror, exclusions", want, m.service(false))
}

func TestEndpointMirror(t *testing.T) {
	m := mirror{cluster: "east", domain: "example.org", remote: remoteDB(), link: linkSpec{gatewayIdentity: "gw"}}
	svc := m.endpointMirrorService("db-0", "77")
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db-0-east", Namespace: "shop",
			Labels: map[string]string{
				"app": "db", LabelMirroredService: "true", LabelClusterName: "east", LabelHeadlessMirrorSvcName: "db-east",
			},
			// The remote Endpoints' version, not the Service's; no copied annotation.
			Annotations: map[string]string{
				AnnotationRemoteSvcFqName:       "db-0.db.shop.svc.example.org",
				AnnotationRemoteResourceVersion: "77",
			},
		},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: wantPorts},
	}
	expectObject(t, "endpoint mirror", want, svc)

	gw := Gateway{IP: netip.MustParseAddr("192.0.2.254"), Port: 4143, Alive: true}
	wantEps := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db-0-east", Namespace: "shop", Labels: want.Labels,
			Annotations: map[string]string{AnnotationRemoteSvcFqName: "db-0.db.shop.svc.example.org", AnnotationRemoteGatewayIdentity: "gw"},
		},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "192.0.2.254"}},
			Ports: []corev1.EndpointPort{
				{Name: "db", Port: 4143, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: 4143, Protocol: corev1.ProtocolTCP},
			},
		}},
	}
	expectObject(t, "gateway endpoints", wantEps, m.gatewayEndpoints(svc, gw))
	gw.Alive = false
	wantEps.Subsets[0].NotReadyAddresses, wantEps.Subsets[0].Addresses = wantEps.Subsets[0].Addresses, nil
	expectObject(t, "dead gateway endpoints", wantEps, m.gatewayEndpoints(svc, gw))
}

func TestHeadlessEndpoints(t *testing.T) {
	m := mirror{cluster: "west", domain: "cluster.local", remote: remoteDB()}
	svc := m.service(true)
	remote := remoteEndpoints(
		map[string]string{"db-2": "203.0.113.3", "db-0": "203.0.113.1", "": "203.0.113.9"},
		map[string]string{"db-1": "203.0.113.2"})
	if got, want := readyHostnames(remote), []string{"db-0", "db-2"}; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("readyHostnames = %v, want %v", got, want)
	}
	// db-2's endpoint mirror has no ClusterIP yet: it is left out.
	got := m.headlessEndpoints(svc, remote, map[string]string{"db-0": "10.96.0.10"}, true)
	want := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db-west", Namespace: "shop", Labels: svc.Labels,
			Annotations: map[string]string{AnnotationRemoteSvcFqName: "db.shop.svc.cluster.local"},
		},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "10.96.0.10", Hostname: "db-0"}},
			Ports:     remote.Subsets[0].Ports,
		}},
	}
	expectObject(t, "headless endpoints", want, got)
	got = m.headlessEndpoints(svc, remote, map[string]string{"db-0": "10.96.0.10", "db-2": "10.96.0.12"}, true)
	if n := len(got.Subsets[0].Addresses); n != 2 || got.Subsets[0].Addresses[1].Hostname != "db-2" {
		t.Errorf("addresses = %+v, want db-0 and db-2 in order", got.Subsets[0].Addresses)
	}
	if got := m.headlessEndpoints(svc, nil, nil, true); len(got.Subsets) != 0 {
		t.Errorf("no remote endpoints: subsets %+v", got.Subsets)
	}
	// Written while the gateway is dead: every address not ready.
	got = m.headlessEndpoints(svc, remote, map[string]string{"db-0": "10.96.0.10", "db-2": "10.96.0.12"}, false)
	if s := got.Subsets[0]; len(s.Addresses) != 0 || len(s.NotReadyAddresses) != 2 || s.NotReadyAddresses[0].Hostname != "db-0" {
		t.Errorf("not ready: subset %+v, want both addresses not ready", s)
	}
	if !allNotReady(got) {
		t.Error("allNotReady = false for Endpoints with only not-ready addresses")
	}
	if allNotReady(m.headlessEndpoints(svc, nil, nil, false)) {
		t.Error("allNotReady = true for Endpoints without addresses")
	}
	// What an update of the exported Service writes there: the gateway.
	if gatewayShaped(got) || !gatewayShaped(m.gatewayEndpoints(svc, Gateway{IP: netip.MustParseAddr("192.0.2.254"), Port: 4143})) {
		t.Error("gatewayShaped does not tell the pods from the gateway")
	}
}

func TestMirrorMode(t *testing.T) {
	headless := remoteDB()
	clusterIP := remoteDB()
	clusterIP.Spec.ClusterIP = "10.0.0.1"
	noPorts := remoteDB()
	noPorts.Spec.Ports = nil
	named := remoteEndpoints(map[string]string{"db-0": "203.0.113.1"}, nil)
	unnamed := remoteEndpoints(map[string]string{"": "203.0.113.1"}, map[string]string{"db-1": "203.0.113.2"})
	empty := &corev1.Endpoints{}
	headlessMirror := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	clusterIPMirror := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.7"}}
	for _, tc := range []struct {
		name     string
		remote   *corev1.Service
		eps      *corev1.Endpoints
		existing *corev1.Service
		want     mode
	}{
		{"not exported", nil, named, headlessMirror, modeNone},
		{"headless with a ready hostname", headless, named, nil, modeHeadless},
		{"headless, endpoints not seen yet", headless, nil, nil, modeNone},
		{"headless, a hostname only on a not-ready address", headless, unnamed, nil, modeHeadless},
		{"headless, no hostname at all", headless, remoteEndpoints(map[string]string{"": "203.0.113.1"}, nil), nil, modeClusterIP},
		{"headless, no pods yet", headless, empty, nil, modeNone},
		{"headless without ports", noPorts, named, nil, modeNone},
		{"headless mirror stays headless", headless, empty, headlessMirror, modeHeadless},
		{"ClusterIP mirror of a headless service sticks", headless, named, clusterIPMirror, modeClusterIP},
		{"ClusterIP service", clusterIP, named, nil, modeClusterIP},
		{"service re-created as ClusterIP", clusterIP, named, headlessMirror, modeClusterIP},
	} {
		if got := mirrorMode(tc.remote, tc.eps, tc.existing); got != tc.want {
			t.Errorf("%s: mode %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMirrorKey(t *testing.T) {
	s := &Simulator{}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   key
		ok     bool
	}{
		{"db-east", map[string]string{LabelClusterName: "east"}, key{"east", "shop", "db"}, true},
		{"db-0-east", map[string]string{LabelClusterName: "east", LabelHeadlessMirrorSvcName: "db-east"}, key{"east", "shop", "db"}, true},
		{"db-east", map[string]string{LabelClusterName: "west"}, key{}, false},
		{"db-east", nil, key{}, false},
	} {
		obj := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "shop", Labels: tc.labels}}
		got, ok := s.mirrorKey(obj)
		if got != tc.want || ok != tc.ok {
			t.Errorf("mirrorKey(%s %v) = %v, %v; want %v, %v", tc.name, tc.labels, got, ok, tc.want, tc.ok)
		}
	}
}

func TestUpToDate(t *testing.T) {
	m := mirror{cluster: "east", domain: "cluster.local", remote: remoteDB()}
	desired := m.service(true)
	stored := desired.DeepCopy()
	// Linkerd updates a mirror only for a new version of the exported
	// Service, whatever else it or others changed.
	stored.Annotations["someone-else"] = "x"
	stored.Labels["app"] = "other"
	stored.Spec.Ports = nil
	if !serviceUpToDate(stored, desired) {
		t.Error("a mirror naming the exported Service's version reported as out of date")
	}
	m.remote.ResourceVersion = "43"
	if serviceUpToDate(stored, m.service(true)) {
		t.Error("a new version of the exported Service not noticed")
	}
	// An endpoint mirror is never updated.
	if !serviceUpToDate(&corev1.Service{}, m.endpointMirrorService("db-0", "1")) {
		t.Error("an endpoint mirror reported as out of date")
	}
}
