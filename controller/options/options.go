// Package options defines the controller's command-line flags and checks them.
package options

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Options are the controller's settings.
type Options struct {
	Kubeconfig           string
	Namespaces           []string
	Suffix               string
	LocalSelector        string
	MaxEndpointsPerSlice int
	KubeAPIQPS           float32
	KubeAPIBurst         int
	Workers              int

	LeaderElect          bool
	LeaderElectNamespace string
	LeaderElectID        string
	LeaseDuration        time.Duration
	RenewDeadline        time.Duration
	RetryPeriod          time.Duration

	MetricsAddr string
	LogFormat   string
	LogLevel    string
}

// Default returns the defaults the flags show.
func Default() Options {
	return Options{
		Suffix:               aggregate.DefaultSuffix,
		LocalSelector:        aggregate.DefaultLocalSelector,
		MaxEndpointsPerSlice: 100,
		// No client-side limit: the workers bound what is in flight (one
		// request each), and the API server's Priority and Fairness shares
		// it between flows; as controller-runtime does since v0.21, on SIG
		// API Machinery's advice. A limit of 20 a second made a 1,000-global
		// drain's last slice 42 s late; 4 workers, 3.4 times a plain
		// writer's time (the bench's storms).
		KubeAPIQPS:    -1,
		KubeAPIBurst:  40,
		Workers:       16,
		LeaderElect:   true,
		LeaderElectID: "globalmirror-controller",
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
		MetricsAddr:   ":8080",
		LogFormat:     "text",
		LogLevel:      "info",
	}
}

// AddFlags binds o to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"Path to a kubeconfig. Empty: $KUBECONFIG if set, else the in-cluster service account.")
	fs.StringSliceVar(&o.Namespaces, "namespaces", o.Namespaces,
		"Comma-separated namespaces to watch and write global services in. Empty: all namespaces.")
	fs.StringVar(&o.Suffix, "suffix", o.Suffix,
		"Appended to a base service name to form its global service name (db -> db-global).")
	fs.StringVar(&o.LocalSelector, "local-selector", o.LocalSelector,
		"Label selector for the local headless Service of a base (named like the base) whose endpoints join the global service. "+
			aggregate.NoLocalSelector+": local services never join, only mirrors of remote clusters.")
	fs.IntVar(&o.MaxEndpointsPerSlice, "max-endpoints-per-slice", o.MaxEndpointsPerSlice,
		"Most endpoints written into one global EndpointSlice (1-1000).")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Steady requests per second to the API server; negative: no client-side limit (the workers bound what is in flight, the API server's Priority and Fairness shares it).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Requests allowed in a burst above a positive --kube-api-qps.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Base services synced in parallel.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect,
		"Elect a leader through a Lease so only one replica writes; the others keep warm caches and take over when it stops renewing.")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", o.LeaderElectNamespace,
		"Namespace of the leader-election Lease. Empty: $POD_NAMESPACE, else the service account's namespace, else default.")
	fs.StringVar(&o.LeaderElectID, "leader-elect-id", o.LeaderElectID, "Name of the leader-election Lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration,
		"How long standbys wait after the last renewal before taking over a leader that stopped renewing.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline,
		"How long the leader keeps trying to renew before it gives up leadership (and exits).")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "How often candidates try to acquire or renew the Lease.")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr,
		"host:port serving /metrics, /healthz and /readyz (ready once every feed has listed, on leaders and standbys alike).")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "Log format: text or json.")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "Lowest level logged: debug, info, warn or error.")
}

// Parse parses args (without the program name) over the defaults. A help
// request returns pflag.ErrHelp after the usage was printed to fs's output.
func Parse(name string, args []string) (Options, *pflag.FlagSet, error) {
	o := Default()
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	o.AddFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s keeps one headless Service <base>%s, with EndpointSlices of the local pods and\n"+
			"every Linkerd headless mirror's pods, for each base service that has at least one headless mirror.\n\n"+
			"Usage: %s [flags]\n\nFlags:\n%s", name, aggregate.DefaultSuffix, name, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return o, fs, err
	}
	if fs.NArg() > 0 {
		return o, fs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return o, fs, o.Validate()
}

// Validate checks every option and reports all mistakes at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	for _, ns := range o.Namespaces {
		if err := aggregate.ValidateNamespace(ns); err != nil {
			bad("--namespaces: %q: %v", ns, err)
		}
	}
	if err := aggregate.ValidateSuffix(o.Suffix); err != nil {
		bad("--suffix %q: %v", o.Suffix, err)
	}
	if _, err := aggregate.ParseLocalSelector(o.LocalSelector); err != nil {
		bad("--local-selector %q: %v", o.LocalSelector, err)
	}
	if o.MaxEndpointsPerSlice < 1 || o.MaxEndpointsPerSlice > 1000 {
		bad("--max-endpoints-per-slice must be between 1 and 1000 (the API's limit), not %d", o.MaxEndpointsPerSlice)
	}
	if o.KubeAPIQPS == 0 {
		bad("--kube-api-qps 0 would be client-go's 5 a second: give a rate, or a negative value for no client-side limit")
	}
	if o.KubeAPIQPS > 0 && o.KubeAPIBurst < 1 {
		bad("--kube-api-burst must be at least 1, not %d", o.KubeAPIBurst)
	}
	if o.Workers < 1 {
		bad("--workers must be at least 1, not %d", o.Workers)
	}
	if o.LeaderElect {
		if msgs := validation.IsDNS1123Subdomain(o.LeaderElectID); len(msgs) > 0 {
			bad("--leader-elect-id %q is not a Lease name: %s", o.LeaderElectID, msgs[0])
		}
		if o.LeaderElectNamespace != "" {
			if msgs := validation.IsDNS1123Label(o.LeaderElectNamespace); len(msgs) > 0 {
				bad("--leader-elect-namespace %q is not a namespace name: %s", o.LeaderElectNamespace, msgs[0])
			}
		}
		if o.RetryPeriod <= 0 {
			bad("--leader-elect-retry-period must be positive")
		}
		// client-go's own rules, said in flag names.
		if o.LeaseDuration <= o.RenewDeadline {
			bad("--leader-elect-lease-duration (%v) must be longer than --leader-elect-renew-deadline (%v)", o.LeaseDuration, o.RenewDeadline)
		}
		if float64(o.RenewDeadline) <= 1.2*float64(o.RetryPeriod) {
			bad("--leader-elect-renew-deadline (%v) must be longer than 1.2 x --leader-elect-retry-period (%v)", o.RenewDeadline, o.RetryPeriod)
		}
	}
	if _, port, err := net.SplitHostPort(o.MetricsAddr); err != nil || port == "" {
		bad("--metrics-addr %q must be host:port (e.g. :8080)", o.MetricsAddr)
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		bad("--log-format must be text or json, not %q", o.LogFormat)
	}
	if _, err := o.Level(); err != nil {
		bad("--log-level: %v", err)
	}
	return errors.Join(errs...)
}

// Selector is the local selector, nil when local services are left out.
func (o Options) Selector() labels.Selector {
	sel, err := aggregate.ParseLocalSelector(o.LocalSelector)
	if err != nil {
		return nil // Validate reported it
	}
	return sel
}

// LeaseNamespace resolves --leader-elect-namespace.
func (o Options) LeaseNamespace() string {
	if o.LeaderElectNamespace != "" {
		return o.LeaderElectNamespace
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}
