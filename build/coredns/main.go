// Command coredns is CoreDNS v1.15.0 with its standard plugins and
// globalmirror's `global` plugin, which runs right before `kubernetes`.
package main

import (
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/core/plugin" // CoreDNS's standard plugins
	"github.com/coredns/coredns/coremain"

	_ "github.com/globalmirror/globalmirror/plugin/global"
)

func init() {
	i := slices.Index(dnsserver.Directives, "kubernetes")
	if i < 0 {
		panic("coredns: no kubernetes directive to insert global before")
	}
	dnsserver.Directives = slices.Insert(dnsserver.Directives, i, "global")
}

func main() { coremain.Run() }
