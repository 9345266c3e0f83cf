// Command localkube runs named local Kubernetes clusters (etcd, kube-apiserver
// and kube-controller-manager each, on loopback) in the foreground, for the
// demo and for poking at by hand. See `localkube up --help`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/globalmirror/globalmirror/test/localkube"
)

const usage = `Usage: localkube up [--clusters source,east,west] --dir DIR [-v]

Starts one local Kubernetes cluster per name: etcd, kube-apiserver and
kube-controller-manager (endpoints, endpointslice, endpointslice-mirroring,
garbage-collector, namespace and serviceaccount controllers), on free loopback
ports, with one Ready Node "node-1" and no kubelet. The binaries come from
$GLOBALMIRROR_KUBE_ASSETS (built by "make tools").

It writes DIR/<name>.kubeconfig (cluster admin) for each cluster and the
control plane logs to DIR/<name>/*.log, prints one line on stdout when every
cluster is ready:

  localkube: ready source=DIR/source.kubeconfig east=DIR/east.kubeconfig ...

and runs until SIGINT or SIGTERM, then stops everything and removes the state
and the kubeconfigs, keeping the logs.

Flags:
`

func main() {
	fs := flag.NewFlagSet("localkube up", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	clusters := fs.String("clusters", "source,east,west", "comma-separated cluster names (DNS labels)")
	dir := fs.String("dir", "", "directory for kubeconfigs, logs and state (required)")
	verbose := fs.Bool("v", false, "log progress to stderr")
	if len(os.Args) < 2 || os.Args[1] != "up" {
		if len(os.Args) == 2 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return
		}
		fs.Usage()
		os.Exit(2)
	}
	_ = fs.Parse(os.Args[2:]) // ExitOnError
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "localkube up: --dir is required and no arguments are taken")
		fs.Usage()
		os.Exit(2)
	}
	logger := localkube.StderrLogger(*verbose)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	env, err := localkube.Start(ctx, localkube.Options{Clusters: strings.Split(*clusters, ","), Dir: *dir, Logger: logger})
	if err != nil {
		logger.Error("start failed", "err", err)
		os.Exit(1)
	}
	line := []string{"localkube: ready"}
	for _, c := range env.Clusters() {
		line = append(line, c.Name+"="+c.Kubeconfig)
	}
	fmt.Println(strings.Join(line, " "))

	<-ctx.Done()
	stop() // a second signal kills at once; the children die with us
	if err := env.Stop(); err != nil {
		logger.Error("stop failed", "err", err)
		os.Exit(1)
	}
}
