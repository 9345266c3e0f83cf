// Package leader runs a function only while this process holds a Lease, so
// that of several replicas exactly one writes.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Config says which Lease to hold and how.
type Config struct {
	Client        kubernetes.Interface
	Namespace     string
	Name          string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	Logger        *slog.Logger
}

// ErrLost is returned when leadership was lost before ctx ended: the caller
// should exit, since its workers may still hold stale state.
var ErrLost = errors.New("leader election lost")

// Run blocks until ctx is done, running lead while this process is the leader.
// lead's context ends when leadership ends. On ctx's end the Lease is released
// at once (ReleaseOnCancel), so a standby takes over without waiting out the
// lease duration; a leader that dies without releasing is replaced after it.
func Run(ctx context.Context, cfg Config, lead func(context.Context)) error {
	host, _ := os.Hostname()
	id := host + "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	lost := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            cfg.Name,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				cfg.Logger.Info("became leader", "lease", cfg.Namespace+"/"+cfg.Name, "identity", id)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				cfg.Logger.Info("stopped leading", "lease", cfg.Namespace+"/"+cfg.Name, "identity", id)
				close(lost)
			},
			OnNewLeader: func(current string) {
				if current != id {
					cfg.Logger.Info("standing by", "leader", current)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	cfg.Logger.Info("waiting for leadership", "lease", cfg.Namespace+"/"+cfg.Name, "identity", id)
	le.Run(ctx) // returns when ctx ends or leadership is lost
	if ctx.Err() != nil {
		return nil
	}
	select {
	case <-lost:
		return ErrLost
	default:
		return nil
	}
}
