package localkube

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

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

func (e *Env) startControllerManager(c *Cluster, path string, plane *envtest.ControlPlane) error {
	user, err := plane.AddUser(envtest.User{Name: "system:kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	pki := c.apis.CertDir
	kubeconfigPath := filepath.Join(pki, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return err
	}
	caPath := filepath.Join(pki, "apiserver-ca.crt")
	if err := os.WriteFile(caPath, c.apis.SecureServing.CA, 0o600); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	c.kcmHealthz = fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	args := []string{
		"--kubeconfig=" + kubeconfigPath,
		"--controllers=" + strings.Join(controllers, ","),
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
	out, err := logFile(c.dir, "kube-controller-manager")
	if err != nil {
		return err
	}
	c.closers = append(c.closers, out)
	c.kcm, err = startProcess(path, args, out)
	return err
}

// process is a child that dies with us: its own process group, so that stop
// reaches its children too, and a parent-death signal for when we are killed.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startProcess(path string, args []string, out *os.File) (*process, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports, without blocking, whether the process has ended.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop asks the process group to terminate and kills it after a grace period.
func (p *process) stop() error {
	if done, _ := p.exited(); done {
		return nil
	}
	pgid := -p.cmd.Process.Pid
	if err := syscall.Kill(pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within 10s; killed", filepath.Base(p.cmd.Path))
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
