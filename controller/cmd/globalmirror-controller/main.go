// Command globalmirror-controller writes one global headless Service per base
// service, with the local pods and every Linkerd headless mirror's pods.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/globalmirror/globalmirror/controller"
	"github.com/globalmirror/globalmirror/controller/leader"
	"github.com/globalmirror/globalmirror/controller/metrics"
	"github.com/globalmirror/globalmirror/controller/options"
	"github.com/globalmirror/globalmirror/controller/server"
	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/source"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// component is the user agent and the events' source: the name of the
// controller's writes (controller.FieldManager).
const component = controller.FieldManager

func main() { os.Exit(run()) }

func run() int {
	opts, _, err := options.Parse(filepath.Base(os.Args[0]), os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: invalid flags:\n%v\n\nRun with --help for usage.\n", component, err)
		return 2
	}
	log := opts.Logger(os.Stderr)
	slog.SetDefault(log)
	klog.SetSlogLogger(log) // client-go (leader election, watches) logs the same way

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, opts, log); err != nil {
		log.Error("exiting", "err", err)
		return 1
	}
	log.Info("stopped", "cause", context.Cause(ctx))
	return 0
}

// serve runs until ctx ends (SIGTERM, SIGINT: nil once the Lease is
// released) or something fails (the error).
func serve(ctx context.Context, opts options.Options, log *slog.Logger) error {
	// A failing metrics server stops the leader gracefully too.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m := metrics.New()
	m.RegisterClientGo() // before the first client exists
	m.RegisterLeaderElection()

	base, err := restConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	cfg := kubeclient.Configure(base, kubeclient.Options{
		UserAgent: component,
		QPS:       opts.KubeAPIQPS,
		Burst:     opts.KubeAPIBurst,
		Notify: func(err error) {
			if err != nil {
				log.Warn("Kubernetes API refusing connections, retrying", "err", err)
			} else {
				log.Info("Kubernetes API reachable again")
			}
		},
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})

	links, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	feeds := source.Config{
		Client:        client,
		Links:         links,
		Namespaces:    opts.Namespaces,
		Suffix:        opts.Suffix,
		LocalSelector: opts.Selector(),
		API:           cfg,
		Counters:      m.Feeds.Counters,
	}
	src, err := source.New(feeds)
	if err != nil {
		return err
	}
	owned, err := controller.NewOwnedSlices(feeds)
	if err != nil {
		return err
	}
	ctrl, err := controller.New(controller.Config{
		Client:               client,
		Suffix:               opts.Suffix,
		MaxEndpointsPerSlice: opts.MaxEndpointsPerSlice,
		Recorder:             recorder,
		Metrics:              m,
		Logger:               log,
	}, src, owned)
	if err != nil {
		return err
	}
	_, serveErr, err := server.Serve(ctx, opts.MetricsAddr, server.Handler(m.Registry, ctrl.HasSynced), log)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	// Every replica runs the feeds, so /readyz means "caches synced" for
	// the leader and standbys alike, and a standby takes over with warm caches.
	ctrl.Start(ctx)

	lead := func(ctx context.Context) {
		if err := ctrl.Run(ctx, opts.Workers); err != nil && ctx.Err() == nil {
			log.Error("controller stopped", "err", err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		if !opts.LeaderElect {
			lead(ctx)
			errc <- nil
			return
		}
		errc <- leader.Run(ctx, leader.Config{
			Client:        client,
			Namespace:     opts.LeaseNamespace(),
			Name:          opts.LeaderElectID,
			LeaseDuration: opts.LeaseDuration,
			RenewDeadline: opts.RenewDeadline,
			RetryPeriod:   opts.RetryPeriod,
			Logger:        log,
		}, lead)
	}()
	// serveErr is closed when the server stops; an error comes first if it
	// failed. Either way, wait for the leader to release the Lease.
	go func() {
		if err, failed := <-serveErr; failed && err != nil {
			cancel(fmt.Errorf("metrics server: %w", err))
		}
	}()
	err = <-errc
	// A signal's cause Is context.Canceled; the server's failure is not.
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// restConfig uses --kubeconfig, else $KUBECONFIG, else the in-cluster account.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		kubeconfig = os.Getenv(clientcmd.RecommendedConfigPathEnvVar)
	}
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
	}
	return cfg, nil
}
