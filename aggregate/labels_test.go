package aggregate

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The byte loop says what the validation package says, for every label of
// up to three characters over an alphabet with each kind of character, and
// at the length bound.
func TestLabelChecksAgreeWithValidation(t *testing.T) {
	alphabet := []string{"a", "z", "0", "9", "-", "A", ".", "_", "é"}
	labels := []string{"", strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "a", "db-0", "s00042-east"}
	for _, a := range alphabet {
		labels = append(labels, a)
		for _, b := range alphabet {
			labels = append(labels, a+b)
			for _, c := range alphabet {
				labels = append(labels, a+b+c)
			}
		}
	}
	for _, l := range labels {
		if got, want := len(IsDNS1123Label(l)) == 0, len(validation.IsDNS1123Label(l)) == 0; got != want {
			t.Errorf("IsDNS1123Label(%q) valid %v, validation says %v", l, got, want)
		}
		if got, want := len(IsDNS1035Label(l)) == 0, len(validation.IsDNS1035Label(l)) == 0; got != want {
			t.Errorf("IsDNS1035Label(%q) valid %v, validation says %v", l, got, want)
		}
	}
}
