//lint:file-ignore SA1019 Linkerd's service mirror writes v1 Endpoints, so the simulated mirror does.

package chart

import (
	"testing"

	"github.com/globalmirror/globalmirror/test/localkube"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mirror writes what Linkerd's service mirror (headless mode) writes for a
// service db exported from cluster east with one ready pod db-0: the headless
// mirror db-east and its v1 Endpoints, which kube-controller-manager mirrors
// into an EndpointSlice. It does nothing if the mirror exists.
func mirror(t *testing.T, c *localkube.Cluster, ns string) {
	t.Helper()
	ctx := t.Context()
	labels := map[string]string{
		"app":                                "db",
		"mirror.linkerd.io/mirrored-service": "true",
		"mirror.linkerd.io/cluster-name":     "east",
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db-east", Namespace: ns, Labels: labels, Annotations: map[string]string{
			"mirror.linkerd.io/remote-svc-fq-name":      "db." + ns + ".svc.cluster.local",
			"mirror.linkerd.io/remote-resource-version": "1",
		}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	eps := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "db-east", Namespace: ns, Labels: labels},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10", Hostname: "db-0"}},
			Ports:     []corev1.EndpointPort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}},
		}},
	}
	if _, err := c.Client.CoreV1().Endpoints(ns).Create(ctx, eps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
