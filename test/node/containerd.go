package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

var (
	containerdDir    = filepath.Join(StateDir, "containerd")
	containerdSocket = filepath.Join(containerdDir, "containerd.sock")
	cniConfDir       = filepath.Join(StateDir, "cni", "net.d")
)

// containerdConfig is containerd 2's configuration (version 3): state in
// StateDir, the CRI with Debian's runc (cgroupfs, as the kubelet), Debian's
// CNI plugins and the locally made pause image. restrict_oom_score_adj: the
// CRI asks for -998 for sandboxes, which needs CAP_SYS_RESOURCE; clamped to
// containerd's own score, runc can set it. The opt plugin would install to
// /opt on the host.
const containerdConfig = `version = 3
root = "{{dir}}/root"
state = "{{dir}}/state"

[grpc]
  address = "{{socket}}"

[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{dir}}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{{pause}}"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  tolerate_missing_hugetlb_controller = true
  disable_hugetlb_controller = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{{cnibin}}"]
  conf_dir = "{{cniconf}}"
  max_conf_num = 1

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "{{runc}}"
  Root = "{{dir}}/runc"
  SystemdCgroup = false
`

// cniConfig is the pod network: a bridge on the node with host-local
// addresses from PodCIDR (its state in StateDir), hairpin so that a pod can
// reach itself through a Service, and portmap for hostPorts.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "gm-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "{{ipamdir}}",
        "ranges": [[{"subnet": "{{podcidr}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

func (n *Node) startContainerd(ctx context.Context) error {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return err
	}
	pause, err := imageRef("pause")
	if err != nil {
		return err
	}
	config := strings.NewReplacer(
		"{{dir}}", containerdDir, "{{socket}}", containerdSocket, "{{pause}}", pause,
		"{{cnibin}}", cniBinDir, "{{cniconf}}", cniConfDir, "{{runc}}", runc,
	).Replace(containerdConfig)
	cni := strings.NewReplacer("{{ipamdir}}", filepath.Join(StateDir, "cni", "ipam"), "{{podcidr}}", PodCIDR).Replace(cniConfig)
	configPath, err := writeConfig(containerdDir, "config.toml", config)
	if err != nil {
		return err
	}
	if _, err := writeConfig(cniConfDir, "10-gm-pods.conflist", cni); err != nil {
		return err
	}
	if n.containerd, err = n.start("containerd", n.bins.containerd, "--config", configPath); err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := n.containerd.Exited(); done {
			return false, fmt.Errorf("exited: %v", err)
		}
		_, last = n.ctr(ctx, "version")
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w: %w", err, last)
	}
	return err
}

// ctr runs containerd's client against this node's containerd, in the CRI's
// namespace.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, n.bins.ctr, append([]string{"--address", containerdSocket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// importImage imports archive name from $GLOBALMIRROR_NODE_IMAGES, unpacked
// for the CRI's snapshotter and pinned (the kubelet's image garbage
// collection never removes it), as kind loads images into its nodes.
func (n *Node) importImage(ctx context.Context, name string) error {
	ref, err := imageRef(name)
	if err != nil {
		return err
	}
	archive := filepath.Join(os.Getenv(ImagesEnv), name+".tar")
	if _, err := n.ctr(ctx, "images", "import", "--snapshotter", "overlayfs", "--label", "io.cri-containerd.pinned=pinned", archive); err != nil {
		return err
	}
	names, err := n.ctr(ctx, "images", "ls", "--quiet")
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(names), ref) {
		return fmt.Errorf("imported %s, but containerd has no %s; it has %s", archive, ref, strings.Fields(names))
	}
	n.Images[name] = ref
	return nil
}

// imageRef is the name of the image in archive name.
func imageRef(name string) (string, error) {
	dir := os.Getenv(ImagesEnv)
	if dir == "" {
		return "", fmt.Errorf("node: $%s is not set: run `make test-node`, which makes the images", ImagesEnv)
	}
	ref, err := os.ReadFile(filepath.Join(dir, name+".ref"))
	if err != nil {
		return "", fmt.Errorf("node: %w (run `make node-images`)", err)
	}
	return strings.TrimSpace(string(ref)), nil
}

// RuntimeSpec is the OCI runtime spec containerd ran the container id with
// (a container status's ID without its "containerd://"): what the CRI made
// of the pod's security context, seccomp profile included.
func RuntimeSpec(id string) ([]byte, error) {
	return os.ReadFile(filepath.Join(containerdDir, "state", "io.containerd.runtime.v2.task", "k8s.io", id, "config.json"))
}
