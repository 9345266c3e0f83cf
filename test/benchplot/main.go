// Command benchplot draws the curves `make bench` measures (curves.json,
// written by test/bench) as SVG plots beside it: what the plugin holds per
// mirrored endpoint, how long it takes to build every answer, and how long
// one change takes to reach the answers, against the mirrored endpoints, one
// line per number of linked clusters. A module of its own, so that the
// plotting library is no dependency of the product.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

type point struct {
	Clusters         int     `json:"clusters"`
	Endpoints        int     `json:"endpoints"`
	BytesPerEndpoint float64 `json:"bytes_per_endpoint"`
	BuiltMs          float64 `json:"built_ms"`
	ProgrammingP99Ms float64 `json:"programming_p99_ms"`
}

// chart is one plot: the value it draws of each point, and how.
type chart struct {
	file, title, yLabel string
	y                   func(point) float64
	logY                bool
}

var charts = []chart{
	{"curve-memory.svg", "Heap the plugin holds per mirrored endpoint", "bytes per endpoint",
		func(p point) float64 { return p.BytesPerEndpoint }, false},
	{"curve-built.svg", "From start to every answer built", "milliseconds",
		func(p point) float64 { return p.BuiltMs }, true},
	{"curve-programming.svg", "One changed slice to its new answer, p99", "milliseconds",
		func(p point) float64 { return p.ProgrammingP99Ms }, false},
}

func main() {
	in := flag.String("in", "test/bench/curves.json", "the curve points")
	out := flag.String("out", "test/bench", "directory for the SVG plots")
	results := flag.String("results", "", "markdown file to write the curves' section into (default: RESULTS.md in -out, if there)")
	starts := flag.String("starts", "", "the cold starts test/bench measured (default: starts.json beside -in, if there)")
	flag.Parse()
	if *starts = orExisting(*starts, filepath.Join(filepath.Dir(*in), "starts.json")); *starts != "" {
		path := filepath.Join(*out, "start-time.svg")
		if err := drawStarts(*starts, path); err != nil {
			fail(fmt.Errorf("%s: %w", path, err))
		}
		fmt.Println("wrote", path)
	}
	*results = orExisting(*results, filepath.Join(*out, "RESULTS.md"))
	b, err := os.ReadFile(*in)
	if err != nil {
		fail(err)
	}
	var data struct{ Points []point }
	if err := json.Unmarshal(b, &data); err != nil {
		fail(fmt.Errorf("%s: %w", *in, err))
	}
	if len(data.Points) == 0 {
		fail(fmt.Errorf("%s: no points", *in))
	}
	for _, c := range charts {
		path := filepath.Join(*out, c.file)
		if err := draw1(c, data.Points, path); err != nil {
			fail(fmt.Errorf("%s: %w", path, err))
		}
		fmt.Println("wrote", path)
	}
	if *results != "" {
		if err := section(*results, data.Points); err != nil {
			fail(fmt.Errorf("%s: %w", *results, err))
		}
		fmt.Println("wrote the curves into", *results)
	}
}

// curvesMark opens the curves' section of RESULTS.md; it runs to the end.
const curvesMark = "<!-- curves: written by test/benchplot -->"

// section writes the curves' section (the plots and their points) at the
// end of the results file, in place of the one there.
func section(path string, ps []point) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(b)
	if i := strings.Index(text, curvesMark); i >= 0 {
		text = text[:i]
	}
	var w strings.Builder
	w.WriteString(strings.TrimRight(text, "\n") + "\n\n" + curvesMark + "\n")
	w.WriteString("\n### Curves\n\n" +
		"How the plugin's cost grows with the world, in process (`BenchmarkCurve` in plugin/global: a fake clientset " +
		"whose lists are encoded to protobuf and decoded again, as a client reads an API server's, and which holds the " +
		"global Services the controller writes): " +
		"Linkerd's full shape of 3 and of 10 linked clusters, three pods per service and cluster, from about 1,000 to " +
		"100,000 mirrored endpoints. The heap the plugin holds per endpoint (index and answer sets), the time from its " +
		"start to every answer built, and how long one changed slice takes to reach its global's answers (p99 of 100).\n\n")
	for _, c := range charts {
		fmt.Fprintf(&w, "![%s](%s)\n\n", c.title, c.file)
	}
	w.WriteString("| clusters | mirrored endpoints | heap per endpoint | every answer built | programming p99 |\n|---:|---:|---:|---:|---:|\n")
	for _, p := range ps {
		fmt.Fprintf(&w, "| %d | %d | %.0f B | %.0f ms | %.1f ms |\n", p.Clusters, p.Endpoints, p.BytesPerEndpoint, p.BuiltMs, p.ProgrammingP99Ms)
	}
	return os.WriteFile(path, []byte(w.String()), 0o644)
}

// newPlot is a plot titled title of yLabel (on a logarithmic axis if logY,
// else from 0) against xLabel, on a logarithmic axis, with its legend top
// left.
func newPlot(title, xLabel, yLabel string, logY bool) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	if logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	} else {
		p.Y.Min = 0
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p
}

// draw1 draws one chart: a line with points per number of clusters, the
// mirrored endpoints on a logarithmic axis.
func draw1(c chart, ps []point, path string) error {
	p := newPlot(c.title, "mirrored endpoints (Linkerd's full shape)", c.yLabel, c.logY)
	byClusters := map[int]plotter.XYs{}
	for _, pt := range ps {
		if v := c.y(pt); pt.Endpoints > 0 && (!c.logY || v > 0) {
			byClusters[pt.Clusters] = append(byClusters[pt.Clusters], plotter.XY{X: float64(pt.Endpoints), Y: v})
		}
	}
	for i, n := range slices.Sorted(maps.Keys(byClusters)) {
		if err := addLine(p, fmt.Sprintf("%d clusters", n), byClusters[n], palette[i%len(palette)], false); err != nil {
			return err
		}
	}
	p.Add(plotter.NewGrid())
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// orExisting is v, or where v is empty, path if a file is there.
func orExisting(v, path string) string {
	if _, err := os.Stat(path); v == "" && err == nil {
		return path
	}
	return v
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchplot:", err)
	os.Exit(1)
}

// startPoint is one block's median cold start at one size (test/bench's
// starts.json).
type startPoint struct {
	Block     string  `json:"block"`
	Paged     bool    `json:"paged"`
	Endpoints int     `json:"endpoints"`
	ReadyS    float64 `json:"ready_s"`
}

// drawStarts draws the seconds from exec to Ready against the mirrored
// endpoints, a line per plugin and list path.
func drawStarts(in, path string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var data struct{ Points []startPoint }
	if err := json.Unmarshal(b, &data); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	p := newPlot("Cold start: from exec to Ready", "mirrored endpoints (Linkerd's shape)", "seconds", false)
	lines := map[string]plotter.XYs{}
	for _, pt := range data.Points {
		key := pt.Block + ", lists streamed (1.36)"
		if pt.Paged {
			key = pt.Block + ", lists paged (1.33)"
		}
		lines[key] = append(lines[key], plotter.XY{X: float64(pt.Endpoints), Y: pt.ReadyS})
	}
	for i, k := range slices.Sorted(maps.Keys(lines)) {
		// A colour per plugin, dashed where the lists are paged.
		if err := addLine(p, k, lines[k], palette[(i/2)%len(palette)], strings.Contains(k, "paged")); err != nil {
			return err
		}
	}
	p.Add(plotter.NewGrid())
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

// addLine draws xys, sorted by x, as a line with points in col, and names
// it in the legend.
func addLine(p *plot.Plot, name string, xys plotter.XYs, col color.Color, dashed bool) error {
	slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
	line, points, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	line.Color, points.Color = col, col
	if dashed {
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	points.Shape = draw.CircleGlyph{}
	p.Add(line, points)
	p.Legend.Add(name, line, points)
	return nil
}
