package aggregate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestClassify(t *testing.T) {
	local, err := labels.Parse(DefaultLocalSelector)
	if err != nil {
		t.Fatal(err)
	}
	mirror := map[string]string{LabelMirroredService: "true", LabelClusterName: "east"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	fq := map[string]string{AnnotationRemoteFQName: "db.ns.svc.cluster.local"}
	tests := []struct {
		name        string
		svcName     string
		labels      map[string]string
		annotations map[string]string
		clusterIP   string
		selector    labels.Selector
		want        Classification
		wantWhy     SkipReason
	}{
		{"headless mirror, base from annotation", "db-east", mirror, fq, "None", local,
			Classification{Role: RoleHeadlessMirror, Base: "db", Cluster: "east"}, ""},
		{"headless mirror, base from name", "db-east", mirror, nil, "None", local,
			Classification{Role: RoleHeadlessMirror, Base: "db", Cluster: "east"}, ""},
		{"annotation wins over the name", "renamed-east", mirror, fq, "None", local,
			Classification{Role: RoleHeadlessMirror, Base: "db", Cluster: "east"}, ""},
		{"endpoint mirror", "db-0-east", with(mirror, LabelHeadlessMirrorName, "db-east"), nil, "10.96.0.10", local,
			Classification{Role: RoleEndpointMirror, Cluster: "east", HeadlessMirror: "db-east"}, ""},
		{"ClusterIP mirror is not a member", "web-east", mirror, nil, "10.96.0.11", local, Classification{}, ""},
		{"local exported headless", "db", map[string]string{LabelExported: "true"}, nil, "None", local,
			Classification{Role: RoleLocal, Base: "db"}, ""},
		{"local without the label", "db", nil, nil, "None", local, Classification{}, ""},
		{"local ClusterIP is not a member", "db", map[string]string{LabelExported: "true"}, nil, "10.96.0.12", local, Classification{}, ""},
		{"no local selector", "db", map[string]string{LabelExported: "true"}, nil, "None", nil, Classification{}, ""},
		{"mirror without cluster label", "db-east", map[string]string{LabelMirroredService: "true"}, nil, "None", local,
			Classification{}, SkipMissingClusterName},
		{"hostile cluster label", "db-east", with(mirror, LabelClusterName, "East_1"), nil, "None", local,
			Classification{}, SkipInvalidClusterName},
		{"hostile fq-name", "db-east", mirror, map[string]string{AnnotationRemoteFQName: "DB!.ns"}, "None", local,
			Classification{}, SkipInvalidRemoteName},
		{"name without suffix and no annotation", "db", mirror, nil, "None", local,
			Classification{}, SkipUnknownBase},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: tt.svcName, Namespace: "ns", Labels: tt.labels, Annotations: tt.annotations},
				Spec:       corev1.ServiceSpec{ClusterIP: tt.clusterIP},
			}
			got, skip := Classify(s, tt.selector)
			if got != tt.want {
				t.Errorf("Classify = %+v, want %+v", got, tt.want)
			}
			switch {
			case tt.wantWhy == "" && skip != nil:
				t.Errorf("skipped (%+v), want a classification", skip)
			case tt.wantWhy != "" && (skip == nil || skip.Reason != tt.wantWhy || skip.Detail == ""):
				t.Errorf("skip = %+v, want reason %s with a detail", skip, tt.wantWhy)
			}
		})
	}
}

func TestGlobalNameAndBaseOf(t *testing.T) {
	for _, tc := range []struct {
		name, suffix, base string
		ok                 bool
	}{
		{"db-global", DefaultSuffix, "db", true},
		{"kafka-all", "-all", "kafka", true},
		{"-global", DefaultSuffix, "", false}, // nothing before the suffix
		{"db", DefaultSuffix, "", false},
		{"db-globalx", DefaultSuffix, "", false},
	} {
		base, ok := BaseOf(tc.name, tc.suffix)
		if base != tc.base || ok != tc.ok {
			t.Errorf("BaseOf(%q, %q) = %q, %v; want %q, %v", tc.name, tc.suffix, base, ok, tc.base, tc.ok)
		}
		if ok && GlobalName(base, tc.suffix) != tc.name {
			t.Errorf("GlobalName(BaseOf(%q)) = %q", tc.name, GlobalName(base, tc.suffix))
		}
	}
}

func TestOwnerOf(t *testing.T) {
	ours := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelManagedBy: ManagedBy}}}
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelManagedBy: "helm"}}}
	for svc, want := range map[*corev1.Service]Owner{nil: OwnerNone, ours: OwnerGlobalmirror, theirs: OwnerUser, {}: OwnerUser} {
		if got := OwnerOf(svc); got != want {
			t.Errorf("OwnerOf(%v) = %v, want %v", svc, got, want)
		}
	}
}
