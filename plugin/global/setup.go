package global

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/globalmirror/globalmirror/source"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const pluginName = "global"

var log = clog.NewWithPlugin(pluginName)

// startupTimeout is how long CoreDNS's start waits for the first sync, as the
// kubernetes plugin does; after it the server starts and answers SERVFAIL for
// global names until the sync completes.
const startupTimeout = 5 * time.Second

func init() { plugin.Register(pluginName, setup) }

func setup(c *caddy.Controller) error {
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return plugin.Error(pluginName, fmt.Errorf("kubernetes client: %w", err))
	}
	g, err := newFromClient(cfg, client)
	if err != nil {
		return plugin.Error(pluginName, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	c.OnStartup(func() error {
		g.start(ctx)
		deadline := time.Now().Add(startupTimeout)
		for !g.Ready() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !g.Ready() {
			log.Warning("starting server before the first sync with the Kubernetes API; global names get SERVFAIL until then")
		}
		return nil
	})
	c.OnShutdown(func() error {
		cancel()
		return nil
	})

	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		g.Next = next
		return g
	})
	return nil
}

// newFromClient builds the plugin and its informers (not yet started) on client.
func newFromClient(cfg *config, client kubernetes.Interface) (*Global, error) {
	idx := newIndex()
	src, err := source.New(source.Config{
		Client:        client,
		Namespaces:    cfg.namespaces,
		Suffix:        cfg.suffix,
		LocalSelector: cfg.localSelector,
	}, idx)
	if err != nil {
		return nil, err
	}
	idx.src = src
	return newGlobal(cfg, idx), nil
}

// start runs the informers and the index until ctx is done.
func (g *Global) start(ctx context.Context) {
	g.idx.src.Start(ctx)
	go g.idx.run(ctx)
}

// restConfig is the kubeconfig's client config, or the in-cluster one.
func restConfig(cfg *config) (*rest.Config, error) {
	rc := cfg.rest
	if rc == nil {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster config (use the kubeconfig option outside a cluster): %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.UserAgent = fmt.Sprintf("%s/%s (%s/%s/%s) plugin/global", coremain.CoreName, coremain.CoreVersion, runtime.GOOS, runtime.GOARCH, runtime.Version())
	return rc, nil
}

// kubeconfigRestConfig loads a kubeconfig file, with its current context or ctx.
func kubeconfigRestConfig(path, ctx string) (*rest.Config, error) {
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
		&clientcmd.ConfigOverrides{CurrentContext: ctx}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig '%s': %w", path, err)
	}
	return rc, nil
}
