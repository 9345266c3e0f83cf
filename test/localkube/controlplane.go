package localkube

import (
	"bytes"
	"cmp"
	"context"
	"debug/buildinfo"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/globalmirror/globalmirror/test/run"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// serviceCIDRs makes every cluster dual-stack, so that headless Services can
// carry IPv6 pod addresses. The ranges are data only: nothing routes them.
const serviceCIDRs = "10.96.0.0/16,fd00:10:96::/108"

const startTimeout = 90 * time.Second // three API servers on two busy cores

// binaries are the paths envtest runs. etcd and kube-apiserver go through a
// wrapper that makes them die with this process: envtest starts them in their
// own process group without a parent-death signal, so a test binary killed by
// `go test`'s timeout or ^C would otherwise leave them running.
type binaries struct {
	etcd, apiserver, controllerManager, scheduler string
	// release is the Kubernetes release the kube-apiserver was built from.
	release string
}

func newBinaries(assets, apiserver, dir string) (binaries, error) {
	b := binaries{
		etcd:              filepath.Join(assets, "etcd"),
		apiserver:         cmp.Or(apiserver, filepath.Join(assets, "kube-apiserver")),
		controllerManager: filepath.Join(assets, "kube-controller-manager"),
		scheduler:         filepath.Join(assets, "kube-scheduler"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return b, err
	}
	var err error
	if b.release, err = builtRelease(b.apiserver); err != nil {
		return b, err
	}
	if b.etcd, err = dyingWithUs(b.etcd, dir, "etcd"); err != nil {
		return b, err
	}
	b.apiserver, err = dyingWithUs(b.apiserver, dir, "kube-apiserver")
	return b, err
}

// nodeAuditPolicy records each pod created, with the pod as created and
// admission's annotations (Pod Security's audit level among them), and
// nothing else.
const nodeAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  verbs: [create]
  resources: [{group: "", resources: [pods]}]
- level: None
`

// builtRelease is the release of the k8s.io/kubernetes module bin was built
// from, as `go version -m` shows it: not its file name, nor a stamp.
func builtRelease(bin string) (string, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("localkube: which release is %s: %w", bin, err)
	}
	for _, d := range info.Deps {
		if d.Path == "k8s.io/kubernetes" {
			return d.Version, nil
		}
	}
	return "", fmt.Errorf("localkube: %s was not built from the k8s.io/kubernetes module", bin)
}

// dyingWithUs writes the wrapper of bin, named name in dir, and returns its
// path: exec keeps the PID, so the parent-death signal refers to us; the
// real binary keeps its name as argv[0], which selects the command of a
// multi-call binary.
func dyingWithUs(bin, dir, name string) (string, error) {
	setpriv, err := exec.LookPath("setpriv") // util-linux, essential on Debian
	if err != nil {
		return "", fmt.Errorf("localkube: setpriv (util-linux) is needed so that etcd and kube-apiserver die with their parent: %w", err)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("localkube: %w", err)
	}
	wrapper := filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\nexec %q --pdeathsig KILL -- %q \"$@\"\n", setpriv, bin)
	return wrapper, os.WriteFile(wrapper, []byte(script), 0o755)
}

func (e *Env) startEtcd(bins binaries, dataDir string) (*envtest.Etcd, error) {
	out, err := logFile(filepath.Dir(dataDir), "etcd")
	if err != nil {
		return nil, err
	}
	etcd := &envtest.Etcd{
		Path:         bins.etcd,
		DataDir:      dataDir,
		StartTimeout: startTimeout,
		StopTimeout:  10 * time.Second,
		Out:          out,
		Err:          out,
	}
	// etcd's largest recommended quota, not its 2 GiB default: before 1.34
	// the API server rewrites its Service range's whole bitmap (128 KiB for
	// a /12) at every ClusterIP it allocates, and etcd keeps each version
	// until the API server compacts (every 5 minutes), so loading Linkerd's
	// endpoint mirrors on 1.31 or 1.33 outgrows 2 GiB within minutes.
	etcd.Configure().Set("quota-backend-bytes", strconv.FormatInt(8<<30, 10))
	// No fsync: a test's etcd outlives no machine crash, and a write
	// waiting on the disk (shared with the builds beside a test) only
	// slows what the tests time. Its processes may still be killed: what
	// they wrote is in the page cache.
	etcd.Configure().Enable("unsafe-no-fsync")
	e.mu.Lock()
	e.closers = append(e.closers, out)
	e.etcds = append(e.etcds, etcd) // before Start: a half-started etcd is stopped too
	e.mu.Unlock()
	if err := etcd.Start(); err != nil {
		return nil, fmt.Errorf("etcd: %w (log: %s)", err, filepath.Join(filepath.Dir(dataDir), "etcd.log"))
	}
	e.log.Debug("etcd started", "url", etcd.URL.String(), "dir", dataDir)
	return etcd, nil
}

// startCluster starts the API server on etcd, provisions the admin user, starts
// kube-controller-manager and waits until the cluster is ready.
func (e *Env) startCluster(ctx context.Context, bins binaries, c *Cluster, etcd *envtest.Etcd, nodeAddr netip.Addr, serviceRanges string) error {
	start := time.Now()
	c.EtcdURL = etcd.URL
	out, err := logFile(c.dir, "kube-apiserver")
	if err != nil {
		return err
	}
	c.closers = append(c.closers, out)
	c.apis = &envtest.APIServer{
		Path:         bins.apiserver,
		CertDir:      filepath.Join(c.dir, "pki"),
		EtcdURL:      etcd.URL,
		StartTimeout: startTimeout,
		StopTimeout:  10 * time.Second,
		Out:          out,
		Err:          out,
	}
	if err := os.MkdirAll(c.apis.CertDir, 0o700); err != nil {
		return err
	}
	if err := c.configureAPIServer(c.apis, nodeAddr, serviceRanges); err != nil {
		return err
	}
	if err := c.apis.Start(); err != nil {
		return fmt.Errorf("kube-apiserver: %w (log: %s)", err, filepath.Join(c.dir, "kube-apiserver.log"))
	}
	plane := &envtest.ControlPlane{APIServer: c.apis}
	admin, err := plane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, &rest.Config{
		QPS: 1000, Burst: 2000, // tests are the only clients
		// Linkerd, and so the tests, use v1 Endpoints: their deprecation
		// warning is noise here.
		WarningHandler: rest.NoWarnings{},
	})
	if err != nil {
		return fmt.Errorf("admin user: %w", err)
	}
	c.Config = admin.Config()
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	if c.replicated {
		if err := c.startReplicas(nodeAddr, serviceRanges); err != nil {
			return err
		}
		// The kubeconfig names the first by its address alone (Config.Host
		// ends in a slash).
		primary := "server: https://" + net.JoinHostPort(c.apis.SecureServing.Address, c.apis.SecureServing.Port) + "\n"
		if !bytes.Contains(kubeconfig, []byte(primary)) {
			return fmt.Errorf("the admin kubeconfig does not name %q", primary)
		}
		kubeconfig = bytes.ReplaceAll(kubeconfig, []byte(primary), []byte("server: "+c.front.url+"\n"))
		c.Config.Host = c.front.url
	}
	c.Kubeconfig = filepath.Join(e.dir, c.Name+".kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if err := waitAPIReady(ctx, c.Client); err != nil {
		return fmt.Errorf("kube-apiserver /readyz: %w", err)
	}
	// The version matrix holds only if each run serves the release it
	// meant to: asked of the server, against what its binary was built from.
	if v, err := c.Client.Discovery().ServerVersion(); err != nil || v.GitVersion != bins.release {
		return fmt.Errorf("kube-apiserver %s was built from Kubernetes %s, but serves /version %+v (%v)", bins.apiserver, bins.release, v, err)
	}
	apiReady := time.Since(start)

	if err := e.startControllerManager(c, bins.controllerManager, plane); err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	if c.realNode {
		if err := e.startScheduler(c, bins.scheduler, plane); err != nil {
			return fmt.Errorf("kube-scheduler: %w", err)
		}
	} else if err := createNode(ctx, c.Client); err != nil {
		return err
	}
	if err := waitControllerManagerReady(ctx, c); err != nil {
		return fmt.Errorf("kube-controller-manager: %w (log: %s)", err, filepath.Join(c.dir, "kube-controller-manager.log"))
	}
	e.log.Info("cluster ready", "cluster", c.Name, "host", c.Config.Host, "kubeconfig", c.Kubeconfig,
		"apiserver", apiReady.Round(time.Millisecond), "total", time.Since(start).Round(time.Millisecond))
	return nil
}

// configureAPIServer gives apis, one of c's kube-apiservers, its port and
// arguments. The port is below the ephemeral range (envtest would pick one
// inside it): while the API server is down for a restart, no client socket
// can be given its port, which would keep it from listening again.
func (c *Cluster) configureAPIServer(apis *envtest.APIServer, nodeAddr netip.Addr, serviceRanges string) error {
	port, err := run.FreePort()
	if err != nil {
		return err
	}
	apis.SecureServing.Address, apis.SecureServing.Port = "127.0.0.1", strconv.Itoa(port)
	args := apis.Configure()
	if c.realNode {
		if apis.SecureServing.CA, err = writeNodePKI(apis.CertDir, nodeAddr); err != nil {
			return fmt.Errorf("serving certificate: %w", err)
		}
		apis.SecureServing.Address = nodeAddr.String()
		args.Set("advertise-address", nodeAddr.String())
		// The kubelet (exec, logs) by its address: its hostname is in no DNS.
		args.Set("kubelet-preferred-address-types", "InternalIP")
		policy := filepath.Join(c.dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(nodeAuditPolicy), 0o600); err != nil {
			return err
		}
		c.AuditLog = filepath.Join(c.dir, "audit.log")
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", c.AuditLog)
	} else {
		// Nothing would remove 127.0.0.1 from the `kubernetes` Endpoints, and
		// Endpoints reject loopback addresses anyway.
		args.Set("endpoint-reconciler-type", "none")
	}
	args.Set("etcd-prefix", "/registry/"+c.Name)
	args.Set("service-cluster-ip-range", serviceRanges)
	// envtest disables the ServiceAccount admission plugin because it runs no
	// controller manager; this one does, so pods need a ServiceAccount as in
	// a real cluster.
	args.Disable("disable-admission-plugins")
	args.Set("profiling", strconv.FormatBool(c.profiling))
	if c.reqTimeout > 0 {
		args.Set("request-timeout", c.reqTimeout.String())
	}
	return nil
}
