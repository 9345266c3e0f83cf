// Package await holds the tests' waits for a fact rather than for time: Poll
// waits until a check holds, Quiet watches for a window and fails on the
// first thing that must not happen, and Settle waits until a value has
// stopped changing. It needs nothing but the standard library, so that unit
// tests use it as well as the harness (test/scenario), make faults and make
// bench.
package await

import (
	"context"
	"fmt"
	"time"
)

// Poll calls check every interval until it returns "" and fails after
// timeout, or when ctx ends, with check's last answer.
func Poll(ctx context.Context, timeout, interval time.Duration, check func(ctx context.Context) string) error {
	deadline := time.Now().Add(timeout)
	for {
		last := check(ctx)
		if last == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %v: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// Quiet watches for window what must not happen and fails on the first sign
// of it, saying what it saw and when: check is called at once, every
// interval and at the end of the window, and returns "" while all is as it
// must be, else what happened. A negative check by sleeping and comparing at
// the end waits out the window even when the first moment already failed,
// and misses what came and went meanwhile.
func Quiet(ctx context.Context, window, interval time.Duration, check func(ctx context.Context) string) error {
	start := time.Now()
	end := start.Add(window)
	for {
		if bad := check(ctx); bad != "" {
			return fmt.Errorf("%v into a quiet window of %v: %s", time.Since(start).Round(time.Millisecond), window, bad)
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v into a quiet window of %v: %w", time.Since(start).Round(time.Millisecond), window, ctx.Err())
		case <-time.After(min(interval, left)):
		}
	}
}

// Settle waits until sample's value has not changed for window, sampling it
// every interval, and returns that value; it fails after timeout, or at
// once with sample's error. While sample also says what it is waiting for
// (a non-empty string, e.g. "no leader yet"), Settle does not return, but
// that does not restart the window. It is how a test knows a process is done
// reacting (its write count stands still) before it measures or checks
// quiet.
func Settle[V comparable](ctx context.Context, window, timeout, interval time.Duration,
	sample func(ctx context.Context) (v V, waiting string, err error)) (V, error) {
	start := time.Now()
	last, waiting, err := sample(ctx)
	if err != nil {
		return last, err
	}
	since := start
	for {
		if waiting == "" && time.Since(since) >= window {
			return last, nil
		}
		if time.Since(start) >= timeout {
			state := fmt.Sprintf("last changed %v ago, to %v", time.Since(since).Round(time.Millisecond), last)
			if waiting != "" {
				state += "; " + waiting
			}
			return last, fmt.Errorf("not still for %v within %v: %s", window, timeout, state)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(interval):
		}
		v, w, err := sample(ctx)
		if err != nil {
			return last, err
		}
		if v != last {
			last, since = v, time.Now()
		}
		waiting = w
	}
}
