package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// profileBlocks records a CoreDNS CPU profile (its pprof plugin) while dnsperf
// loads each block, for `go tool pprof -top <coredns binary> <file>`.
func profileBlocks(ctx context.Context, srv *CoreDNS, blocks []Block, perf Dnsperf, cfg Config) ([]string, error) {
	secs := max(2, int(cfg.Duration/time.Second))
	var paths []string
	for _, b := range blocks {
		if b.Key == BlockKubeMirror {
			continue
		}
		path := filepath.Join(cfg.Dir, fmt.Sprintf("cpu-%s.pprof", b.Key))
		done := make(chan error, 1)
		go func() {
			_, err := perf.Run(ctx, srv.Ports[b.Port], b.Queries, time.Duration(secs+1)*time.Second, false,
				filepath.Join(cfg.Dir, "dnsperf-profile-"+b.Key+".txt"), 0)
			done <- err
		}()
		time.Sleep(500 * time.Millisecond) // profile the steady state
		err := fetch(ctx, fmt.Sprintf("%s/profile?seconds=%d", srv.PprofURL, secs-1), path)
		if perr := <-done; err == nil {
			err = perr
		}
		if err != nil {
			return paths, fmt.Errorf("profile of %s: %w", b.Key, err)
		}
		cfg.Log("CPU profile of %s: %s", b.Key, path)
		paths = append(paths, path)
	}
	return paths, nil
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
