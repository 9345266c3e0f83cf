package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// Level is how a check ended.
type Level string

const (
	// OK: as it should be.
	OK Level = "ok"
	// Warning: works, but not as proven or advised; check still exits 0.
	Warning Level = "warning"
	// Error: broken, or could not be judged; check exits 1.
	Error Level = "error"
	// Skipped: not judged, an earlier check having failed (knock-on), or
	// the run having ended before it (see Report.Error).
	Skipped Level = "skipped"
)

// SchemaVersion names the shape of check's JSON report: a field is added
// under it, never removed or changed in meaning; anything else is a new
// version.
const SchemaVersion = "globalmirror.io/check/v1"

// Category is what a check is about; the table of checks (checks) holds
// them in the order of the constants below.
type Category string

const (
	CategoryKubernetes Category = "kubernetes"
	CategoryController Category = "controller"
	CategoryDNS        Category = "cluster DNS"
	CategoryLinkerd    Category = "linkerd"
	CategoryGlobals    Category = "global services"
)

// Result is one check: how it ended, what was found, and where it did not
// pass, what to do.
type Result struct {
	// ID is the check's stable identifier ("drained-clusters"); its name
	// (Check) is prose and may change.
	ID       string   `json:"id"`
	Category Category `json:"category"`
	Check    string   `json:"check"`
	Result   Level    `json:"result"`
	Detail   string   `json:"detail"`
	Hint     string   `json:"hint,omitempty"`
	// Doc is the check's row in the README of the command's release.
	Doc string `json:"doc"`
	// unread: a Warning because what the check needs could not be read
	// (refused, unanswered): the run could not check everything.
	unread bool
}

// Report is what `globalmirror check` says, in the same shape whether it
// passed, failed, or could not reach the API server at all.
type Report struct {
	SchemaVersion string `json:"schemaVersion"`
	// Success: every check ran, and none ended in Error.
	Success bool `json:"success"`
	// Error says why the run could not check everything (the API server
	// unreachable, the timeout, an internal error, a usage error): the
	// checks it did not run are Skipped. Empty when it ran them all.
	Error string `json:"error,omitempty"`
	// Checks are every check, in order, each once.
	Checks []Result `json:"checks"`
}

// Exit codes of check: ExitBroken where a check found the installation
// broken; else ExitCouldNotCheck where the run could not check everything.
const (
	ExitBroken        = 1
	ExitCouldNotCheck = 3
)

// NewReport is the report of rs, a run that ended for why ("" when every
// check ran).
func NewReport(rs []Result, why string) Report {
	failed := slices.ContainsFunc(rs, func(r Result) bool { return r.Result == Error })
	if why == "" {
		var unread []string
		for _, r := range rs {
			if r.unread {
				unread = append(unread, r.ID)
			}
		}
		if len(unread) > 0 {
			why = "could not read what these checks need: " + strings.Join(unread, ", ")
		}
	}
	return Report{SchemaVersion: SchemaVersion, Success: !failed && why == "", Error: why, Checks: rs}
}

// ExitCode is check's exit code for r: 0 passed (warnings allowed),
// ExitBroken, ExitCouldNotCheck.
func (r Report) ExitCode() int {
	switch {
	case slices.ContainsFunc(r.Checks, func(c Result) bool { return c.Result == Error }):
		return ExitBroken
	case r.Error != "":
		return ExitCouldNotCheck
	}
	return 0
}

// Marks of each level, as the text output shows them.
var marks = map[Level]string{OK: "✔", Warning: "‼", Error: "✘", Skipped: "–"}

// WriteResults writes check results as the command shows them, by
// category: ✔, ‼ or ✘, the check, what was found, and where it did not
// pass what to do; then a line that sums them up.
func WriteResults(out io.Writer, report Report) {
	rs := report.Checks
	var category Category
	counts := map[Level]int{}
	for _, r := range rs {
		if r.Category != category {
			if category != "" {
				fmt.Fprintln(out)
			}
			category = r.Category
			fmt.Fprintf(out, "%s\n%s\n", category, strings.Repeat("-", utf8.RuneCountInString(string(category))))
		}
		counts[r.Result]++
		fmt.Fprintf(out, "%s %s: %s\n", marks[r.Result], r.Check, r.Detail)
		if r.Result != OK && r.Hint != "" {
			// A hint's further lines (a snippet to paste) indented under it.
			fmt.Fprintf(out, "    hint: %s\n", strings.ReplaceAll(r.Hint, "\n", "\n        "))
		}
		if r.Result != OK && r.Doc != "" {
			fmt.Fprintf(out, "    see: %s\n", r.Doc)
		}
	}
	mark := marks[worst(rs)]
	if report.Error != "" && worst(rs) == OK {
		mark = marks[Warning] // nothing broken found, but not everything checked
	}
	fmt.Fprintf(out, "\n%s %d checks: %d %s, %d %s, %d %s, %d %s\n", mark, len(rs), counts[OK], marks[OK], counts[Warning], marks[Warning], counts[Error], marks[Error], counts[Skipped], marks[Skipped])
	if report.Error != "" {
		fmt.Fprintf(out, "could not check everything: %s\n", report.Error)
	}
}

func worst(rs []Result) Level {
	w := OK
	for _, r := range rs {
		if r.Result == Error || (r.Result == Warning && w == OK) {
			w = r.Result
		}
	}
	return w
}
