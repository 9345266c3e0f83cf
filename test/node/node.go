// Package node runs a real Kubernetes node for tests: containerd 2 with
// Debian's runc and CNI plugins (bridge, host-local, portmap, loopback),
// the kubelet and kube-proxy of the control plane's version, joined to a
// localkube cluster started with RealNodes, inside namespaces that Main made
// for the test binary. Pods run for real: the scheduler binds them, the
// kubelet starts them from images imported into containerd (no registry),
// probes them, writes their resolv.conf, and kube-proxy routes Service IPs.
//
// This machine's quirks, and the settings that meet them (DESIGN.md has the
// evidence): the host boots cgroup v1 (hybrid), which kubelet 1.35+ refuses
// unless failCgroupV1 is false, with the cgroupfs driver; processes lack
// CAP_SYS_RESOURCE, so containerd clamps the sandboxes' oom_score_adj
// (restrict_oom_score_adj) and the kubelet keeps its own (oomScoreAdj 0);
// kube-proxy leaves the host-wide conntrack table alone (maxPerCore 0, as
// kind and k3s do); kubelet's host-wide kernel settings are shown to it as
// files (kernelDefaults).
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The node's network, which exists only inside the test's namespaces.
const (
	// Name is the node's name and hostname.
	Name = "gm-node"
	// NodeIP is the node's address, on its uplink; a localkube cluster with
	// a real node listens on it (localkube.Options.NodeAddress).
	NodeIP = "198.51.100.1"
	// PodCIDR is where pods get their addresses, on the cni0 bridge.
	PodCIDR = "10.244.0.0/24"
	// ClusterDNS is the kube-dns Service's ClusterIP the kubelet writes into
	// pods' resolv.conf (in localkube's Service range).
	ClusterDNS = "10.96.0.10"
	// ClusterDomain is the kubelet's cluster domain.
	ClusterDomain = "cluster.local"

	uplink         = "gm-node"
	defaultGateway = "198.51.100.254" // no host has it
	// StateDir holds containerd's and the kubelet's state, on the tmpfs the
	// mount namespace has on /run: nothing of it outlives the test.
	StateDir = "/run/globalmirror-node"
)

// Environment the Makefile sets.
const (
	// ContainerdEnv names the directory holding containerd,
	// containerd-shim-runc-v2 and ctr (make node-tools).
	ContainerdEnv = "GLOBALMIRROR_CONTAINERD"
	// ImagesEnv names the directory of image archives (make node-images):
	// NAME.tar with NAME.ref, its image's name.
	ImagesEnv = "GLOBALMIRROR_NODE_IMAGES"
)

// Options configure Start.
type Options struct {
	// Cluster is the cluster the node joins, started with it in RealNodes.
	Cluster *localkube.Cluster
	// LogDir receives containerd's, the kubelet's and kube-proxy's logs.
	LogDir string
	// Images are the names of the archives in $GLOBALMIRROR_NODE_IMAGES to
	// import into containerd; "pause" is always imported.
	Images []string
}

// Node is a running node.
type Node struct {
	// Images maps each imported archive's name to its image's name.
	Images map[string]string

	opts       Options
	containerd *run.Process
	kubelet    *run.Process
	proxy      *run.Process
	upstream   *upstream
	bins       binaries
}

type binaries struct {
	containerd, ctr, kubelet, kubeProxy string
	// path is PATH with containerd's directory first, for its shim.
	path string
}

// Start starts containerd, imports the images, starts the kubelet and
// kube-proxy, and waits until the Node is Ready and kube-proxy healthy. On
// error it stops what it started.
func Start(ctx context.Context, opts Options) (n *Node, err error) {
	if !InNamespace() {
		return nil, errors.New("node: not inside the test's namespaces: call node.Main from TestMain")
	}
	if opts.Cluster == nil || opts.LogDir == "" {
		return nil, errors.New("node: Cluster and LogDir are required")
	}
	n = &Node{opts: opts, Images: map[string]string{}}
	if n.bins, err = findBinaries(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Stop()
			n = nil
		}
	}()
	for _, d := range []string{StateDir, opts.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return n, err
		}
	}
	if n.upstream, err = startUpstream(); err != nil {
		return n, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, fmt.Errorf("containerd: %w (log: %s)", err, n.logPath("containerd"))
	}
	for _, name := range append([]string{"pause"}, opts.Images...) {
		if err := n.importImage(ctx, name); err != nil {
			return n, fmt.Errorf("image %s: %w", name, err)
		}
	}
	if err := n.startKubelet(); err != nil {
		return n, fmt.Errorf("kubelet: %w", err)
	}
	if err := n.startProxy(); err != nil {
		return n, fmt.Errorf("kube-proxy: %w", err)
	}
	if err := n.waitReady(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// Stop stops kube-proxy, the kubelet and containerd, then kills what the
// pods still run, as a node that goes away: nothing of the node holds a
// connection to the API server when the cluster stops (its graceful stop
// waits for them).
func (n *Node) Stop() {
	for _, p := range []*run.Process{n.proxy, n.kubelet, n.containerd} {
		if p != nil {
			_ = p.StopWithin(10 * time.Second)
		}
	}
	killCgroupRoot(os.Getenv(cgroupEnv))
	if n.upstream != nil {
		n.upstream.stop()
	}
}

// LogTails are the last bytes of the node's logs, for a failure.
func (n *Node) LogTails(bytes int) string {
	var b strings.Builder
	for _, p := range []*run.Process{n.containerd, n.kubelet, n.proxy} {
		if p != nil {
			fmt.Fprintf(&b, "==> %s <==\n%s\n", p.LogPath, p.Log(bytes))
		}
	}
	return b.String()
}

func (n *Node) logPath(component string) string {
	return filepath.Join(n.opts.LogDir, component+".log")
}

func (n *Node) start(component, bin string, args ...string) (*run.Process, error) {
	return run.Start(bin, args, []string{"PATH=" + n.bins.path}, n.logPath(component))
}

func findBinaries() (binaries, error) {
	ctrd := os.Getenv(ContainerdEnv)
	assets := os.Getenv(localkube.AssetsEnv)
	if ctrd == "" || assets == "" {
		return binaries{}, fmt.Errorf("node: $%s and $%s are not set: run `make test-node`", ContainerdEnv, localkube.AssetsEnv)
	}
	b := binaries{
		containerd: filepath.Join(ctrd, "containerd"),
		ctr:        filepath.Join(ctrd, "ctr"),
		kubelet:    filepath.Join(assets, "kubelet"),
		kubeProxy:  filepath.Join(assets, "kube-proxy"),
		path:       ctrd + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	for _, p := range []string{b.containerd, b.ctr, filepath.Join(ctrd, "containerd-shim-runc-v2"), b.kubelet, b.kubeProxy, cniBinDir + "/bridge"} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("node: %w (run `make node-tools tools`)", err)
		}
	}
	for _, cmd := range []string{"runc", "iptables", "ip"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return b, fmt.Errorf("node: %s: %w (run `make node-tools`)", cmd, err)
		}
	}
	return b, nil
}

// waitReady waits for the kubelet to register the Node and report it Ready
// (its runtime and CNI network are up) and for kube-proxy's first sync.
func (n *Node) waitReady(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range []*run.Process{n.containerd, n.kubelet, n.proxy} {
			if done, err := p.Exited(); done {
				return false, fmt.Errorf("%s exited: %v (log: %s)", p.Name, err, p.LogPath)
			}
		}
		node, err := n.opts.Cluster.Client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := false
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status == corev1.ConditionTrue
				last = fmt.Sprintf("node %s Ready=%s: %s", Name, c.Status, c.Message)
			}
		}
		if !ready {
			return false, nil
		}
		// 503 until its first sync of Services and EndpointSlices.
		resp, err := http.Get("http://127.0.0.1:" + proxyHealthzPort + "/healthz")
		if err != nil {
			last = "kube-proxy: " + err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		resp.Body.Close()
		last = fmt.Sprintf("kube-proxy /healthz: %s %q", resp.Status, body)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("node not ready: %w; last: %s", err, last)
	}
	return nil
}
