package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// pagedSection is the title of the paged run's section in RESULTS.md.
const pagedSection = "### Linkerd's full shape, lists in pages"

// reportPaged writes the paged run's section of RESULTS.md.
func reportPaged(out io.Writer, l *LinkerdMemoryResult) {
	fmt.Fprintf(out, "\n%s\n\n", pagedSection)
	fmt.Fprint(out, "The same, on an API server that does not stream lists (Kubernetes 1.33; 1.31 and older alike): "+
		"every list and relist of both plugins is read in pages (`global`'s counted `path=\"paged\"`).\n\n")
	ReportLinkerdMemory(out, l)
}

// MergePaged puts a paged run of Linkerd's shape measured on its own
// (bench -linkerd-memory -linkerd-paged -merge) into the last full run's
// results, so that a 50-minute run lands without the 2-hour whole.
func MergePaged(mdPath, jsonPath string, l *LinkerdMemoryResult, started time.Time) error {
	return mergeSection(mdPath, jsonPath, pagedSection, "## 4. Controller scale", func(b io.Writer) { reportPaged(b, l) },
		linkerdFloors(l, pagedLabel), "", started, "bench -linkerd-memory="+
			strings.Join(field(l.Steps, func(s LinkerdMemoryStep) string { return fmt.Sprint(s.Bases) }), ",")+" -linkerd-paged -merge")
}

// MergeTransport puts UDP and TCP under CPU contention measured on its own
// (bench -transport -merge) into the last full run's results.
func MergeTransport(mdPath, jsonPath string, t *TransportResult, bases int, started time.Time) error {
	return mergeSection(mdPath, jsonPath, transportSection, "## 2. Programming latency", func(b io.Writer) {
		fmt.Fprintf(b, "\n%s\n\n", transportSection)
		ReportTransport(b, t)
	}, transportFloors(t), "", started, fmt.Sprintf("bench -transport -sizes=%d -merge", bases))
}

// MergeStarts puts cold starts measured on their own (bench -start -merge)
// into the last full run's results.
func MergeStarts(mdPath, jsonPath string, streamed, paged *LinkerdMemoryResult, started time.Time, command string) error {
	return mergeSection(mdPath, jsonPath, startSection, "## Phases", func(b io.Writer) { ReportStarts(b, streamed, paged) },
		startFloors(streamed, paged), startFloorPrefix, started, command)
}

// MergeStorms puts the storms measured on their own (bench -storm -merge)
// into the last full run's results.
func MergeStorms(mdPath, jsonPath string, rep *StormReport, started time.Time) error {
	return mergeSection(mdPath, jsonPath, stormSection, pagedSection, func(b io.Writer) { ReportStorm(b, rep) },
		stormFloors(rep), "storm", started, "bench -storm -merge")
}

// mergeSection puts a part measured on its own into the last full run's
// results: its section of mdPath (titled title; where absent, inserted
// before the heading next) replaced by what write writes, opened by when
// and by which command it was measured, apart from the full run around it;
// its floors in jsonPath replaced by name or added, each dated with when it
// was measured; the floors table of mdPath written again from them all, so
// that it never shows a figure results.json has replaced. Where the part's floors are named by sizes or shapes a run
// may leave out, stale is the prefix of every one of them: those of an
// earlier run go first.
func mergeSection(mdPath, jsonPath, title, next string, write func(io.Writer), fs []floor, stale string, started time.Time, command string) error {
	md, err := os.ReadFile(mdPath)
	if err != nil {
		return err
	}
	var body bytes.Buffer
	write(&body)
	alone := fmt.Sprintf("Measured on its own, %s (`%s`, its floors dated in results.json); the rest of this file is the full run above.\n\n",
		started.UTC().Format("2006-01-02 15:04 UTC"), command)
	opened := strings.Replace(body.String(), title+"\n\n", title+"\n\n"+alone, 1)
	merged, err := replaceSection(string(md), title, next, opened)
	if err != nil {
		return err
	}

	var results resultsFile
	js, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(js, &results); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	if stale != "" {
		results.Floors = slices.DeleteFunc(results.Floors, func(f floor) bool { return strings.HasPrefix(f.Name, stale) })
	}
	for _, f := range fs {
		f.Date = started.UTC().Format(time.RFC3339)
		if i := slices.IndexFunc(results.Floors, func(g floor) bool { return g.Name == f.Name }); i >= 0 {
			results.Floors[i] = f
		} else {
			results.Floors = append(results.Floors, f)
		}
	}
	var out bytes.Buffer
	if err := writeResults(&out, results); err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, out.Bytes(), 0o644); err != nil {
		return err
	}
	if headingLine(merged, floorsSection) >= 0 {
		if merged, err = replaceSection(merged, floorsSection, "", floorsTable(results.Floors)); err != nil {
			return err
		}
	}
	return os.WriteFile(mdPath, []byte(merged), 0o644)
}

// replaceSection replaces the section of md titled title (up to the next
// heading of its level or above) with body, or inserts body before the
// heading next where md has none. The section starts a line of its own, a
// blank line before it and after it.
func replaceSection(md, title, next, body string) (string, error) {
	body = strings.Trim(body, "\n") + "\n\n"
	start, end := headingLine(md, title), 0
	if start >= 0 {
		rest := md[start+len(title):]
		end = start + len(title) + len(rest)
		for _, h := range []string{"\n### ", "\n## ", "\n# "} {
			if j := strings.Index(rest, h); j >= 0 && start+len(title)+j+1 < end {
				end = start + len(title) + j + 1
			}
		}
	} else if start = headingLine(md, next); start >= 0 {
		end = start
	} else {
		return "", fmt.Errorf("RESULTS.md has neither %q nor %q", title, next)
	}
	before := strings.TrimRight(md[:start], "\n")
	if before != "" {
		before += "\n\n"
	}
	return before + body + md[end:], nil
}

// headingLine is where the line that is heading starts in md, or -1.
func headingLine(md, heading string) int {
	if strings.HasPrefix(md, heading+"\n") {
		return 0
	}
	if i := strings.Index(md, "\n"+heading+"\n"); i >= 0 {
		return i + 1
	}
	return -1
}
