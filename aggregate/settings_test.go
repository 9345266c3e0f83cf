package aggregate

import (
	"strings"
	"testing"
)

func TestSettings(t *testing.T) {
	for suffix, want := range map[string]string{"-global": "", "-all": "", "x": "", "": "must not be empty", "-Global": "cannot end", "-" + strings.Repeat("g", 63): "cannot end"} {
		if err := ValidateSuffix(suffix); (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("ValidateSuffix(%q) = %v, want %q", suffix, err, want)
		}
	}
	for sel, want := range map[string]string{DefaultLocalSelector: "", "app in (db, cache),tier!=test": "", "": "selects every", "a=(": "unable to parse"} {
		s, err := ParseLocalSelector(sel)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) || (err == nil && s.Empty()) {
			t.Errorf("ParseLocalSelector(%q) = %v, %v; want %q", sel, s, err, want)
		}
	}
	if s, err := ParseLocalSelector(NoLocalSelector); s != nil || err != nil {
		t.Errorf("ParseLocalSelector(%q) = %v, %v; want nil, nil (no local members)", NoLocalSelector, s, err)
	}
	for ns, ok := range map[string]bool{"databases": true, "kube-system": true, "Bad": false, "a.b": false, "": false} {
		if err := ValidateNamespace(ns); (err == nil) != ok {
			t.Errorf("ValidateNamespace(%q) = %v, want ok %v", ns, err, ok)
		}
	}
}
