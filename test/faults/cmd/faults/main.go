// Command faults runs globalmirror under repeated faults (see package
// faults) and writes the report: `make faults`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/globalmirror/globalmirror/test/faults"
	"github.com/globalmirror/globalmirror/test/localkube"
)

func main() {
	duration := flag.Duration("duration", 15*time.Minute, "how long to inject faults")
	seed := flag.Uint64("seed", 1, "seed of the faults' order and choices")
	clusters := flag.String("clusters", "east,west,north", "clusters of the mesh")
	idle := flag.Duration("idle", 30*time.Second, "how long the controllers must write nothing at the end")
	fuzz := flag.Duration("fuzz", time.Minute, "how long the wire fuzz runs")
	out := flag.String("out", "test/faults/RESULTS.md", "the report")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "globalmirror-faults"), "logs")
	verbose := flag.Bool("v", false, "log every fault")
	flag.Parse()

	log := localkube.StderrLogger(*verbose)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_ = os.RemoveAll(*dir)
	res, err := faults.Run(ctx, faults.Config{Clusters: strings.Split(*clusters, ","), Seed: *seed, Duration: *duration,
		Idle: *idle, Fuzz: *fuzz, Dir: *dir, Log: log})
	if res != nil {
		report := res.Markdown()
		fmt.Print(report)
		if werr := os.WriteFile(*out, []byte(report), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "faults:", werr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults: the run did not finish:", err, "(logs in "+*dir+")")
		os.Exit(1)
	}
	if p := res.Problems(); len(p) > 0 {
		fmt.Fprintln(os.Stderr, "faults: problems:\n  "+strings.Join(p, "\n  ")+"\n(logs in "+*dir+")")
		os.Exit(1)
	}
}
