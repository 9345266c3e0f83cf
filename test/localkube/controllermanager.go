package localkube

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/globalmirror/globalmirror/test/run"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// controllers are the kube-controller-manager controllers the clusters run:
// what Services, Endpoints, EndpointSlices, mirroring, ServiceAccounts and
// deletions need. Since 1.34 only the long names are accepted.
var controllers = []string{
	"endpoints-controller",
	"endpointslice-controller",
	"endpointslice-mirroring-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
}

// nodeControllers are added where a real node runs pods (Options.RealNodes):
// what Deployments, StatefulSets, DaemonSets, a ServiceAccount token's
// kube-root-ca.crt and a Node's not-ready taint need.
var nodeControllers = []string{
	"daemonset-controller",
	"deployment-controller",
	"replicaset-controller",
	"statefulset-controller",
	"disruption-controller",
	"root-ca-certificate-publisher-controller",
	"node-lifecycle-controller",
	"taint-eviction-controller",
	"pod-garbage-collector-controller",
}

// startComponent runs the control plane component name (the binary bin) of
// cluster c with args and, added, a kubeconfig of its own (a member of
// system:masters), leader election off and its secure port, free, on
// loopback; it logs to <cluster dir>/<name>.log. args receives the
// kubeconfig's path.
func startComponent(c *Cluster, plane *envtest.ControlPlane, bin, name string, args func(kubeconfig string) []string) (*run.Process, int, error) {
	u, err := plane.AddUser(envtest.User{Name: "system:" + name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, 0, err
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return nil, 0, err
	}
	path := filepath.Join(c.apis.CertDir, name+".kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, 0, err
	}
	port, err := run.FreePort()
	if err != nil {
		return nil, 0, err
	}
	p, err := run.Start(bin, append(args(path), "--kubeconfig="+path, "--leader-elect=false", "--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port), "--profiling=false"), nil, filepath.Join(c.dir, name+".log"))
	return p, port, err
}

func (e *Env) startControllerManager(c *Cluster, bin string, plane *envtest.ControlPlane) error {
	pki := c.apis.CertDir
	names := controllers
	if c.realNode {
		names = append(slices.Clone(controllers), nodeControllers...)
	}
	if c.kcmNames != nil {
		names = c.kcmNames
	}
	caPath := filepath.Join(pki, "apiserver-ca.crt")
	if err := os.WriteFile(caPath, c.apis.SecureServing.CA, 0o600); err != nil {
		return err
	}
	var port int
	var err error
	c.kcm, port, err = startComponent(c, plane, bin, "kube-controller-manager", func(string) []string {
		return []string{
			"--controllers=" + strings.Join(names, ","),
			"--cert-dir=" + filepath.Join(pki, "kube-controller-manager"),
			// envtest writes the key the API server signs ServiceAccount tokens with.
			"--service-account-private-key-file=" + filepath.Join(pki, "sa-signer.key"),
			"--root-ca-file=" + caPath,
			// The default client limits (20 QPS) delay slices under test churn.
			"--kube-api-qps=1000",
			"--kube-api-burst=2000",
			// Batching delays every change; keep the defaults' zero explicit.
			"--endpoint-updates-batch-period=0s",
			"--endpointslice-updates-batch-period=0s",
			"--mirroring-endpointslice-updates-batch-period=0s",
			"--concurrent-endpoint-syncs=10",
			"--concurrent-service-endpoint-syncs=10",
			"--mirroring-concurrent-service-endpoint-syncs=10",
		}
	})
	c.kcmHealthz = fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	return err
}

// startScheduler runs kube-scheduler for a cluster with a real node.
func (e *Env) startScheduler(c *Cluster, bin string, plane *envtest.ControlPlane) (err error) {
	c.scheduler, _, err = startComponent(c, plane, bin, "kube-scheduler", func(kubeconfig string) []string {
		return []string{"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig}
	})
	return err
}
