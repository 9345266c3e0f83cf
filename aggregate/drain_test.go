package aggregate

import (
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// readiness renders each endpoint as "cluster/host ready nameReady drain".
func readiness(v View) []string {
	var out []string
	for _, e := range v.Endpoints {
		out = append(out, clusterName(e.Cluster)+"/"+e.Hostname+" "+yes(e.Ready)+" "+yes(e.NameReady)+" "+e.Drained.String())
	}
	return out
}

func yes(b bool) string {
	if b {
		return "ready"
	}
	return "-"
}

func TestDrainLevels(t *testing.T) {
	local := member("", slice("db-1", discoveryv1.AddressTypeIPv4, dbPorts, "db-0=10.0.0.1"))
	east := member("east", slice("db-east-1", discoveryv1.AddressTypeIPv4, dbPorts, "db-0=10.0.1.1", "!db-1=10.0.1.2"))
	west := member("west", slice("db-west-1", discoveryv1.AddressTypeIPv4, dbPorts, "db-0=10.0.2.1"))
	for _, tc := range []struct {
		name   string
		drains map[string]Drain
		local  string // the local service's drain annotation
		east   string // east's headless mirror's: east's own, copied by Linkerd
		want   []string
	}{
		{"none", nil, "", "", []string{
			"the local cluster/db-0 ready ready ", "cluster east/db-0-east ready ready ", "cluster east/db-1-east - - ", "cluster west/db-0-west ready ready "}},
		// Shared: out of the shared answers, its ready endpoints' own names
		// still answer; a not-ready one stays unanswered.
		{"east shared", map[string]Drain{"east": DrainShared}, "", "", []string{
			"the local cluster/db-0 ready ready ", "cluster east/db-0-east - ready shared", "cluster east/db-1-east - - shared", "cluster west/db-0-west ready ready "}},
		{"east all", map[string]Drain{"east": DrainAll}, "", "", []string{
			"the local cluster/db-0 ready ready ", "cluster east/db-0-east - - all", "cluster east/db-1-east - - all", "cluster west/db-0-west ready ready "}},
		{"a cluster with no member", map[string]Drain{"north": DrainAll}, "", "", []string{
			"the local cluster/db-0 ready ready ", "cluster east/db-0-east ready ready ", "cluster east/db-1-east - - ", "cluster west/db-0-west ready ready "}},
		{"local shared", nil, "shared", "", []string{
			"the local cluster/db-0 - ready shared", "cluster east/db-0-east ready ready ", "cluster east/db-1-east - - ", "cluster west/db-0-west ready ready "}},
		{"local all", nil, "all", "", []string{
			"the local cluster/db-0 - - all", "cluster east/db-0-east ready ready ", "cluster east/db-1-east - - ", "cluster west/db-0-west ready ready "}},
		// Drained in east itself: its service's annotation, which Linkerd
		// copies onto its mirror here, drains it as its Link would.
		{"east shared from east", nil, "", "shared", []string{
			"the local cluster/db-0 ready ready ", "cluster east/db-0-east - ready shared", "cluster east/db-1-east - - shared", "cluster west/db-0-west ready ready "}},
		{"east all from east", nil, "", "all", []string{
			"the local cluster/db-0 ready ready ", "cluster east/db-0-east - - all", "cluster east/db-1-east - - all", "cluster west/db-0-west ready ready "}},
		// Both say something: the stronger wins.
		{"east shared by its Link, all from east", map[string]Drain{"east": DrainShared}, "", "all", []string{
			"the local cluster/db-0 ready ready ", "cluster east/db-0-east - - all", "cluster east/db-1-east - - all", "cluster west/db-0-west ready ready "}},
		{"east all by its Link, shared from east", map[string]Drain{"east": DrainAll}, "", "shared", []string{
			"the local cluster/db-0 ready ready ", "cluster east/db-0-east - - all", "cluster east/db-1-east - - all", "cluster west/db-0-west ready ready "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := local
			l.Service = l.Service.DeepCopy()
			if tc.local != "" {
				l.Service.Annotations = map[string]string{AnnotationDrain: tc.local}
			}
			e := east
			e.Service = e.Service.DeepCopy()
			if tc.east != "" {
				e.Service.Annotations = map[string]string{AnnotationDrain: tc.east}
			}
			v := Aggregate(Input{Namespace: "ns", Base: "db", Suffix: DefaultSuffix, Members: []Member{l, e, west}, Drains: tc.drains})
			if got := readiness(v); !slices.Equal(got, tc.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if len(v.Problems) > 0 {
				t.Errorf("problems: %v", v.Problems)
			}
		})
	}
}

// An unknown value on the local service drains nothing and is a problem
// that names the service and the value; on a headless mirror, it leaves
// its cluster's Link's drain as it is.
func TestUnknownLocalDrainIsAProblem(t *testing.T) {
	l := member("", slice("db-1", discoveryv1.AddressTypeIPv4, dbPorts, "db-0=10.0.0.1"))
	l.Service.Annotations = map[string]string{AnnotationDrain: "everything"}
	v := Aggregate(Input{Namespace: "ns", Base: "db", Suffix: DefaultSuffix, Members: []Member{l, member("east")}})
	if got, want := readiness(v), []string{"the local cluster/db-0 ready ready "}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if len(v.Problems) != 1 || v.Problems[0].Reason != ReasonInvalidDrain ||
		!strings.Contains(v.Problems[0].Detail, "ns/db") || !strings.Contains(v.Problems[0].Detail, `"everything"`) {
		t.Errorf("problems: %+v", v.Problems)
	}
	e := member("east", slice("db-east-1", discoveryv1.AddressTypeIPv4, dbPorts, "db-0=10.0.1.1"))
	e.Service.Annotations = map[string]string{AnnotationDrain: "true"}
	v = Aggregate(Input{Namespace: "ns", Base: "db", Suffix: DefaultSuffix, Members: []Member{e}, Drains: map[string]Drain{"east": DrainShared}})
	if got, want := readiness(v), []string{"cluster east/db-0-east - ready shared"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if len(v.Problems) != 1 || !strings.Contains(v.Problems[0].Detail, "ns/db-east") {
		t.Errorf("problems: %+v", v.Problems)
	}
}

func TestParseDrain(t *testing.T) {
	for v, want := range map[string]Drain{"": NotDrained, "shared": DrainShared, "all": DrainAll} {
		if got, err := ParseDrain(v); err != nil || got != want {
			t.Errorf("ParseDrain(%q) = %v, %v; want %v", v, got, err, want)
		}
		if want != NotDrained && want.String() != v {
			t.Errorf("%v.String() = %q, want %q", want, want.String(), v)
		}
	}
	for _, v := range []string{"Shared", "ALL", "true", "none", " shared"} {
		if _, err := ParseDrain(v); err == nil {
			t.Errorf("ParseDrain(%q) took it", v)
		}
	}
}
