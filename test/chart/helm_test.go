// Package chart tests the Helm chart in charts/globalmirror with a real helm
// binary (built by `make helm`, found through $GLOBALMIRROR_HELM): lint,
// rendering, the values schema, and an install into a real local cluster
// whose API server checks every object and whose RBAC is exercised as the
// chart's ServiceAccounts.
package chart

import (
	"os"
	"testing"
)

// readFile is the content of the file at path, failing the test if it
// cannot be read.
func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
