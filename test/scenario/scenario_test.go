package scenario

import (
	"strings"
	"testing"
)

func TestNamespace(t *testing.T) {
	t.Run("Sub Test_With.Odd:chars", func(t *testing.T) {
		if got, want := Namespace(t), "namespace-sub-test-with-odd-chars"; got != want {
			t.Errorf("Namespace = %q, want %q", got, want)
		}
	})
	t.Run(strings.Repeat("x", 39)+"-y", func(t *testing.T) {
		if got := Namespace(t); len(got) > 50 || strings.HasSuffix(got, "-") {
			t.Errorf("Namespace = %q: longer than 50 or ends with a dash", got)
		}
	})
}
