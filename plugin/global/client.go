package global

import (
	"fmt"
	"runtime"

	"github.com/coredns/coredns/coremain"
	"github.com/globalmirror/globalmirror/kubeclient"
	"k8s.io/client-go/rest"
)

// How the plugin reaches the Kubernetes API: a kubeconfig named in the
// stanza, or the pod's in-cluster account.

// restConfig is the kubeconfig's client config, or the in-cluster one, set
// up as kubeclient.Configure does for both halves, with client-go's default
// rate limits (the plugin only lists and watches), over HTTP/1.1. A kubeconfig that cannot
// be loaded is an error naming the Corefile line.
//
// The second config is the first as the kubeconfig or the pod gave it,
// before any of the plugin's own settings: which API server and credentials
// (indexKey).
func restConfig(cfg *config) (*rest.Config, *rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.clientConfig != nil {
		if rc, err = cfg.clientConfig.ClientConfig(); err != nil {
			return nil, nil, fmt.Errorf("%s - Error during parsing: kubeconfig '%s': %w", cfg.kubeconfigAt, cfg.kubeconfig, err)
		}
	} else if rc, err = rest.InClusterConfig(); err != nil {
		return nil, nil, fmt.Errorf("in-cluster config (use the kubeconfig option outside a cluster): %w", err)
	}
	base := rc
	rc = kubeclient.Configure(rc, kubeclient.Options{
		UserAgent: fmt.Sprintf("%s/%s (%s/%s/%s) plugin/global", coremain.CoreName, coremain.CoreVersion, runtime.GOOS, runtime.GOARCH, runtime.Version()),
		Notify: func(err error) {
			if err != nil {
				log.Warningf("Kubernetes API refusing connections, answering from the last state and retrying: %v", err)
			} else {
				log.Info("Kubernetes API reachable again")
			}
		},
	})
	// Bounds what a relist has in flight (see kubeclient.HTTP1).
	kubeclient.HTTP1(rc)
	return rc, base, nil
}
