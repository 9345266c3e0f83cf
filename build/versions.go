// Package build records what globalmirror is built and proven with, for the
// code that reports on it.
package build

import (
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

//go:embed kubernetes-versions
var kubernetesVersions string

// KubernetesMinors are the minors of the Kubernetes releases the test suite
// runs on (kubernetes-versions, which the Makefile reads too), sorted.
func KubernetesMinors() []int {
	var minors []int
	for _, line := range strings.Split(kubernetesVersions, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(line, "v"), ".")
		minor, err := strconv.Atoi(parts[min(1, len(parts)-1)])
		if len(parts) != 3 || parts[0] != "1" || err != nil {
			panic(fmt.Sprintf("build/kubernetes-versions: %q is not v1.MINOR.PATCH", line))
		}
		minors = append(minors, minor)
	}
	slices.Sort(minors)
	return slices.Compact(minors)
}
