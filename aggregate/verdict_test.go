package aggregate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGlobalVerdict(t *testing.T) {
	withMirror := Input{Base: "db", Suffix: "-global", Members: []Member{member("east")}}
	noMirror := Input{Base: "db", Suffix: "-global"}
	ours := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db-global", Labels: map[string]string{LabelManagedBy: ManagedBy}}}
	users := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db-global"}}
	for _, tc := range []struct {
		name   string
		in     Input
		holder *corev1.Service
		want   Verdict
	}{
		{"mirror, name free", withMirror, nil, VerdictBuild},
		{"mirror, our Service", withMirror, ours, VerdictBuild},
		{"mirror, a user's Service", withMirror, users, VerdictConflict},
		{"no mirror, name free", noMirror, nil, VerdictNone},
		{"no mirror, our Service left", noMirror, ours, VerdictRemove},
		{"no mirror, a user's Service", noMirror, users, VerdictYield},
	} {
		if got := GlobalVerdict(tc.in, tc.holder); got != tc.want {
			t.Errorf("%s: verdict %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestManagedBase(t *testing.T) {
	if b, ok := ManagedBase(map[string]string{LabelBase: "db"}, "other-global", "-global"); b != "db" || !ok {
		t.Errorf("base label: %q %v, want db", b, ok)
	}
	if b, ok := ManagedBase(nil, "db-global", "-global"); b != "db" || !ok {
		t.Errorf("label removed: %q %v, want db from the name", b, ok)
	}
	if _, ok := ManagedBase(nil, "db", "-global"); ok {
		t.Error("a name without the suffix has no base")
	}
}
