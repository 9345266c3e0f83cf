// Command globalmirror tells an operator whether an installation of
// globalmirror is right, and what one global service looks like:
//
//	globalmirror check [flags]
//	globalmirror status [flags] [NAMESPACE/]NAME
//	globalmirror drain [flags] CLUSTER | --service NAMESPACE/NAME | --exported
//	globalmirror undrain [flags] CLUSTER | --service NAMESPACE/NAME | --exported
//
// (NAME alone: the context's namespace.) check and status only read, as
// whoever runs it (--kubeconfig, --context); drain and undrain write one
// annotation with the same rights. Each gives up after --timeout. check exits 1
// when a check fails (a warning does not); drain and undrain exit 1 when
// they could not write; status exits 1 when the global
// does not exist, 2 when the controller's objects are out of sync (a
// leftover of one that is gone included), and 3 when it could not be read. Both exit 64 (EX_USAGE) on a usage error,
// before any request.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/cli"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `globalmirror judges an installation of globalmirror and drains clusters for
maintenance, reading (and, for drain, writing) as whoever runs it.

  check                      judge the installation: the controller, the cluster DNS,
                             Linkerd's mirrors and every global service
  status [NAMESPACE/]NAME    one global service, member by member (-n NAMESPACE)
  drain CLUSTER              take a linked cluster's pods out of the shared names for
                             maintenance (--level all: out of every name); --service
                             NAMESPACE/NAME drains the local pods of one service;
                             --exported, run in the cluster under maintenance, its
                             pods of every service it exports, in every cluster that
                             links it; refused where a global would be left with no
                             ready endpoint (--force), --dry-run previews
  undrain CLUSTER            undo drain
  version                    the command's release, and both halves' (--client: its own)
  completion SHELL           a completion script for bash, zsh, fish or powershell

exit codes: check 0 passed (warnings allowed), 1 a check found it broken, 3 it
could not check everything; status 0 in sync, 1 no such global, 2 out of sync
(a leftover included), 3 could not be read; drain and undrain 0 written (or
already so, or a dry run), 1 not (refused, or failed); version 1 a half too
far from the command's release, 3 none read; 64 a usage error, before any
request.
`

// grace is how long past --timeout a command waits for what is still
// running to end by the timeout (each request has it too) before it reports
// without it: the command ends at --timeout, whatever it waits for.
const grace = 300 * time.Millisecond

// retryEvery is how often check --wait runs the checks again.
const retryEvery = 2 * time.Second

// exitUsage is sysexits' EX_USAGE: apart from every code that reports on
// the cluster.
const exitUsage = 64

// command is one subcommand's flags, and what it runs once they are read.
type command struct {
	fs          *pflag.FlagSet
	run         func(operands []string) int
	stdout      io.Writer
	kubeconfig  string
	kubeContext string
	namespace   string // status only: -n
	output      string
	timeout     time.Duration
	wait        time.Duration // check only
	opts        cli.Options
	name        string
	stderr      io.Writer
	// json: -o json was asked for: the parsed flag, or, where cobra
	// refused the flags, read from the arguments (asksJSON), so that a
	// usage error is one JSON value on stdout too.
	json bool
}

// newCommand is the cobra command name (its usage line use, its help
// short), with the flags every command has; its exit code goes to exit.
func newCommand(name, use, short string, stdout, stderr io.Writer, exit *int) (*command, *cobra.Command) {
	cmd := &cobra.Command{Use: use, Short: short}
	c := &command{fs: cmd.Flags(), stdout: stdout, stderr: stderr, name: name, opts: cli.DefaultOptions()}
	c.fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
	c.fs.StringVar(&c.kubeContext, "context", "", "the kubeconfig context to use")
	c.fs.StringVarP(&c.output, "output", "o", "text", "output: text or json")
	c.fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long, whatever is left (like kubectl's --request-timeout, for the whole run)")
	c.fs.StringVar(&c.opts.DNSService, "dns-service", c.opts.DNSService, "the cluster DNS Service, NAMESPACE/NAME")
	c.fs.StringVar(&c.opts.ControllerSelector, "controller-selector", c.opts.ControllerSelector, "label selector of the controller's Deployment")
	c.fs.StringVar(&c.opts.ControllerNamespace, "controller-namespace", "", "the controller's namespace, where check also looks for the chart's CoreDNS of a forwarded zone (default: look in every namespace, which needs a cluster-wide list of Deployments and Services)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RunE = func(_ *cobra.Command, operands []string) error {
		c.json = c.output == "json"
		if code, ok := c.validate(); !ok {
			*exit = code
			return nil
		}
		*exit = c.run(operands)
		return nil
	}
	return c, cmd
}

// validate judges the flags once read: 0 and true, or an exit code.
func (c *command) validate() (int, bool) {
	switch {
	case c.output != "text" && c.output != "json":
		return c.usageError("-o %q: want text or json", c.output), false
	case c.wait < 0:
		return c.usageError("--wait: want a duration of 0 or more"), false
	case c.timeout <= 0:
		return c.usageError("--timeout: want a positive duration"), false
	}
	if err := c.opts.Validate(); err != nil {
		return c.usageError("%v", err), false
	}
	return 0, true
}

// asksJSON reports whether args ask for -o json, however written.
func asksJSON(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-o" || a == "--output":
			if i+1 < len(args) && args[i+1] == "json" {
				return true
			}
		case a == "-o=json" || a == "--output=json" || a == "-ojson":
			return true
		}
	}
	return false
}

// usageError says msg on stderr and, under -o json, as the command's one
// JSON value on stdout too (check's report shape, or {"error": …}), and
// returns exitUsage.
func (c *command) usageError(format string, a ...any) int {
	msg := fmt.Sprintf(format, a...)
	fmt.Fprintln(c.stderr, msg)
	switch {
	case !c.json:
	case c.name == "check":
		writeJSON(c.stdout, cli.Report{SchemaVersion: cli.SchemaVersion, Error: "usage: " + msg, Checks: []cli.Result{}})
	default:
		writeJSON(c.stdout, map[string]string{"error": "usage: " + msg})
	}
	return exitUsage
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	exit := 0
	root := &cobra.Command{Use: "globalmirror", Short: "judge and operate an installation of globalmirror", Long: usage,
		SilenceErrors: true, SilenceUsage: true}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(checkCommand(stdout, stderr, &exit), statusCommand(stdout, stderr, &exit),
		drainCommand(true, stdout, stderr, &exit), drainCommand(false, stdout, stderr, &exit), versionCommand(stdout, stderr, &exit))
	if err := root.Execute(); err != nil {
		// cobra's: an unknown command or flag, a flag's bad value.
		fmt.Fprintf(stderr, "globalmirror: %v\n\n%s", err, usage)
		c := &command{stdout: stdout, stderr: io.Discard, name: args[0], json: asksJSON(args)}
		return c.usageError("%v", err)
	}
	return exit
}

// loader loads the kubeconfig and context the flags name.
func (c *command) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.kubeContext})
}

// restConfig is the kubeconfig's client configuration, every request
// bounded by the timeout.
func (c *command) restConfig() (*rest.Config, error) {
	cfg, err := c.loader().ClientConfig()
	if err != nil {
		return nil, err
	}
	return cli.CommandConfig(cfg, c.timeout), nil
}

// connect loads the kubeconfig, bounds every request by the timeout, and
// finds the installation; an error means the API server did not answer.
func (c *command) connect(ctx context.Context) (*cli.Cluster, clientcmd.ClientConfig, error) {
	loader := c.loader()
	cfg, err := c.restConfig()
	if err == nil {
		cfg, err = cli.Credentials(ctx, cfg)
	}
	if err != nil {
		return nil, loader, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, loader, err
	}
	cl, err := cli.Discover(ctx, client, cfg, c.opts)
	return cl, loader, err
}

func checkCommand(stdout, stderr io.Writer, exit *int) *cobra.Command {
	c, cmd := newCommand("check", "check [flags]", "judge the installation: the controller, the cluster DNS, Linkerd's mirrors and every global service", stdout, stderr, exit)
	c.fs.DurationVar(&c.wait, "wait", 0, "run the checks again until every one passes, for at most this long (each run bounded by --timeout): right after an install or an upgrade")
	c.run = c.check
	return cmd
}

func (c *command) check(operands []string) int {
	stdout := c.stdout
	if len(operands) > 0 {
		return c.usageError("globalmirror check takes no arguments, got %q", operands)
	}
	// --wait: a failed run again, each with its own --timeout, until one
	// passes or the wait is over; only the last is written.
	giveUp := time.Now().Add(c.wait)
	var report cli.Report
	for {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		report = cli.RunCheck(ctx, grace, func(ctx context.Context) (*cli.Cluster, error) {
			cl, _, err := c.connect(ctx)
			return cl, err
		})
		cancel()
		if report.Success || !time.Now().Before(giveUp) {
			break
		}
		time.Sleep(min(retryEvery, time.Until(giveUp)))
	}
	if c.output == "json" {
		writeJSON(stdout, report)
	} else {
		cli.WriteResults(stdout, report)
	}
	return report.ExitCode()
}

func statusCommand(stdout, stderr io.Writer, exit *int) *cobra.Command {
	c, cmd := newCommand("status", "status [flags] [NAMESPACE/]NAME", "one global service, member by member", stdout, stderr, exit)
	c.fs.StringVarP(&c.namespace, "namespace", "n", "", "the namespace of NAME (default: the context's, as kubectl)")
	c.run = c.statusOf
	return cmd
}

func (c *command) statusOf(operands []string) int {
	stdout, stderr := c.stdout, c.stderr
	var code int
	if len(operands) != 1 {
		return c.usageError("globalmirror status takes one global service, [NAMESPACE/]NAME, got %d arguments", len(operands))
	}
	if msg := invalidGlobalName(operands[0]); msg != "" {
		return c.usageError("globalmirror status %q: %s", operands[0], msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// Written only once it has ended: a status cut off by the timeout
	// prints nothing of it.
	var out, errOut bytes.Buffer
	ended, panicked := cli.Bounded(ctx, grace, func() { code = c.status(ctx, operands[0], &out, &errOut) })
	switch {
	case !ended:
		return c.cannotRead(stdout, stderr, "no answer before the timeout: neither the API server nor the kubeconfig's credential plugin (users[].user.exec) answered in time")
	case panicked != nil:
		out.Reset()
		code = c.cannotRead(&out, &errOut, fmt.Sprintf("internal error: %v (a bug: please report it with this output)", panicked))
	}
	_, _ = io.Copy(stdout, &out)
	_, _ = io.Copy(stderr, &errOut)
	return code
}

// invalidGlobalName says why arg is not [NAMESPACE/]NAME of a Service, or
// "" when it is: a namespace and a Service name are DNS labels.
func invalidGlobalName(arg string) string {
	ns, name, qualified := strings.Cut(arg, "/")
	if !qualified {
		ns, name = "", arg
	} else if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "the namespace: " + strings.Join(errs, "; ")
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return "the Service name: " + strings.Join(errs, "; ")
	}
	return ""
}

// status reads and writes the status of the global arg names.
func (c *command) status(ctx context.Context, arg string, stdout, stderr io.Writer) int {
	cl, loader, err := c.connect(ctx)
	if err != nil {
		return c.cannotRead(stdout, stderr, err.Error())
	}
	ns, name, ok := strings.Cut(arg, "/")
	switch {
	case ok:
	case c.namespace != "":
		ns, name = c.namespace, arg
	default:
		// As kubectl: the context's namespace, else default.
		if ns, _, err = loader.Namespace(); err != nil {
			return c.cannotRead(stdout, stderr, err.Error())
		}
		name = arg
	}
	st, err := cli.Status(ctx, cl, ns, name)
	if err != nil {
		return c.cannotRead(stdout, stderr, err.Error())
	}
	if c.output == "json" {
		writeJSON(stdout, st)
	} else {
		st.Write(stdout)
	}
	return statusCode(st)
}

// cannotRead says why status could not read the global, on stderr and,
// under -o json, as {"error": ...} on stdout too: a script that reads stdout
// gets one JSON value whatever happened. It is status's exit code 3.
func (c *command) cannotRead(stdout, stderr io.Writer, msg string) int {
	fmt.Fprintln(stderr, "globalmirror:", msg)
	if c.output == "json" {
		writeJSON(stdout, map[string]string{"error": msg})
	}
	return 3
}

// statusCode is status's exit code for what it found: 2 the controller's
// objects out of sync (a leftover of a global that is gone included, which
// the controller has yet to delete), 1 no such global, 0 neither.
func statusCode(st *cli.GlobalStatus) int {
	switch {
	case !st.InSync:
		return 2
	case !st.Exists:
		return 1
	}
	return 0
}

// drain writes, or with on false removes, the drain annotation of a Link
// or a local member service.
func drainCommand(on bool, stdout, stderr io.Writer, exit *int) *cobra.Command {
	name := map[bool]string{true: "drain", false: "undrain"}[on]
	short := map[bool]string{true: "take a linked cluster's pods (or a service's) out of the shared names for maintenance", false: "undo drain"}[on]
	c, cmd := newCommand(name, name+" [flags] CLUSTER | --service NAMESPACE/NAME | --exported", short, stdout, stderr, exit)
	target := cli.DrainTarget{}
	level := aggregate.DrainSharedValue
	if on {
		c.fs.StringVar(&level, "level", level, "shared: out of every shared name, each pod's own names still answering; all: out of every name, as if unlinked")
	}
	c.fs.StringVar(&target.LinkNamespace, "link-namespace", cli.DefaultLinkNamespace, "the namespace of Linkerd's Links")
	c.fs.StringVar(&target.Service, "service", "", "a local member service, NAMESPACE/NAME, whose local pods to "+name+" instead of a linked cluster")
	c.fs.BoolVar(&target.Exported, "exported", false, "every headless service this cluster exports: its pods "+map[bool]string{true: "out", false: "back"}[on]+" here and, through Linkerd's copy of the annotation onto its mirrors, in every cluster that links this one")
	var dryRun, force bool
	c.fs.BoolVar(&dryRun, "dry-run", false, "print which globals' shared names lose (or regain) which endpoints, and write nothing")
	if on {
		c.fs.BoolVar(&force, "force", false, "drain even where a global would be left with no ready endpoint (refused without it), or where that cannot be judged")
	}
	if on {
		_ = cmd.RegisterFlagCompletionFunc("level", cobra.FixedCompletions([]string{aggregate.DrainSharedValue, aggregate.DrainAllValue}, cobra.ShellCompDirectiveNoFileComp))
	}
	c.run = func(operands []string) int { return c.drain(operands, on, name, level, target, dryRun, force) }
	return cmd
}

// drain writes the drain of target, or with on false removes it.
func (c *command) drain(operands []string, on bool, name, level string, target cli.DrainTarget, dryRun, force bool) int {
	stdout, stderr := c.stdout, c.stderr
	d, err := aggregate.ParseDrain(level)
	if err != nil || d == aggregate.NotDrained {
		return c.usageError("--level %q: want %s or %s", level, aggregate.DrainSharedValue, aggregate.DrainAllValue)
	}
	if !on {
		d = aggregate.NotDrained
	}
	switch {
	case (target.Service != "" || target.Exported) && len(operands) > 0, target.Service != "" && target.Exported:
		return c.usageError("globalmirror %s: one of a CLUSTER, --service and --exported", name)
	case target.Exported: // every exported service: nothing to check
	case target.Service != "":
		if ns, svc, ok := strings.Cut(target.Service, "/"); !ok || invalidGlobalName(target.Service) != "" || ns == "" || svc == "" {
			return c.usageError("globalmirror %s --service %q: want NAMESPACE/NAME of a Service", name, target.Service)
		}
	case len(operands) != 1:
		return c.usageError("globalmirror %s takes one linked cluster's name, got %d arguments", name, len(operands))
	default:
		if errs := validation.IsDNS1123Label(operands[0]); len(errs) > 0 {
			return c.usageError("globalmirror %s %q: a cluster name is a DNS label: %s", name, operands[0], strings.Join(errs, "; "))
		}
		target.Cluster = operands[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	cl, _, err := c.connect(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "globalmirror:", err)
		return 1
	}
	client, cfg := cl.Client, cl.Config
	// Judged before anything is written: a drain that would leave a global
	// with no ready endpoint is refused unless forced; --dry-run stops here.
	if on && !force || dryRun {
		preview, err := cli.PreviewOf(ctx, cl, target, d)
		switch {
		case err != nil && dryRun:
			fmt.Fprintf(stderr, "globalmirror %s --dry-run: %v\n", name, err)
			return 1
		case err != nil:
			fmt.Fprintf(stderr, "globalmirror %s: could not judge whether a global would be left with no ready endpoint: %v\nNothing was written; --force drains without that judgement.\n", name, err)
			return 1
		case dryRun:
			if c.output == "json" {
				writeJSON(stdout, preview)
			} else {
				preview.Write(stdout)
				fmt.Fprintf(stdout, "Dry run: nothing was written.")
				if on {
					fmt.Fprintf(stdout, " Once written, undo with: %s", target.Undo())
				}
				fmt.Fprintln(stdout)
			}
			return 0
		case len(preview.Left) > 0:
			if c.output == "json" {
				writeJSON(stdout, preview)
			}
			preview.Write(stderr)
			fmt.Fprintf(stderr, "globalmirror %s: refused: %s would be left with no ready endpoint anywhere. Nothing was written; --force drains anyway.\n", name, strings.Join(preview.Left, ", "))
			return 1
		}
	}
	if target.Exported {
		all, err := cli.DrainExported(ctx, client, cfg, d)
		if c.output == "json" {
			writeJSON(stdout, all)
		} else {
			for _, w := range all {
				_, svc, _ := strings.Cut(w.Object, " ")
				w.Write(stdout, cli.DrainTarget{Service: svc, Exported: true})
			}
			if err == nil && on {
				fmt.Fprintln(stdout, "Every cluster that links this one follows once Linkerd has copied the annotation onto its mirrors (seconds). Undo: globalmirror undrain --exported")
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "globalmirror %s --exported: %v\n", name, err)
			return 1
		}
		return 0
	}
	written, err := cli.Drain(ctx, client, cfg, target, d)
	if err != nil {
		fmt.Fprintf(stderr, "globalmirror %s: %v\n", name, err)
		return 1
	}
	if c.output == "json" {
		writeJSON(stdout, written)
	} else {
		written.Write(stdout, target)
	}
	return 0
}

// versionCommand says the command's release, and those both halves run in
// the cluster, judged as check judges them.
func versionCommand(stdout, stderr io.Writer, exit *int) *cobra.Command {
	c, cmd := newCommand("version", "version [flags]", "the command's release, and both halves' in the cluster, their skew judged as check does", stdout, stderr, exit)
	var clientOnly bool
	c.fs.BoolVar(&clientOnly, "client", false, "the command's release alone: read nothing of a cluster")
	c.run = func(operands []string) int {
		if len(operands) > 0 {
			return c.usageError("globalmirror version takes no arguments, got %q", operands)
		}
		v, code := cli.CommandVersions(), 0
		if !clientOnly {
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			var read cli.Versions
			ended, panicked := cli.Bounded(ctx, grace, func() {
				cl, _, err := c.connect(ctx)
				if err != nil {
					read = v
					read.Unread = []string{"the API server: " + err.Error()}
					return
				}
				read = cli.ReadVersions(ctx, cl)
			})
			switch {
			case !ended || panicked != nil:
				v.Unread = []string{fmt.Sprintf("the cluster: no answer before the timeout (%v)", panicked)}
				code = 3
			case read.Controller == nil && read.ClusterDNS == nil:
				v, code = read, 3
			default:
				v = read
				if v.Skew.Result == cli.Error {
					code = 1
				}
			}
		}
		if c.output == "json" {
			writeJSON(c.stdout, v)
		} else {
			v.Write(c.stdout)
			for _, u := range v.Unread {
				fmt.Fprintln(c.stderr, "globalmirror: could not read", u)
			}
		}
		return code
	}
	return cmd
}

func writeJSON(out io.Writer, v any) {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
