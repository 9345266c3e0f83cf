package global

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

const (
	defaultZone = "cluster.local."
	defaultTTL  = 5
	maxTTL      = 3600
	// noLocal is the local_selector value that leaves local services out.
	noLocal = "none"
)

// config is one parsed `global` stanza.
type config struct {
	zones      []string // normalized: lower case, fully qualified
	suffix     string
	kubeconfig string
	context    string
	rest       *rest.Config // from the kubeconfig; nil: in-cluster
	namespaces []string
	// localSelector selects local member services; nil: none are members.
	localSelector labels.Selector
	ttl           uint32
	fall          fall.F
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
	sel, err := labels.Parse(aggregate.DefaultLocalSelector)
	if err != nil {
		return nil, err
	}
	cfg := &config{suffix: aggregate.DefaultSuffix, ttl: defaultTTL, localSelector: sel}

	for _, z := range c.RemainingArgs() {
		zone, err := parseZone(z)
		if err != nil {
			return nil, c.Errf("%v", err)
		}
		cfg.zones = append(cfg.zones, zone)
	}
	if len(cfg.zones) == 0 {
		cfg.zones = []string{defaultZone}
	}

	seen := map[string]bool{}
	for c.NextBlock() {
		opt := c.Val()
		if seen[opt] {
			return nil, c.Errf("option '%s' given more than once", opt)
		}
		seen[opt] = true
		args := c.RemainingArgs()
		switch opt {
		case "suffix":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			if err := validSuffix(args[0]); err != nil {
				return nil, c.Errf("invalid suffix '%s': %v", args[0], err)
			}
			cfg.suffix = args[0]
		case "kubeconfig":
			if len(args) != 1 && len(args) != 2 {
				return nil, c.ArgErr()
			}
			cfg.kubeconfig = args[0]
			if len(args) == 2 {
				cfg.context = args[1]
			}
			rc, err := kubeconfigRestConfig(cfg.kubeconfig, cfg.context)
			if err != nil {
				return nil, c.Errf("%v", err)
			}
			cfg.rest = rc
		case "namespaces":
			if len(args) == 0 {
				return nil, c.ArgErr()
			}
			for _, ns := range args {
				if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
					return nil, c.Errf("invalid namespace '%s': %s", ns, errs[0])
				}
			}
			cfg.namespaces = args
		case "local_selector":
			if len(args) == 0 {
				return nil, c.ArgErr()
			}
			if len(args) == 1 && args[0] == noLocal {
				cfg.localSelector = nil
				break
			}
			s := strings.Join(args, " ")
			sel, err := labels.Parse(s)
			if err != nil {
				return nil, c.Errf("invalid local_selector '%s': %v", s, err)
			}
			if sel.Empty() {
				return nil, c.Errf("local_selector '%s' selects every headless service; use '%s' to leave local services out", s, noLocal)
			}
			cfg.localSelector = sel
		case "ttl":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			t, err := strconv.Atoi(args[0])
			if err != nil || t < 0 || t > maxTTL {
				return nil, c.Errf("ttl must be an integer in range [0, %d]: '%s'", maxTTL, args[0])
			}
			cfg.ttl = uint32(t)
		case "fallthrough":
			for _, z := range args {
				if _, err := parseZone(z); err != nil {
					return nil, c.Errf("fallthrough: %v", err)
				}
			}
			cfg.fall.SetZonesFromArgs(args)
		default:
			return nil, c.Errf("unknown property '%s'", opt)
		}
	}
	return cfg, nil
}

// parseZone checks and normalizes a zone argument.
func parseZone(z string) (string, error) {
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
	if dnsutil.IsReverse(zone) > 0 {
		return "", fmt.Errorf("invalid zone '%s': reverse zones hold no services", z)
	}
	return zone, nil
}

// validSuffix accepts suffixes that turn a base name into a valid Service name.
func validSuffix(s string) error {
	if s == "" {
		return fmt.Errorf("empty")
	}
	if errs := validation.IsDNS1035Label("a" + s); len(errs) > 0 {
		return fmt.Errorf("%s", errs[0])
	}
	return nil
}
