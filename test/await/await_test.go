package await

import (
	"context"
	"strings"
	"sync/atomic"
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

// Quiet fails on the first bad check, long before the window ends, and
// checks once more at the end of a window that stays quiet.
func TestQuiet(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	err := Quiet(t.Context(), time.Minute, time.Millisecond, func(context.Context) string {
		if n.Add(1) == 3 {
			return "a write"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "a write") {
		t.Errorf("Quiet = %v, want the third check's failure", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Quiet took %v to fail, want at the first bad check", took)
	}

	var last atomic.Int64
	start = time.Now()
	if err := Quiet(t.Context(), 30*time.Millisecond, 20*time.Millisecond, func(context.Context) string {
		last.Store(int64(time.Since(start)))
		return ""
	}); err != nil {
		t.Errorf("Quiet of a quiet window = %v", err)
	}
	if d := time.Duration(last.Load()); d < 30*time.Millisecond {
		t.Errorf("last check %v into a window of 30ms, want one at its end", d)
	}
}

// Settle returns once the value has stood still for the window and nothing
// is awaited, and fails with the last value when it never does.
func TestSettle(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	v, err := Settle(t.Context(), 20*time.Millisecond, time.Second, time.Millisecond, func(context.Context) (int32, string, error) {
		i := n.Add(1)
		waiting := ""
		if i < 40 {
			waiting = "not led"
		}
		return min(i, 10), waiting, nil
	})
	if err != nil || v != 10 || n.Load() < 40 {
		t.Errorf("Settle = %v, %v after %d samples, want 10 after at least 40", v, err, n.Load())
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("settled after %v, before the window of 20ms", took)
	}

	v, err = Settle(t.Context(), time.Second, 30*time.Millisecond, time.Millisecond, func(context.Context) (int32, string, error) {
		return n.Add(1), "", nil
	})
	if err == nil || v == 0 {
		t.Errorf("Settle of a moving value = %v, %v, want an error and the last value", v, err)
	}
}
