package global

import (
	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/globalmirror/globalmirror/aggregate"
)

// Stanza is what a `global` stanza says that globalmirror's controller must
// agree with: the global services are the same only where both use the
// same suffix, namespaces and local selector.
type Stanza struct {
	// Zones the plugin answers in, fully qualified.
	Zones []string
	// Suffix of global service names.
	Suffix string
	// Namespaces watched; empty: all.
	Namespaces []string
	// LocalSelector selects the local members; aggregate.NoLocalSelector
	// where none is.
	LocalSelector string
	// ClustersetZone is the zone of the Multi-Cluster Services view,
	// fully qualified (clusterset.local.); empty where the view is off.
	// ClusterID names the local cluster in it.
	ClustersetZone, ClusterID string
}

// ParseStanza reads the `global` stanza among tokens (of one server block
// whose keys are keys, as caddyfile.Parse gives them) as CoreDNS does when it
// loads the Corefile, defaults included: for tools that check a cluster's
// Corefile against the controller's flags.
func ParseStanza(keys []string, tokens []caddyfile.Token) (Stanza, error) {
	c := &caddy.Controller{Dispenser: caddyfile.NewDispenserTokens("Corefile", tokens), ServerBlockKeys: keys}
	cfg, err := parse(c)
	if err != nil {
		return Stanza{}, err
	}
	st := Stanza{Zones: cfg.zones, Suffix: cfg.suffix, Namespaces: cfg.namespaces, LocalSelector: aggregate.NoLocalSelector,
		ClustersetZone: cfg.clustersetZone, ClusterID: cfg.clusterID}
	if cfg.localSelector != nil {
		st.LocalSelector = cfg.localSelector.String()
	}
	return st, nil
}
