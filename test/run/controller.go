package run

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// Controller is a running bin/globalmirror-controller.
type Controller struct {
	*Process
	// BaseURL serves /metrics, /healthz and /readyz.
	BaseURL string
}

// StartController runs the controller against kubeconfig with args added to
// --kubeconfig and a free --metrics-addr, logging to dir/<logName>, and waits
// until /readyz answers (its caches have synced).
func StartController(ctx context.Context, dir, logName, kubeconfig string, args ...string) (*Controller, error) {
	bin, err := Bin("globalmirror-controller")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	all := append([]string{"--kubeconfig", kubeconfig, "--metrics-addr", addr}, args...)
	p, err := Start(bin, all, nil, filepath.Join(dir, logName))
	if err != nil {
		return nil, err
	}
	c := &Controller{Process: p, BaseURL: "http://" + addr}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := WaitHTTP(wctx, c.BaseURL+"/readyz", p); err != nil {
		p.Stop()
		return nil, fmt.Errorf("controller: %w", err)
	}
	return c, nil
}
