// Command mirrorsim simulates Linkerd's multicluster service mirror (headless
// mode) between local clusters: see package mirrorsim and `mirrorsim --help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/mirrorsim"
)

const usage = `Usage: mirrorsim --source KUBECONFIG --target NAME=KUBECONFIG... [flags]

Mirrors the Services labelled mirror.linkerd.io/exported=true of each target
cluster into the source cluster, writing what Linkerd's service mirror writes
in headless mode: headless mirrors <svc>-<name>, endpoint mirrors
<host>-<name> whose Endpoints point at the target's gateway, and the headless
mirrors' Endpoints. Prints one line on stdout once every target is linked:

  mirrorsim: ready admin=http://127.0.0.1:PORT links=east,west

and runs until SIGINT or SIGTERM, leaving the mirrors in place.

`

type targets map[string]string

func (t targets) String() string { return fmt.Sprint(map[string]string(t)) }

func (t targets) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return errors.New("want NAME=KUBECONFIG")
	}
	if _, dup := t[name]; dup {
		return fmt.Errorf("target %s given twice", name)
	}
	t[name] = path
	return nil
}

func main() {
	fs := flag.NewFlagSet("mirrorsim", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\n"+adminUsage)
		fmt.Fprint(fs.Output(), "\n"+mirrorsim.Behaviours)
	}
	tgts := targets{}
	source := fs.String("source", "", "kubeconfig of the source cluster, where mirrors are written (required)")
	fs.Var(tgts, "target", "NAME=KUBECONFIG of a target cluster to link; repeatable")
	gatewayIP := fs.String("gateway-ip", "192.0.2.254", "address of the targets' gateways in mirror Endpoints (not loopback)")
	gatewayPort := fs.Int("gateway-port", 4143, "port of the targets' gateways")
	namespace := fs.String("namespace", "", "mirror only this namespace (default all)")
	domain := fs.String("cluster-domain", "cluster.local", "DNS domain of the target clusters")
	adminAddr := fs.String("admin-addr", "127.0.0.1:0", "listen address of the admin API; empty disables it")
	qps := fs.Float64("kube-api-qps", 5, "client QPS toward every cluster (client-go's default, which throttles Linkerd's writes to ~5/s under churn)")
	burst := fs.Int("kube-api-burst", 10, "client burst toward every cluster")
	verbose := fs.Bool("v", false, "log every reconcile that writes")
	_ = fs.Parse(os.Args[1:]) // ExitOnError
	if *source == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "mirrorsim: --source is required and no arguments are taken")
		fs.Usage()
		os.Exit(2)
	}
	gw, err := netip.ParseAddr(*gatewayIP)
	if err != nil || gw.IsLoopback() {
		fmt.Fprintf(os.Stderr, "mirrorsim: --gateway-ip %q: want a non-loopback address (Endpoints reject loopback)\n", *gatewayIP)
		os.Exit(2)
	}
	log := localkube.StderrLogger(*verbose)
	load := func(path string) (*rest.Config, error) {
		cfg, err := clientcmd.BuildConfigFromFlags("", path) // its current context
		if err != nil {
			return nil, err
		}
		cfg.QPS, cfg.Burst = float32(*qps), *burst
		return cfg, nil
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, load, *source, tgts, *adminAddr, mirrorsim.Options{
		GatewayIP: gw, GatewayPort: int32(*gatewayPort), ClusterDomain: *domain, Namespace: *namespace, Logger: log,
	}); err != nil {
		log.Error("mirrorsim failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, load func(string) (*rest.Config, error), source string, tgts targets, adminAddr string, opts mirrorsim.Options) error {
	srcCfg, err := load(source)
	if err != nil {
		return fmt.Errorf("--source: %w", err)
	}
	sim, err := mirrorsim.Start(ctx, srcCfg, opts)
	if err != nil {
		return err
	}
	defer sim.Stop()
	names := slices.Sorted(maps.Keys(tgts))
	for _, name := range names {
		cfg, err := load(tgts[name])
		if err != nil {
			return fmt.Errorf("--target %s: %w", name, err)
		}
		if err := sim.Link(ctx, name, cfg); err != nil {
			return err
		}
	}

	ready := "mirrorsim: ready"
	if adminAddr != "" {
		l, err := net.Listen("tcp", adminAddr)
		if err != nil {
			return fmt.Errorf("--admin-addr: %w", err)
		}
		srv := &http.Server{Handler: adminHandler(sim, load), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin API", "err", err)
			}
		}()
		defer srv.Close()
		ready += " admin=http://" + l.Addr().String()
	}
	fmt.Println(ready + " links=" + strings.Join(names, ","))
	<-ctx.Done()
	return nil
}
