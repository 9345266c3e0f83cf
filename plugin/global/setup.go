package global

import (
	"fmt"
	"github.com/globalmirror/globalmirror/kubeclient"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/plugin/pkg/fall"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const pluginName = "global"

var log = clog.NewWithPlugin(pluginName)

// startupTimeout is how long CoreDNS's first start waits for an index's
// first sync, as the kubernetes plugin does; after it the servers start, and
// answer SERVFAIL for global names, not ready (Ready), until the sync
// completes. A reload waits handover_timeout instead, while the old instance
// answers.
const startupTimeout = 5 * time.Second

// handover_timeout's default and upper bound.
const (
	defaultHandoverTimeout = 60 * time.Second
	maxHandoverTimeout     = time.Hour
)

func init() { plugin.Register(pluginName, setup) }

func setup(c *caddy.Controller) error {
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	rc, base, err := restConfig(cfg)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	cfg.api = rc

	g := newGlobal(cfg, nil)
	joinInstance(c, g)
	inst := g.inst
	ix, reused, err := acquireIndex(inst, indexKey(cfg, base), func() (*dnsController, error) {
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		return newController(cfg, client)
	})
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	g.ctrl = ix.ctrl
	// A reload that fails after this setup discards the new instance
	// without shutting it down: the old one, going on, gives back what the
	// new one took.
	c.OnRestartFailed(func() error { startedPending(inst); return nil })

	c.OnStartup(func() error {
		ix.run()
		reload := inst.predecessor.Load() != nil
		limit := startupTimeout
		if reload {
			limit = cfg.handoverTimeout
		}
		wait := time.NewTimer(time.Until(inst.deadline(limit)))
		defer wait.Stop()
		began := time.Now()
		select {
		case <-ix.ctrl.builtCh:
		case <-wait.C:
		}
		switch {
		case reload && reused:
			handoversTotal.WithLabelValues("reused").Inc()
			log.Infof("Reload: reused the running index of %d global services", ix.ctrl.globalCount())
		case ix.ctrl.ready():
			if reload {
				handoversTotal.WithLabelValues("built").Inc()
				log.Infof("Reload: the stanza's feeds changed; built a new index of %d global services in %s while the old one answered",
					ix.ctrl.globalCount(), time.Since(began).Round(time.Millisecond))
			}
		case reload:
			inst.gaveUp.Store(true)
			handoversTotal.WithLabelValues("incomplete").Inc()
			log.Warningf("Reload: the new index is not complete after handover_timeout %s; the old instance stops, and global names get SERVFAIL until the new index has synced with the Kubernetes API", cfg.handoverTimeout)
		default:
			log.Warning("starting server before the first sync with the Kubernetes API; global names get SERVFAIL until then")
		}
		return nil
	})
	c.OnShutdown(func() error {
		ix.release()
		return nil
	})

	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		// The kubernetes plugin's handover wrapper is for the ready plugin,
		// which finds it in the block's registry; queries go to the plugin
		// itself, with no frame of the wrapper's on their stack.
		if k, ok := next.(*kubernetesHandover); ok {
			next = k.Kubernetes
		}
		g.Next = next
		return g
	})
	noteBlock(c, inst)
	return nil
}

// ---- the stanza ----

const (
	defaultZone = "cluster.local."
	// clustersetZone is KEP-1645's zone, the clusterset option's default.
	clustersetZone = "clusterset.local."
	defaultTTL     = 5
	maxTTL         = 3600
)

// config is one parsed `global` stanza.
type config struct {
	zones      []string // normalized: lower case, fully qualified
	suffix     string
	kubeconfig string
	context    string
	// api is the configuration the client was made with, for the feeds'
	// own clients (source.Config.API).
	api *rest.Config
	// apis, where set, are the feeds' APIs instead (source.Config.APIs):
	// unit tests' fakes.
	apis func(r kubeclient.Resource, namespace, sel string) (kubeclient.API, error)
	// clientConfig loads the kubeconfig when the client is made; nil: the
	// in-cluster configuration.
	clientConfig clientcmd.ClientConfig
	kubeconfigAt string // "file:line" of the kubeconfig option, for errors
	namespaces   []string
	// localSelector selects local member services; nil: none are members.
	localSelector labels.Selector
	ttl           uint32
	fall          fall.F
	// reverseZones are the reverse zones PTR is answered in; nil: off.
	reverseZones []string
	// clustersetZone is the KEP-1645 zone answered from the same index
	// (clusterset.local.); empty: off. clusterID names the local cluster in it.
	clustersetZone, clusterID string
	// handoverTimeout bounds how long a reload whose feeds changed waits for
	// its new index while the old instance answers.
	handoverTimeout time.Duration
}

// parse parses the one `global` stanza of a server block.
func parse(c *caddy.Controller) (*config, error) {
	var cfg *config
	for c.Next() {
		if cfg != nil {
			return nil, c.Errf("%v", plugin.ErrOnce)
		}
		var err error
		if cfg, err = parseStanza(c); err != nil {
			return nil, err
		}
	}
	if cfg == nil {
		return nil, c.Err("no global stanza")
	}
	return cfg, nil
}

func parseStanza(c *caddy.Controller) (*config, error) {
	sel, err := aggregate.ParseLocalSelector(aggregate.DefaultLocalSelector)
	if err != nil {
		return nil, err
	}
	cfg := &config{suffix: aggregate.DefaultSuffix, ttl: defaultTTL, localSelector: sel, handoverTimeout: defaultHandoverTimeout}

	// The zones of the stanza or, when it names none, of the server block,
	// as every CoreDNS plugin takes them. Only a test's controller has no
	// server block.
	args := c.RemainingArgs()
	if len(args) == 0 {
		args = plugin.OriginsFromArgsOrServerBlock(nil, c.ServerBlockKeys)
	}
	if len(args) == 0 {
		args = []string{defaultZone}
	}
	for _, z := range args {
		zone, err := parseZone(z)
		if err != nil {
			return nil, c.Errf("%v", err)
		}
		cfg.zones = append(cfg.zones, zone)
	}

	seen := map[string]bool{}
	for c.NextBlock() {
		opt := c.Val()
		if seen[opt] {
			return nil, c.Errf("option '%s' given more than once", opt)
		}
		seen[opt] = true
		if err := cfg.parseOption(c, opt, c.RemainingArgs()); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// parseOption sets option opt of the stanza from its args; its errors name
// the Corefile's line (c's).
func (cfg *config) parseOption(c *caddy.Controller, opt string, args []string) error {
	switch opt {
	case "suffix":
		if len(args) != 1 {
			return c.ArgErr()
		}
		if err := aggregate.ValidateSuffix(args[0]); err != nil {
			return c.Errf("invalid suffix '%s': %v", args[0], err)
		}
		cfg.suffix = args[0]
	case "kubeconfig":
		if len(args) != 1 && len(args) != 2 {
			return c.ArgErr()
		}
		cfg.kubeconfig = args[0]
		if len(args) == 2 {
			cfg.context = args[1]
		}
		cfg.clientConfig = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: cfg.context})
		cfg.kubeconfigAt = fmt.Sprintf("%s:%d", c.File(), c.Line())
	case "namespaces":
		if len(args) == 0 {
			return c.ArgErr()
		}
		for _, ns := range args {
			if err := aggregate.ValidateNamespace(ns); err != nil {
				return c.Errf("invalid namespace '%s': %v", ns, err)
			}
		}
		cfg.namespaces = args
	case "local_selector":
		if len(args) == 0 {
			return c.ArgErr()
		}
		s := strings.Join(args, " ")
		sel, err := aggregate.ParseLocalSelector(s)
		if err != nil {
			return c.Errf("invalid local_selector '%s': %v", s, err)
		}
		cfg.localSelector = sel
	case "ttl":
		if len(args) != 1 {
			return c.ArgErr()
		}
		t, err := strconv.Atoi(args[0])
		if err != nil || t < 0 || t > maxTTL {
			return c.Errf("ttl must be an integer in range [0, %d]: '%s'", maxTTL, args[0])
		}
		cfg.ttl = uint32(t)
	case "fallthrough":
		for _, z := range args {
			if _, err := parseAnyZone(z); err != nil {
				return c.Errf("fallthrough: %v", err)
			}
		}
		cfg.fall.SetZonesFromArgs(args)
	case "reverse":
		if len(args) == 0 {
			args = []string{"in-addr.arpa.", "ip6.arpa."}
		}
		for _, z := range args {
			zone, err := parseAnyZone(z)
			if err == nil && !isReverseZone(zone) {
				err = fmt.Errorf("'%s' is not a reverse zone (in-addr.arpa or ip6.arpa, or below)", z)
			}
			if err != nil {
				return c.Errf("reverse: %v", err)
			}
			cfg.reverseZones = append(cfg.reverseZones, zone)
		}
	case "clusterset":
		if len(args) != 1 && len(args) != 2 {
			return c.ArgErr()
		}
		if errs := validation.IsDNS1123Label(args[0]); len(errs) > 0 {
			return c.Errf("clusterset: cluster id '%s' is not a DNS label: %s", args[0], errs[0])
		}
		cfg.clusterID, cfg.clustersetZone = args[0], clustersetZone
		if len(args) == 2 {
			zone, err := parseZone(args[1])
			if err != nil {
				return c.Errf("clusterset: %v", err)
			}
			cfg.clustersetZone = zone
		}
		if slices.Contains(cfg.zones, cfg.clustersetZone) {
			return c.Errf("clusterset: zone '%s' is also one of the cluster zones", cfg.clustersetZone)
		}
	case "handover_timeout":
		if len(args) != 1 {
			return c.ArgErr()
		}
		d, err := time.ParseDuration(args[0])
		if err != nil || d < 0 || d > maxHandoverTimeout {
			return c.Errf("handover_timeout must be a duration in range [0s, %s]: '%s'", maxHandoverTimeout, args[0])
		}
		cfg.handoverTimeout = d
	default:
		return c.Errf("unknown property '%s'", opt)
	}
	return nil
}

// parseZone checks and normalizes a zone argument, a forward zone.
func parseZone(z string) (string, error) {
	zone, err := parseAnyZone(z)
	if err == nil && isReverseZone(zone) {
		return "", fmt.Errorf("invalid zone '%s': reverse zones have no services (see the reverse option)", z)
	}
	return zone, err
}

// isReverseZone reports whether zone is in-addr.arpa. or ip6.arpa. or below.
func isReverseZone(zone string) bool {
	return zone == "in-addr.arpa." || zone == "ip6.arpa." || dnsutil.IsReverse(zone) > 0
}

// parseAnyZone checks and normalizes a zone argument, forward or reverse.
func parseAnyZone(z string) (string, error) {
	if z == "" || strings.ContainsAny(z, ":/ \t") {
		return "", fmt.Errorf("invalid zone '%s': want a domain name without scheme or port", z)
	}
	if _, ok := dns.IsDomainName(z); !ok {
		return "", fmt.Errorf("invalid zone '%s': not a domain name", z)
	}
	zone := dns.Fqdn(strings.ToLower(z))
	if strings.Contains(zone, "..") && zone != "." {
		return "", fmt.Errorf("invalid zone '%s': empty label", z)
	}
	return zone, nil
}
