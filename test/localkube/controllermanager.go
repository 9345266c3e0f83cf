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
// what Deployments, StatefulSets, a ServiceAccount token's kube-root-ca.crt
// and a Node's not-ready taint need.
var nodeControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"statefulset-controller",
	"disruption-controller",
	"root-ca-certificate-publisher-controller",
	"node-lifecycle-controller",
	"taint-eviction-controller",
	"pod-garbage-collector-controller",
}

// writeKubeconfig writes <pki>/<user>.kubeconfig for a control plane
// component, a member of system:masters.
func writeKubeconfig(c *Cluster, plane *envtest.ControlPlane, user string) (string, error) {
	u, err := plane.AddUser(envtest.User{Name: "system:" + user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.apis.CertDir, user+".kubeconfig")
	return path, os.WriteFile(path, kubeconfig, 0o600)
}

func (e *Env) startControllerManager(c *Cluster, path string, plane *envtest.ControlPlane) error {
	kubeconfigPath, err := writeKubeconfig(c, plane, "kube-controller-manager")
	if err != nil {
		return err
	}
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
	port, err := run.FreePort()
	if err != nil {
		return err
	}
	c.kcmHealthz = fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	args := []string{
		"--kubeconfig=" + kubeconfigPath,
		"--controllers=" + strings.Join(names, ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
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
		"--profiling=false",
	}
	c.kcm, err = run.Start(path, args, nil, filepath.Join(c.dir, "kube-controller-manager.log"))
	return err
}

// startScheduler runs kube-scheduler for a cluster with a real node.
func (e *Env) startScheduler(c *Cluster, path string, plane *envtest.ControlPlane) error {
	kubeconfig, err := writeKubeconfig(c, plane, "kube-scheduler")
	if err != nil {
		return err
	}
	port, err := run.FreePort()
	if err != nil {
		return err
	}
	c.scheduler, err = run.Start(path, []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--profiling=false",
	}, nil, filepath.Join(c.dir, "kube-scheduler.log"))
	return err
}
