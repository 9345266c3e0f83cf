package build

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// The chart allows no Kubernetes older than the oldest release proven.
func TestKubernetesMinorsStartWhereTheChartDoes(t *testing.T) {
	got := KubernetesMinors()
	if len(got) < 2 || !slices.IsSorted(got) {
		t.Fatalf("minors %v: want at least two, sorted", got)
	}
	chart, err := os.ReadFile("../charts/globalmirror/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^kubeVersion: ">=1\.(\d+)\.0-0"$`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no kubeVersion >=1.N.0-0")
	}
	if oldest, _ := strconv.Atoi(string(m[1])); oldest != got[0] {
		t.Errorf("the chart allows 1.%d and later, the oldest release proven is 1.%d", oldest, got[0])
	}
}
