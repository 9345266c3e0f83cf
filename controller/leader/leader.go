// Package leader runs a function only while this process holds a Lease, so
// that of several replicas exactly one writes.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
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

// Run blocks until ctx is done, running lead while this process is the leader.
// lead's context ends when leadership ends or ctx does. When ctx ends, Run
// waits (up to drainTimeout) for lead to return and only then releases the
// Lease, so a standby never writes while this process still does; a leader
// that dies without releasing is replaced after the lease duration.
//
// A leader that loses the Lease (it could not renew it within the renew
// deadline, as through a long API server outage) waits for lead to return
// and stands by again, with its caches warm, rather than exiting: a process
// that exits is restarted with cold caches, after a growing back-off.
func Run(ctx context.Context, cfg Config, lead func(context.Context)) error {
	host, _ := os.Hostname()
	id := host + "_" + uuid.NewString()
	for {
		lost, err := term(ctx, cfg, id, lead)
		if err != nil || !lost || ctx.Err() != nil {
			return err
		}
		cfg.Logger.Warn("lost the lease; standing by again", "lease", cfg.Namespace+"/"+cfg.Name, "identity", id)
	}
}

// term campaigns for the Lease as id and, once leading, runs lead until
// ctx ends or the Lease is lost (lost: true); lead has returned by then.
func term(ctx context.Context, cfg Config, id string, lead func(context.Context)) (lost bool, err error) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	// The elector runs on its own context so that the Lease outlives ctx until
	// lead has stopped.
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	var leading atomic.Bool
	leadDone, stopped := make(chan struct{}), make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            cfg.Name,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				leading.Store(true)
				defer close(leadDone)
				leaderCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				cfg.Logger.Info("became leader", "lease", cfg.Namespace+"/"+cfg.Name, "identity", id)
				lead(leaderCtx)
			},
			OnStoppedLeading: func() {
				cfg.Logger.Info("stopped leading", "lease", cfg.Namespace+"/"+cfg.Name, "identity", id)
				close(stopped)
			},
			OnNewLeader: func(current string) {
				if current != id {
					cfg.Logger.Info("standing by", "leader", current)
				}
			},
		},
	})
	if err != nil {
		return false, fmt.Errorf("leader election: %w", err)
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-electCtx.Done():
			return
		}
		if leading.Load() {
			select {
			case <-leadDone:
			case <-time.After(drainTimeout):
				cfg.Logger.Warn("workers did not stop in time; releasing the lease anyway", "timeout", drainTimeout)
			}
		}
		stopElecting()
	}()
	cfg.Logger.Info("waiting for leadership", "lease", cfg.Namespace+"/"+cfg.Name, "identity", id)
	le.Run(klog.NewContext(electCtx, electionLogger(electCtx, cfg.Logger))) // returns when electCtx ends or leadership is lost
	if ctx.Err() != nil || !leading.Load() {
		return false, nil
	}
	<-stopped
	// The elector cancelled lead's context: no second term before it ends.
	<-leadDone
	return true, nil
}

// drainTimeout bounds how long a leader that is asked to stop waits for its
// work to end before it releases the Lease.
const drainTimeout = 10 * time.Second

// electionLogger is the elector's logger. client-go logs a renew that was in
// flight when the elector was stopped as an error ("Error retrieving lease
// lock: context canceled"); a clean shutdown is not an error, so once ctx has
// ended, errors that are its cancellation are logged at debug level. The
// release that follows has a context of its own: its errors stay errors.
func electionLogger(ctx context.Context, log *slog.Logger) logr.Logger {
	base := logr.FromSlogHandler(log.Handler())
	return base.WithSink(stoppedSink{LogSink: base.GetSink(), ctx: ctx})
}

type stoppedSink struct {
	logr.LogSink
	ctx context.Context
}

func (s stoppedSink) Error(err error, msg string, kv ...any) {
	if s.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		s.LogSink.Info(4, msg, append(kv, "err", err)...)
		return
	}
	s.LogSink.Error(err, msg, kv...)
}

func (s stoppedSink) WithValues(kv ...any) logr.LogSink {
	return stoppedSink{LogSink: s.LogSink.WithValues(kv...), ctx: s.ctx}
}

func (s stoppedSink) WithName(name string) logr.LogSink {
	return stoppedSink{LogSink: s.LogSink.WithName(name), ctx: s.ctx}
}
