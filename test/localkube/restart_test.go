package localkube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestRestartAPIServer stops and starts an API server: the same Client and
// Kubeconfig work after it, and the data is still there.
func TestRestartAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	env := StartT(t, "restart")
	c := env.Cluster("restart")
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: "default"}}
	if _, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err == nil {
		t.Fatal("API server still answers after StopAPIServer")
	}
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart, with the old client: %v", err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart, with the kubeconfig: %v", err)
	}
}
