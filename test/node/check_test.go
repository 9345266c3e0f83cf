package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"

	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/test/run"
)

// globalmirror runs the globalmirror command against the node's cluster,
// as an operator would, and returns its output and exit code.
func (s *install) globalmirror(ctx context.Context, args ...string) (string, int, error) {
	bin, err := run.Bin("globalmirror")
	if err != nil {
		return "", 0, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode(), nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("globalmirror %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), 0, nil
}

// expectCheck waits until `globalmirror check` fails exactly the checks
// named in failing, each with a hint that says what failing gives for it,
// passes every other, and exits 1 where any failed; it logs the text the
// operator reads, and returns it.
func (s *install) expectCheck(failing map[string]string) string {
	s.t.Helper()
	var last string
	s.eventually("globalmirror check", func(ctx context.Context) string {
		out, code, err := s.globalmirror(ctx, "check", "-o", "json")
		if err != nil {
			return err.Error()
		}
		var rs []cli.Result
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			return fmt.Sprintf("output: %v\n%s", err, out)
		}
		if len(rs) < 10 {
			return fmt.Sprintf("%d checks", len(rs))
		}
		var wrong []string
		for _, r := range rs {
			hint, want := failing[r.Check]
			switch {
			case want && r.OK:
				wrong = append(wrong, fmt.Sprintf("%s passed (%s); want it to fail", r.Check, r.Detail))
			case !want && !r.OK:
				wrong = append(wrong, fmt.Sprintf("%s failed: %s (hint: %s)", r.Check, r.Detail, r.Hint))
			case want && !strings.Contains(r.Hint, hint):
				wrong = append(wrong, fmt.Sprintf("%s failed with hint %q; want one with %q", r.Check, r.Hint, hint))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(failing)) {
			if !slices.ContainsFunc(rs, func(r cli.Result) bool { return r.Check == name }) {
				wrong = append(wrong, "no check named "+name)
			}
		}
		if wantCode := map[bool]int{true: 1, false: 0}[len(failing) > 0]; code != wantCode {
			wrong = append(wrong, fmt.Sprintf("exit code %d, want %d", code, wantCode))
		}
		var text strings.Builder
		cli.WriteResults(&text, rs)
		last = text.String()
		return strings.Join(wrong, "\n")
	})
	s.t.Logf("globalmirror check:\n%s", last)
	return last
}

// expectStatus checks what `globalmirror status` says of db-global: every
// member, each of its per-pod names with its address, ready, and the
// controller's slices in sync; it logs the table the operator reads.
func (s *install) expectStatus(want map[string]string) {
	s.t.Helper()
	s.eventually("globalmirror status", func(ctx context.Context) string {
		out, code, err := s.globalmirror(ctx, "status", "-o", "json", ns+"/db-global")
		if err != nil || code != 0 {
			return fmt.Sprintf("exit %d: %v\n%s", code, err, out)
		}
		var st cli.GlobalStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Sprintf("output: %v\n%s", err, out)
		}
		got := map[string]string{}
		var wrong []string
		for _, e := range st.Endpoints {
			host, _, _ := strings.Cut(e.Name, ".")
			got[host] = strings.Join(e.Addresses, ",")
			if e.Name != host+".db-global."+ns+".svc" || !e.Ready {
				wrong = append(wrong, fmt.Sprintf("%+v", e))
			}
		}
		members := len(st.Members)
		if !maps.Equal(got, want) || len(wrong) > 0 || !st.Exists || !st.InSync || members != 3 || len(st.Problems) > 0 {
			return fmt.Sprintf("status: %d members, per-pod names %v, want %v; exists %v, in sync %v (missing %v, extra %v), problems %v, rows not ready or misnamed %v",
				members, got, want, st.Exists, st.InSync, st.Missing, st.Extra, st.Problems, wrong)
		}
		return ""
	})
	out, _, err := s.globalmirror(s.ctx, "status", ns+"/db-global")
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("globalmirror status %s/db-global:\n%s", ns, out)
}
