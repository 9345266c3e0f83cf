// Command kubeplane is etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kube-proxy in one binary, chosen by the name it is
// run as (symlinks) or by its first argument, as hyperkube once was. One binary
// shares one compile of the large common dependency tree, which keeps cold
// builds of the test control plane and node within CI's budget.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args
	if name == "kubeplane" && len(os.Args) > 1 {
		name, args = os.Args[1], os.Args[1:]
	}
	switch name {
	case "etcd":
		etcdmain.Main(args)
	case "kube-apiserver":
		os.Args = args
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Args = args
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Args = args
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kubelet":
		os.Args = args
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kube-proxy":
		os.Args = args
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	default:
		fmt.Fprintln(os.Stderr, "usage: kubeplane etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy [flags]")
		os.Exit(2)
	}
}
