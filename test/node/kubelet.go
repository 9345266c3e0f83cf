package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

var (
	kubeletDir = filepath.Join(StateDir, "kubelet")
	proxyDir   = filepath.Join(StateDir, "kube-proxy")
	// upstreamResolvConf is the resolv.conf of pods with dnsPolicy Default
	// (the cluster DNS itself): its nameserver is the node's upstream.
	upstreamResolvConf = filepath.Join(StateDir, "resolv.conf")
)

const proxyHealthzPort = "10256"

// kubeletConfig is the KubeletConfiguration. Each setting that differs from
// kubeadm's defaults is there for this machine or for a test:
//   - failCgroupV1 false, cgroupDriver cgroupfs: the host boots cgroup v1;
//   - cgroupRoot: the node's own cgroups, which Main removes afterwards;
//   - failSwapOn false, oomScoreAdj 0 (no CAP_SYS_RESOURCE to lower it);
//   - evictionHard at 0 and image GC at 100%: the node's disk is a tmpfs
//     shared with the whole machine, and no image can be pulled again;
//   - authentication webhook and authorization AlwaysAllow: the API server
//     (exec, logs) is the only client on the namespace's network;
//   - podLogsDir, volumePluginDir: in the state directory, not the host's
//     /var/log/pods and /usr/libexec/kubernetes;
//   - syncFrequency 10s (1m by default): a changed ConfigMap reaches its
//     pods' volumes within seconds, not a minute (the CoreDNS patch test).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{{cgroupRoot}}
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://{{socket}}
clusterDNS: [{{clusterDNS}}]
clusterDomain: {{clusterDomain}}
resolvConf: {{resolvConf}}
podLogsDir: {{podLogs}}
volumePluginDir: {{volumePlugins}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
`

func (n *Node) startKubelet() error {
	root := os.Getenv(cgroupEnv)
	if root == "" {
		return fmt.Errorf("$%s is not set: Main makes the node's cgroup root", cgroupEnv)
	}
	config := strings.NewReplacer(
		"{{cgroupRoot}}", root, "{{socket}}", containerdSocket,
		"{{clusterDNS}}", ClusterDNS, "{{clusterDomain}}", ClusterDomain,
		"{{resolvConf}}", upstreamResolvConf, "{{podLogs}}", filepath.Join(StateDir, "pod-logs"),
		"{{volumePlugins}}", filepath.Join(kubeletDir, "volume-plugins"),
	).Replace(kubeletConfig)
	if err := os.WriteFile(upstreamResolvConf, []byte("nameserver "+NodeIP+"\n"), 0o644); err != nil {
		return err
	}
	configPath, err := writeConfig(kubeletDir, "config.yaml", config)
	if err != nil {
		return err
	}
	n.kubelet, err = n.start("kubelet", n.bins.kubelet,
		"--config="+configPath,
		// The node authenticates as a cluster admin: there is no Node
		// authorizer or bootstrap here. No pod sees this kubeconfig.
		"--kubeconfig="+n.opts.Cluster.Kubeconfig,
		"--root-dir="+kubeletDir,
		"--hostname-override="+Name,
		"--node-ip="+NodeIP,
		"--v=1",
	)
	return err
}

// proxyConfig is kube-proxy in iptables mode (Debian's iptables, nft
// backend), in the namespace's own tables, syncing as users run it (its
// default minSyncPeriod, 1 s: the lameduck margins are judged on that).
// conntrack maxPerCore 0 and zero timeouts leave the host-wide conntrack
// settings alone, as kind and k3s do.
const proxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {{kubeconfig}}
mode: iptables
hostnameOverride: {{node}}
clusterCIDR: {{podCIDR}}
healthzBindAddress: 127.0.0.1:{{healthz}}
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`

func (n *Node) startProxy() error {
	config := strings.NewReplacer(
		"{{kubeconfig}}", n.opts.Cluster.Kubeconfig, "{{node}}", Name,
		"{{podCIDR}}", PodCIDR, "{{healthz}}", proxyHealthzPort,
	).Replace(proxyConfig)
	configPath, err := writeConfig(proxyDir, "config.yaml", config)
	if err != nil {
		return err
	}
	n.proxy, err = n.start("kube-proxy", n.bins.kubeProxy, "--config="+configPath, "--v=1")
	return err
}

// writeConfig writes text to dir/name, making dir first, and returns the
// file's path.
func writeConfig(dir, name, text string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(text), 0o644)
}
