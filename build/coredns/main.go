// Command coredns is CoreDNS v1.15.0 with globalmirror's `global` plugin,
// which runs right before `kubernetes`, and the standard plugins a cluster's
// DNS server runs: all of CoreDNS's plugin.cfg but six that serve names from
// somewhere other than the cluster or ship traces out of it (azure, clouddns,
// route53, etcd, nomad, trace). Those six bring cloud SDKs and exporters
// for nothing `global` is deployed for. To add one back, import it below:
// its directive keeps its place from CoreDNS's order.
package main

import (
	"slices"
	"strings"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/caddy/onevent"
	_ "github.com/coredns/coredns/plugin/acl"
	_ "github.com/coredns/coredns/plugin/any"
	_ "github.com/coredns/coredns/plugin/auto"
	_ "github.com/coredns/coredns/plugin/autopath"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/bufsize"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/cancel"
	_ "github.com/coredns/coredns/plugin/chaos"
	_ "github.com/coredns/coredns/plugin/debug"
	_ "github.com/coredns/coredns/plugin/dns64"
	_ "github.com/coredns/coredns/plugin/dnssec"
	_ "github.com/coredns/coredns/plugin/dnstap"
	_ "github.com/coredns/coredns/plugin/dynupdate"
	_ "github.com/coredns/coredns/plugin/erratic"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/file"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/geoip"
	_ "github.com/coredns/coredns/plugin/grpc"
	_ "github.com/coredns/coredns/plugin/grpc_server"
	_ "github.com/coredns/coredns/plugin/header"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/https"
	_ "github.com/coredns/coredns/plugin/https3"
	_ "github.com/coredns/coredns/plugin/k8s_external"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/local"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metadata"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/minimal"
	_ "github.com/coredns/coredns/plugin/multisocket"
	_ "github.com/coredns/coredns/plugin/nsid"
	_ "github.com/coredns/coredns/plugin/pprof"
	_ "github.com/coredns/coredns/plugin/proxyproto"
	_ "github.com/coredns/coredns/plugin/quic"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/root"
	_ "github.com/coredns/coredns/plugin/secondary"
	_ "github.com/coredns/coredns/plugin/shed"
	_ "github.com/coredns/coredns/plugin/sign"
	_ "github.com/coredns/coredns/plugin/siit"
	_ "github.com/coredns/coredns/plugin/template"
	_ "github.com/coredns/coredns/plugin/timeouts"
	_ "github.com/coredns/coredns/plugin/tls"
	_ "github.com/coredns/coredns/plugin/transfer"
	_ "github.com/coredns/coredns/plugin/tsig"
	_ "github.com/coredns/coredns/plugin/view"
	_ "github.com/coredns/coredns/plugin/whoami"

	_ "github.com/globalmirror/globalmirror/plugin/global"
)

func init() {
	dnsserver.Directives = directives(dnsserver.Directives, registered())
}

// registered is the set of directives a plugin linked into this binary
// registered for the dns server type.
func registered() map[string]bool {
	names := map[string]bool{}
	for _, p := range caddy.ListPlugins()["others"] {
		if name, ok := strings.CutPrefix(p, "dns."); ok {
			names[name] = true
		}
	}
	return names
}

// directives is CoreDNS's directive order with `global` right before
// `kubernetes`, and without the directives no linked plugin registered: a
// Corefile naming one of those then fails to parse with "Unknown directive"
// and its line, rather than later with no line at all.
func directives(order []string, registered map[string]bool) []string {
	i := slices.Index(order, "kubernetes")
	if i < 0 {
		panic("coredns: no kubernetes directive to insert global before")
	}
	order = slices.Insert(slices.Clone(order), i, "global")
	return slices.DeleteFunc(order, func(d string) bool { return !registered[d] })
}

func main() { coremain.Run() }
