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
)

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
	Category Category `json:"category"`
	Check    string   `json:"check"`
	Result   Level    `json:"result"`
	Detail   string   `json:"detail"`
	Hint     string   `json:"hint,omitempty"`
	// Doc is the check's row in the README of the command's release.
	Doc string `json:"doc"`
}

// Report is what `globalmirror check` says, in the same shape whether it
// passed, failed, or could not reach the API server at all.
type Report struct {
	// Success: no check ended in Error.
	Success bool     `json:"success"`
	Checks  []Result `json:"checks"`
}

// NewReport is the report of rs.
func NewReport(rs []Result) Report {
	return Report{Success: !slices.ContainsFunc(rs, func(r Result) bool { return r.Result == Error }), Checks: rs}
}

// Marks of each level, as the text output shows them.
var marks = map[Level]string{OK: "✔", Warning: "‼", Error: "✘"}

// WriteResults writes check results as the command shows them, by
// category: ✔, ‼ or ✘, the check, what was found, and where it did not
// pass what to do; then a line that sums them up.
func WriteResults(out io.Writer, rs []Result) {
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
			fmt.Fprintf(out, "    hint: %s\n", r.Hint)
		}
		if r.Result != OK && r.Doc != "" {
			fmt.Fprintf(out, "    see: %s\n", r.Doc)
		}
	}
	fmt.Fprintf(out, "\n%s %d checks: %d %s, %d %s, %d %s\n", marks[worst(rs)], len(rs), counts[OK], marks[OK], counts[Warning], marks[Warning], counts[Error], marks[Error])
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
