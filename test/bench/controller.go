package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/run"
)

// Writes are the controller's API writes by "resource/verb".
type Writes map[string]float64

// Total of all writes.
func (w Writes) Total() float64 {
	var t float64
	for _, v := range w {
		t += v
	}
	return t
}

// Minus is the writes since before.
func (w Writes) Minus(before Writes) Writes {
	out := Writes{}
	for k, v := range w {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// ControllerWrites scrapes globalmirror_api_writes_total.
func ControllerWrites(ctrl *run.Controller) (Writes, error) {
	s, err := run.Scrape(ctrl.BaseURL + "/metrics")
	if err != nil {
		return nil, err
	}
	w := Writes{}
	for _, res := range []string{"services", "endpointslices"} {
		for _, verb := range []string{"create", "update", "delete"} {
			if v := s.Sum("globalmirror_api_writes_total", `resource="`+res+`"`, `verb="`+verb+`"`); v != 0 {
				w[res+"/"+verb] = v
			}
		}
	}
	return w, nil
}

// startController starts globalmirror-controller on namespace, without
// leader election, at cfg's API rate (burst twice that), logging to dir/log.
func startController(ctx context.Context, cfg Config, kubeconfig, namespace, log string) (*run.Controller, error) {
	args := []string{"--leader-elect=false", "--namespaces=" + namespace, "--kube-api-qps=" + strconv.Itoa(cfg.ControllerQPS)}
	if cfg.ControllerWorkers > 0 {
		args = append(args, "--workers="+strconv.Itoa(cfg.ControllerWorkers))
	}
	if cfg.ControllerQPS > 0 {
		args = append(args, "--kube-api-burst="+strconv.Itoa(2*cfg.ControllerQPS))
	}
	return run.StartController(ctx, cfg.Dir, log, kubeconfig, args...)
}

// Converged waits until the controller manages bases globals holding
// endpoints endpoints and its queue is empty, and returns when it first saw
// that.
func Converged(ctx context.Context, ctrl *run.Controller, bases, endpoints int, timeout time.Duration) (time.Time, error) {
	var seen time.Time
	err := await.Poll(ctx, timeout, 100*time.Millisecond, func(context.Context) string {
		s, err := run.Scrape(ctrl.BaseURL + "/metrics")
		seen = time.Now()
		if err != nil {
			return err.Error()
		}
		g, e := s.Sum("globalmirror_globals"), s.Sum("globalmirror_endpoints")
		depth := s.Sum("workqueue_depth", `name="globalmirror"`)
		if int(g) == bases && int(e) == endpoints && depth == 0 {
			return ""
		}
		return fmt.Sprintf("%v globals, %v endpoints, queue depth %v", g, e, depth)
	})
	if err != nil {
		return seen, fmt.Errorf("controller not converged on %d bases: %w", bases, err)
	}
	return seen, nil
}

// Settle waits until the controller's write count has not moved for quiet,
// and returns the writes then.
func Settle(ctx context.Context, ctrl *run.Controller, quiet, timeout time.Duration) (Writes, error) {
	var w Writes
	_, err := await.Settle(ctx, quiet, timeout, 250*time.Millisecond, func(context.Context) (float64, string, error) {
		cur, err := ControllerWrites(ctrl)
		if err == nil {
			w = cur
		}
		return cur.Total(), "", err
	})
	if err != nil {
		return w, fmt.Errorf("controller still writing: %w", err)
	}
	return w, nil
}
