package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

func TestGlobalRunsRightBeforeKubernetes(t *testing.T) {
	i := slices.Index(dnsserver.Directives, "global")
	if i < 0 || i+1 >= len(dnsserver.Directives) || dnsserver.Directives[i+1] != "kubernetes" {
		t.Fatalf("directives %v: want global right before kubernetes", dnsserver.Directives)
	}
}

func TestDirectivesKeepCoreDNSsOrderOfWhatIsLinked(t *testing.T) {
	got := directives([]string{"log", "route53", "cache", "kubernetes", "etcd", "forward"},
		map[string]bool{"log": true, "cache": true, "global": true, "kubernetes": true, "forward": true})
	want := []string{"log", "cache", "global", "kubernetes", "forward"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// A plugin left out of this build is refused at parse time, naming the
// Corefile's line, and every plugin linked in is a directive.
func TestALeftOutPluginIsAnUnknownDirectiveOnItsLine(t *testing.T) {
	for _, left := range []string{"azure", "clouddns", "route53", "etcd", "nomad", "trace"} {
		corefile := ".:53 {\n    log\n    " + left + "\n}\n"
		err := caddy.ValidateAndExecuteDirectives(caddy.CaddyfileInput{Contents: []byte(corefile), Filepath: "Corefile", ServerTypeName: "dns"}, nil, true)
		want := "Corefile:3 - Error during parsing: Unknown directive '" + left + "'"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", left, err, want)
		}
	}
	for name := range registered() {
		if !slices.Contains(dnsserver.Directives, name) {
			t.Errorf("plugin %s is linked in but not a directive", name)
		}
	}
	for _, d := range dnsserver.Directives {
		if !registered()[d] {
			t.Errorf("directive %s has no plugin", d)
		}
	}
}
