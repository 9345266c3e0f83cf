package global

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://127.0.0.1:1"}
- name: b
  cluster: {server: "https://127.0.0.1:2"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx-a
  context: {cluster: a, user: u}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`

func writeKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	kc := writeKubeconfig(t)
	tests := []struct {
		input string
		check func(t *testing.T, c *config)
	}{
		{`global`, func(t *testing.T, c *config) {
			if !slices.Equal(c.zones, []string{"cluster.local."}) || c.suffix != "-global" || c.ttl != 5 ||
				c.clientConfig != nil || c.namespaces != nil || c.localSelector == nil ||
				c.localSelector.String() != "mirror.linkerd.io/exported" || c.fall.Zones != nil || c.handoverTimeout != time.Minute {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{`global Cluster.Local example.org. {
			suffix -everywhere
			kubeconfig ` + kc + ` ctx-b
			namespaces ns1 ns2
			local_selector app in (db, cache), tier!=test
			ttl 0
			fallthrough example.org
		}`, func(t *testing.T, c *config) {
			if !slices.Equal(c.zones, []string{"cluster.local.", "example.org."}) {
				t.Errorf("zones %v", c.zones)
			}
			if c.suffix != "-everywhere" || c.ttl != 0 || !slices.Equal(c.namespaces, []string{"ns1", "ns2"}) {
				t.Errorf("config %+v", c)
			}
			if rc, _, err := restConfig(c); err != nil || rc.Host != "https://127.0.0.1:2" {
				t.Errorf("kubeconfig context not used: %+v %v", rc, err)
			}
			if got := c.localSelector.String(); got != "app in (cache,db),tier!=test" {
				t.Errorf("selector %q", got)
			}
			if !slices.Equal(c.fall.Zones, []string{"example.org."}) {
				t.Errorf("fallthrough %v", c.fall.Zones)
			}
		}},
		{`global {
			reverse
			clusterset east-1
		}`, func(t *testing.T, c *config) {
			if !slices.Equal(c.reverseZones, []string{"in-addr.arpa.", "ip6.arpa."}) ||
				c.clustersetZone != "clusterset.local." || c.clusterID != "east-1" {
				t.Errorf("reverse %v, clusterset %q %q", c.reverseZones, c.clustersetZone, c.clusterID)
			}
		}},
		{`global cluster.local {
			reverse 10.in-addr.arpa 8.B.D.0.1.0.0.2.ip6.arpa.
			clusterset home Mesh.Example
		}`, func(t *testing.T, c *config) {
			if !slices.Equal(c.reverseZones, []string{"10.in-addr.arpa.", "8.b.d.0.1.0.0.2.ip6.arpa."}) ||
				c.clustersetZone != "mesh.example." || c.clusterID != "home" {
				t.Errorf("reverse %v, clusterset %q %q", c.reverseZones, c.clustersetZone, c.clusterID)
			}
		}},
		{`global {
			kubeconfig ` + kc + `
			local_selector none
			ttl 3600
			fallthrough
		}`, func(t *testing.T, c *config) {
			if rc, _, err := restConfig(c); err != nil || rc.Host != "https://127.0.0.1:1" {
				t.Errorf("kubeconfig current context not used: %+v %v", rc, err)
			}
			if c.localSelector != nil {
				t.Errorf("local_selector none: %v", c.localSelector)
			}
			if c.ttl != 3600 || !slices.Equal(c.fall.Zones, []string{"."}) {
				t.Errorf("config %+v", c)
			}
		}},
	}
	for _, tc := range tests {
		c, err := parse(caddy.NewTestController("dns", tc.input))
		if err != nil {
			t.Errorf("%s: %v", tc.input, err)
			continue
		}
		tc.check(t, c)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		input string
		want  string // a substring of the error
	}{
		{"global {\n unknown 1\n}", "Testfile:2 - Error during parsing: unknown property 'unknown'"},
		{"global {\n ttl 5\n ttl 6\n}", "Testfile:3 - Error during parsing: option 'ttl' given more than once"},
		{"global {\n ttl\n}", "Testfile:2 - Error during parsing: Wrong argument count"},
		{"global {\n ttl 1 2\n}", "Testfile:2 - Error during parsing: Wrong argument count"},
		{"global {\n ttl -1\n}", "Testfile:2 - Error during parsing: ttl must be an integer in range [0, 3600]: '-1'"},
		{"global {\n handover_timeout 1\n}", "Testfile:2 - Error during parsing: handover_timeout must be a duration in range [0s, 1h0m0s]: '1'"},
		{"global {\n handover_timeout 2h\n}", "Testfile:2 - Error during parsing: handover_timeout must be a duration in range [0s, 1h0m0s]: '2h'"},
		{"global {\n ttl 3601\n}", "ttl must be an integer in range [0, 3600]: '3601'"},
		{"global {\n ttl five\n}", "ttl must be an integer in range [0, 3600]: 'five'"},
		{"global {\n suffix\n}", "Testfile:2 - Error during parsing: Wrong argument count"},
		{"global {\n suffix -Global\n}", "Testfile:2 - Error during parsing: invalid suffix '-Global'"},
		{"global {\n suffix .global\n}", "invalid suffix '.global'"},
		{"global {\n suffix -global-\n}", "invalid suffix '-global-'"},
		{"global {\n suffix " + strings.Repeat("x", 63) + "\n}", "invalid suffix"},
		{"global {\n namespaces\n}", "Testfile:2 - Error during parsing: Wrong argument count"},
		{"global {\n namespaces ok Not_OK\n}", "Testfile:2 - Error during parsing: invalid namespace 'Not_OK'"},
		{"global {\n local_selector\n}", "Testfile:2 - Error during parsing: Wrong argument count"},
		{"global {\n local_selector a=b=c\n}", "Testfile:2 - Error during parsing: invalid local_selector 'a=b=c'"},
		{"global {\n local_selector in (\n}", "invalid local_selector"},
		{"global {\n kubeconfig\n}", "Testfile:2 - Error during parsing: Wrong argument count"},
		{"global {\n kubeconfig a b c\n}", "Wrong argument count"},
		{"global {\n fallthrough exa:mple\n}", "Testfile:2 - Error during parsing: fallthrough: invalid zone 'exa:mple'"},
		{"global cluster..local", "Testfile:1 - Error during parsing: invalid zone 'cluster..local'"},
		{"global cluster.local:53", "invalid zone 'cluster.local:53'"},
		{"global dns://cluster.local", "invalid zone 'dns://cluster.local'"},
		{"global 10.in-addr.arpa", "invalid zone '10.in-addr.arpa': reverse zones have no services"},
		{"global " + strings.Repeat("x", 64) + ".local", "not a domain name"},
		{"global\nglobal", "Testfile:2 - Error during parsing: this plugin can only be used once per Server Block"},
		{"global in-addr.arpa", "invalid zone 'in-addr.arpa': reverse zones have no services (see the reverse option)"},
		{"global {\n reverse cluster.local\n}", "Testfile:2 - Error during parsing: reverse: 'cluster.local' is not a reverse zone"},
		{"global {\n reverse in-addr..arpa\n}", "Testfile:2 - Error during parsing: reverse: invalid zone"},
		{"global {\n clusterset\n}", "Testfile:2 - Error during parsing: Wrong argument count"},
		{"global {\n clusterset a b c\n}", "Wrong argument count"},
		{"global {\n clusterset East_1\n}", "Testfile:2 - Error during parsing: clusterset: cluster id 'East_1' is not a DNS label"},
		{"global {\n clusterset east in-addr.arpa\n}", "clusterset: invalid zone 'in-addr.arpa'"},
		{"global cluster.local clusterset.local {\n clusterset east\n}", "Testfile:2 - Error during parsing: clusterset: zone 'clusterset.local.' is also one of the cluster zones"},
	}
	for _, tc := range tests {
		_, err := parse(caddy.NewTestController("dns", tc.input))
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.input, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q, want it to contain %q", tc.input, err, tc.want)
		}
	}
}

// TestSetup runs the setup function as CoreDNS does: errors stop it, a good
// stanza adds the plugin.
func TestSetup(t *testing.T) {
	kc := writeKubeconfig(t)
	c := caddy.NewTestController("dns", "global {\n kubeconfig "+kc+"\n}")
	if err := setup(c); err != nil {
		t.Fatalf("setup: %v", err)
	}
	if n := len(dnsserver.GetConfig(c).Plugin); n != 1 {
		t.Fatalf("setup added %d plugins, want 1", n)
	}

	c = caddy.NewTestController("dns", "global {\n bogus\n}")
	err := setup(c)
	if err == nil || !strings.Contains(err.Error(), "plugin/global: Testfile:2 - Error during parsing: unknown property 'bogus'") {
		t.Fatalf("setup error %v", err)
	}

	// A kubeconfig is read when the client is made; its errors still name the line.
	for input, want := range map[string]string{
		"global {\n kubeconfig /does/not/exist\n}":                  "plugin/global: Testfile:2 - Error during parsing: kubeconfig '/does/not/exist'",
		"global {\n ttl 1\n kubeconfig " + kc + " nosuchcontext\n}": `Testfile:3 - Error during parsing: kubeconfig '` + kc + `': context "nosuchcontext" does not exist`,
	} {
		if err := setup(caddy.NewTestController("dns", input)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: setup error %v, want %q", input, err, want)
		}
	}

	// Without a kubeconfig outside a cluster: a clear error, not a crash.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	c = caddy.NewTestController("dns", "global")
	if err := setup(c); err == nil || !strings.Contains(err.Error(), "in-cluster config") {
		t.Fatalf("setup without kubeconfig outside a cluster: %v", err)
	}
}

// TestZonesFromServerBlock: without zones in the stanza, the plugin answers
// in its server block's zones, as CoreDNS plugins do.
func TestZonesFromServerBlock(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want []string
	}{
		{[]string{"example.org.:53"}, []string{"example.org."}},
		{[]string{"cluster.local.:1053", "Other.Zone.:1053"}, []string{"cluster.local.", "other.zone."}},
		{[]string{".:53"}, []string{"."}},
	} {
		c := caddy.NewTestController("dns", "global")
		c.ServerBlockKeys = tc.keys
		cfg, err := parse(c)
		if err != nil {
			t.Errorf("server block %v: %v", tc.keys, err)
		} else if !slices.Equal(cfg.zones, tc.want) {
			t.Errorf("server block %v: zones %v, want %v", tc.keys, cfg.zones, tc.want)
		}
	}
	// The stanza's own zones win.
	c := caddy.NewTestController("dns", "global cluster.local")
	c.ServerBlockKeys = []string{"example.org.:53"}
	if cfg, err := parse(c); err != nil {
		t.Errorf("stanza zones: %v", err)
	} else if !slices.Equal(cfg.zones, []string{"cluster.local."}) {
		t.Errorf("stanza zones: %v", cfg.zones)
	}
	// A reverse server block has no services.
	c = caddy.NewTestController("dns", "global")
	c.ServerBlockKeys = []string{"in-addr.arpa.:53"}
	if _, err := parse(c); err == nil || !strings.Contains(err.Error(), "reverse zones have no services") {
		t.Errorf("reverse server block: %v", err)
	}
}
