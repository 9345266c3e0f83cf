package localkube

import (
	"maps"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

// Envs asking for StopOnSignal, stopped by one process-wide handler.
var (
	signalMu       sync.Mutex
	signalEnvs     = map[*Env]bool{}
	signalHandling bool
)

func register(e *Env, stopOnSignal bool) {
	if !stopOnSignal {
		return
	}
	signalMu.Lock()
	defer signalMu.Unlock()
	signalEnvs[e] = true
	if signalHandling {
		return
	}
	signalHandling = true
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-ch
		signalMu.Lock()
		envs := slices.Collect(maps.Keys(signalEnvs))
		signalMu.Unlock()
		for _, e := range envs {
			_ = e.Stop()
		}
		// Die of the signal, as the process would have without us.
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
}

func unregister(e *Env) {
	signalMu.Lock()
	defer signalMu.Unlock()
	delete(signalEnvs, e)
}
