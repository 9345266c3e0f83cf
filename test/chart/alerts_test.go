package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/test/helmtest"
	"sigs.k8s.io/yaml"
)

// PromtoolEnv names the environment variable holding promtool (make
// promtool builds it from Go modules).
const promtoolEnv = "GLOBALMIRROR_PROMTOOL"

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

// alertGroups are the chart's PrometheusRule's groups, as m renders them.
func alertGroups(t *testing.T, m helmtest.Manifest) []ruleGroup {
	t.Helper()
	u := m.MustGet(t, "PrometheusRule", helmtest.Namespace, "gm-globalmirror")
	var pr struct {
		Spec struct {
			Groups []ruleGroup `json:"groups"`
		} `json:"spec"`
	}
	helmtest.Typed(t, u, &pr)
	return pr.Spec.Groups
}

func alertRules(t *testing.T, m helmtest.Manifest) []rule {
	var out []rule
	for _, g := range alertGroups(t, m) {
		out = append(out, g.Rules...)
	}
	return out
}

// TestAlerts checks the chart's alerts with promtool, rendered with leader
// election on (the default) and off: the rules are valid PromQL and
// templates (check rules), and each fires where it should and stays quiet
// where it should not (test rules, testdata/alerts_*test.yaml). Each
// alert's runbook is in the chart's README, and every for: is a value.
func TestAlerts(t *testing.T) {
	promtool := os.Getenv(promtoolEnv)
	if promtool == "" {
		t.Fatalf("$%s is not set: run the tests through make (make promtool builds it)", promtoolEnv)
	}
	readme := readFile(t, filepath.Join(helmtest.ChartDir, "README.md"))
	for _, tc := range []struct {
		name, tests string
		values      []string
		absent      []string
	}{
		{"leader election", "alerts_test.yaml", nil, nil},
		// No Lease to hold: an alert on its holder would page forever.
		{"no leader election", "alerts_noleaderelection_test.yaml", []string{"--set", "controller.leaderElection.enabled=false"}, []string{"GlobalmirrorNoLeader"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := helmtest.Template(t, "gm", append([]string{"--set", "alerts.enabled=true", "--set", "coredns.enabled=true"}, tc.values...)...)
			groups := alertGroups(t, m)
			dir := t.TempDir()
			rules, err := yaml.Marshal(map[string]any{"groups": groups})
			if err != nil {
				t.Fatal(err)
			}
			tests := readFile(t, filepath.Join("testdata", tc.tests))
			for name, data := range map[string][]byte{"rules.yaml": rules, tc.tests: tests} {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", tc.tests}} {
				cmd := exec.CommandContext(t.Context(), promtool, args...)
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("promtool %s: %v\n%s\nrules:\n%s", strings.Join(args, " "), err, out, rules)
				}
			}
			for _, r := range alertRules(t, m) {
				if !strings.Contains(string(readme), "#### "+r.Alert) {
					t.Errorf("alert %s has no runbook in the chart's README (#### %s)", r.Alert, r.Alert)
				}
				if r.For == "" {
					t.Errorf("alert %s has no for:", r.Alert)
				}
				if slices.Contains(tc.absent, r.Alert) {
					t.Errorf("alert %s is rendered with %v", r.Alert, tc.values)
				}
				// Each alert has a case that fires and one that stays quiet.
				if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n        exp_alerts:\n") ||
					!strings.Contains(string(tests), "alertname: "+r.Alert+"\n        exp_alerts: []") {
					if tc.absent == nil {
						t.Errorf("alert %s lacks a case that fires or one that stays quiet in %s", r.Alert, tc.tests)
					}
				}
			}
		})
	}
}
