package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/globalmirror/globalmirror/build"
)

// checkVersion holds the API server's release to those the tests run on
// (build/kubernetes-versions): another from the chart's oldest on is
// unproven, an older one fails.
func checkVersion(_ context.Context, c check, cl *Cluster, _ globals) Result {
	v := cl.Version
	proven := build.KubernetesMinors()
	var list []string
	for _, m := range proven {
		list = append(list, fmt.Sprintf("1.%d", m))
	}
	minor, err := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err != nil || v.Major != "1" {
		return c.result(Error, fmt.Sprintf("version %s (major %q, minor %q) is not a Kubernetes 1.x release", v.GitVersion, v.Major, v.Minor),
			"globalmirror runs on Kubernetes 1.x")
	}
	detail := fmt.Sprintf("%s, reachable; proven on %s", v.GitVersion, strings.Join(list, ", "))
	switch {
	case minor < proven[0]:
		return c.result(Error, detail, fmt.Sprintf("upgrade to 1.%d or later: the chart requires it, and older API servers lack what both halves rely on", proven[0]))
	case !slices.Contains(proven, minor):
		return c.result(Warning, detail, fmt.Sprintf("1.%d is not among the releases the tests run on: it likely works, but no test proved it", minor))
	}
	return c.result(OK, detail, "")
}
