package cli

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The CoreDNS container is found by what it is, wherever the pod lists it.
func TestTheDNSContainerIsFoundByWhatItIs(t *testing.T) {
	proxy := corev1.Container{Name: "linkerd-proxy", Image: "proxy"}
	for _, tc := range []struct {
		what string
		pod  corev1.Pod
	}{
		{"port 53", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{proxy, {Name: "dns", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}}}},
		{"-conf", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{proxy, {Name: "dns", Image: "x", Args: []string{"-conf", "/etc/coredns/Corefile"}}}}}},
		{"its name", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{proxy, {Name: "coredns", Image: "x"}}}}},
	} {
		if got := DNSContainer(&tc.pod); got.Image != "x" {
			t.Errorf("by %s: %s", tc.what, got.Name)
		}
	}
}
