package cli

import (
	"strings"
	"testing"
)

// version's reading of both halves' build_info: each pod's release, "" where
// its metrics do not say, and the skew judged as check judges it.
func TestVersionsReadEachPodsRelease(t *testing.T) {
	info := func(metric, v string) string { return metric + `{goversion="go1.26.8",version="` + v + `"} 1` + "\n" }
	got := releases("coredns_global_build_info", map[string]string{"a": info("coredns_global_build_info", "0.1.0"), "b": "coredns_global_globals 3\n"})
	if got["a"] != "0.1.0" || got["b"] != "" || len(got) != 2 {
		t.Errorf("releases %v", got)
	}
	v := Versions{Command: "0.1.0", GoVersion: "go1.26.8", ClusterDNS: got, Skew: result(CategoryKubernetes, "version skew", Warning, "b unsaid", "upgrade")}
	var out strings.Builder
	v.Write(&out)
	for _, want := range []string{"globalmirror 0.1.0 (go1.26.8)", "cluster DNS a: 0.1.0", "cluster DNS b: unsaid", "‼ b unsaid", "hint: upgrade"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version says %q, lacking %q", out.String(), want)
		}
	}
}
