package scenario

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestPollReportsTheLastAnswer(t *testing.T) {
	n := 0
	err := Poll(t.Context(), 50*time.Millisecond, time.Millisecond, func(context.Context) string {
		n++
		return "try " + string(rune('0'+min(n, 9)))
	})
	if err == nil || !strings.Contains(err.Error(), "try ") || n < 2 {
		t.Fatalf("Poll = %v after %d tries, want a timeout naming the last try", err, n)
	}
	n = 0
	if err := Poll(t.Context(), time.Minute, time.Millisecond, func(context.Context) string {
		if n++; n < 3 {
			return "not yet"
		}
		return ""
	}); err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d tries, want success on the third", err, n)
	}
}

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
