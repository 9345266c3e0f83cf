// Command globalmirror tells an operator whether an installation of
// globalmirror is right, and what one global service looks like:
//
//	globalmirror check [-o json]
//	globalmirror status [-o json] [NAMESPACE/]NAME
//
// (NAME alone: the context's namespace.)
// It only reads, as whoever runs it (--kubeconfig, --context). check exits
// 1 when a check fails.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/globalmirror/globalmirror/cli"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("globalmirror", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
	kubeContext := fs.String("context", "", "the kubeconfig context to use")
	output := fs.String("o", "text", "output: text or json")
	o := cli.DefaultOptions()
	fs.StringVar(&o.DNSService, "dns-service", o.DNSService, "the cluster DNS Service, NAMESPACE/NAME")
	fs.StringVar(&o.ControllerSelector, "controller-selector", o.ControllerSelector, "label selector of the controller's Deployment")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: globalmirror [flags] check | status [NAMESPACE/]NAME")
		fs.PrintDefaults()
	}
	// Flags may come before or after the command.
	var rest []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(rest) == 0 || (*output != "text" && *output != "json") {
		fs.Usage()
		return 2
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if *kubeconfig != "" {
		rules.ExplicitPath = *kubeconfig
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext})
	cfg, err := loader.ClientConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "globalmirror:", err)
		return 2
	}
	cfg.UserAgent = "globalmirror-cli"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "globalmirror:", err)
		return 2
	}
	ctx := context.Background()
	cl, err := cli.Discover(ctx, client, cfg, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "globalmirror:", err)
		return 1
	}
	switch rest[0] {
	case "check":
		rs := cli.Check(ctx, cl)
		if *output == "json" {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rs)
		} else {
			cli.WriteResults(os.Stdout, rs)
		}
		if cli.Failed(rs) {
			return 1
		}
		return 0
	case "status":
		if len(rest) != 2 {
			fs.Usage()
			return 2
		}
		ns, name, ok := strings.Cut(rest[1], "/")
		if !ok {
			// As kubectl: the context's namespace, else default.
			if ns, _, err = loader.Namespace(); err != nil {
				fmt.Fprintln(os.Stderr, "globalmirror:", err)
				return 2
			}
			name = rest[1]
		}
		st, err := cli.Status(ctx, cl, ns, name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "globalmirror:", err)
			return 1
		}
		if *output == "json" {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(st)
		} else {
			st.Write(os.Stdout)
		}
		return 0
	}
	fs.Usage()
	return 2
}
