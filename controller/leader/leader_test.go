package leader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestHandover: of two candidates one leads; when it is asked to stop, its
// work ends before it releases the Lease, and the other takes over without
// waiting out the lease duration.
func TestHandover(t *testing.T) {
	client := fake.NewClientset()
	cfg := Config{Client: client, Namespace: "ns", Name: "lease", LeaseDuration: 30 * time.Second,
		RenewDeadline: 20 * time.Second, RetryPeriod: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	var leaders atomic.Int32
	var holderWhenStopped atomic.Value
	started := make(chan string, 2)
	run := func(name string) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, cfg, func(ctx context.Context) {
				if leaders.Add(1) != 1 {
					t.Errorf("two leaders at once")
				}
				started <- name
				<-ctx.Done()
				// Still the holder while the work winds down.
				l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "lease", metav1.GetOptions{})
				if err == nil {
					holderWhenStopped.Store(*l.Spec.HolderIdentity)
				}
				leaders.Add(-1)
			})
		}()
		return cancel, done
	}
	cancelA, doneA := run("a")
	first := <-started
	cancelB, doneB := run("b")
	defer cancelB()
	if first != "a" {
		t.Fatalf("first leader %s", first)
	}
	// b tries for the lease every RetryPeriod and must not get it while a
	// holds it: the window fails at once if b leads.
	if err := await.Quiet(t.Context(), 300*time.Millisecond, 10*time.Millisecond, func(context.Context) string {
		select {
		case second := <-started:
			return second + " led while a held the lease"
		default:
			return ""
		}
	}); err != nil {
		t.Fatal(err)
	}
	cancelA()
	if err := <-doneA; err != nil {
		t.Errorf("Run = %v after cancel", err)
	}
	if h, _ := holderWhenStopped.Load().(string); h == "" {
		t.Error("the lease was released before the leader's work ended")
	}
	select {
	case second := <-started:
		if second != "b" {
			t.Errorf("second leader %s", second)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("standby did not take over a released lease promptly (lease duration is 30s)")
	}
	cancelB()
	<-doneB
}

// A leader that cannot renew its Lease within the renew deadline (its API
// server down for longer) stops leading, waits for its work to end, and
// stands by again instead of returning: once the API server answers, it
// leads again, in the same process.
func TestALeaderThatLosesTheLeaseStandsByAgain(t *testing.T) {
	client := fake.NewClientset()
	var down atomic.Bool
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("the API server is down")
		}
		return false, nil, nil
	})
	cfg := Config{Client: client, Namespace: "ns", Name: "lease", LeaseDuration: time.Second,
		RenewDeadline: 500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	var terms, leading atomic.Int32
	started := make(chan struct{}, 2)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, func(ctx context.Context) {
			if leading.Add(1) != 1 {
				t.Errorf("two terms at once")
			}
			terms.Add(1)
			started <- struct{}{}
			<-ctx.Done()
			leading.Add(-1)
		})
	}()
	<-started
	down.Store(true)
	if err := await.Poll(t.Context(), 10*time.Second, 10*time.Millisecond, func(context.Context) string {
		if leading.Load() != 0 {
			return "still leading without a renewed lease"
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) after losing the lease", err)
	default:
	}
	down.Store(false)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("did not lead again once the API server answered")
	}
	cancel()
	if err := <-done; err != nil || terms.Load() != 2 {
		t.Errorf("Run = %v after %d terms, want nil after 2", err, terms.Load())
	}
}

// TestAStoppedRenewIsNotAnError: a request of the elector's that the
// elector's own stop cancelled is logged at debug level; any other error, and
// a cancellation while the elector still runs, stay errors.
func TestAStoppedRenewIsNotAnError(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug - 8}))
	ctx, stop := context.WithCancel(context.Background())
	logger := electionLogger(ctx, log).WithValues("lock", "ns/lease")
	cancelled := fmt.Errorf("Get \"https://api/leases/lease\": %w", context.Canceled)

	logger.Error(cancelled, "Error retrieving lease lock")
	stop()
	logger.Error(cancelled, "Error retrieving lease lock")
	logger.Error(errors.New("etcdserver: request timed out"), "Failed to release lease")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got:\n%s", out.String())
	}
	for i, want := range []string{"level=ERROR", "level=DEBUG", "level=ERROR"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "lock=ns/lease") {
			t.Errorf("line %d: want %s with its values, got %s", i, want, lines[i])
		}
	}
	if !strings.Contains(lines[1], "context canceled") {
		t.Errorf("the demoted line lost its error: %s", lines[1])
	}
}
