package localkube

import (
	"context"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	ctx := context.Background()
	names := []string{"source", "east", "west"}
	env, err := Start(ctx, Options{Clusters: names, Logger: TestLogger(t)}) // it logs how long it took
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() }) // Stop may be called again

	for _, name := range names {
		c := env.Cluster(name)
		if c == nil || c.Name != name {
			t.Fatalf("Cluster(%q) = %v", name, c)
		}
		// The kubeconfig on disk is checked by test/cmd/localkube's TestCommands.
		node, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(node.Status.Conditions) == 0 || node.Status.Conditions[0].Status != corev1.ConditionTrue {
			t.Errorf("%s: node not Ready: %+v", name, node.Status.Conditions)
		}
		if _, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Clusters never share data.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-east"}}
	if _, err := env.Cluster("east").Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cluster("west").Client.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace created in east is visible in west: %v", err)
	}

	// Stop leaves nothing behind: no listener, no directory.
	hosts := []string{}
	for _, c := range env.Clusters() {
		for _, raw := range []string{c.Config.Host, c.kcmHealthz} {
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			hosts = append(hosts, u.Host)
		}
	}
	start := time.Now()
	if err := env.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	t.Logf("stopped in %v", time.Since(start).Round(time.Millisecond))
	for _, h := range hosts {
		if conn, err := net.DialTimeout("tcp", h, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still listening after Stop", h)
		}
	}
	if _, err := os.Stat(env.Dir()); !os.IsNotExist(err) {
		t.Errorf("%s left after Stop: %v", env.Dir(), err)
	}
}

func TestMissingAssetsFail(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		t.Setenv(AssetsEnv, dir)
		if _, err := Start(context.Background(), Options{Clusters: []string{"a"}}); err == nil {
			t.Fatalf("Start with $%s=%q (no assets) succeeded", AssetsEnv, dir)
		}
	}
}

func TestClusterNames(t *testing.T) {
	for _, names := range [][]string{nil, {"East"}, {"a", "a"}, {"a_b"}} {
		if err := validateNames(names); err == nil {
			t.Errorf("validateNames(%q) accepted", names)
		}
	}
	if err := validateNames([]string{"source", "east", "west-2"}); err != nil {
		t.Error(err)
	}
}

// The release a kube-apiserver serves is checked against the module it was
// built from (every Start does, TestStartStop among them); a binary built
// from no Kubernetes module is refused.
func TestBuiltReleaseComesFromTheBinarysModules(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if r, err := builtRelease(self); err == nil {
		t.Errorf("the test binary was built from Kubernetes %s", r)
	}
}
