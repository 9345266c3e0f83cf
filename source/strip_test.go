package source

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// The sizes DESIGN.md states: an endpoint mirror's slice, the bulk of a
// large world's index, three words (mirrorSlice's comment: no room for a
// generation); a member slice; an entry.
func TestMirrorSliceSize(t *testing.T) {
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"mirrorSlice", unsafe.Sizeof(mirrorSlice{}), 24},
		{"indexedSlice", unsafe.Sizeof(indexedSlice{}), 48},
		{"entry", unsafe.Sizeof(entry{}), 112},
	} {
		if c.got != c.want {
			t.Errorf("a %s is %d bytes, want %d", c.what, c.got, c.want)
		}
	}
}

func TestStripServiceKeepsWhatClassifies(t *testing.T) {
	local, err := labels.Parse("team in (db), tier")
	if err != nil {
		t.Fatal(err)
	}
	keys := labelKeysRead(local)
	ports := []corev1.ServicePort{{Name: "peer", Port: 7000}}
	full := func(name, clusterIP string, lbl map[string]string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: "ns", UID: "u", ResourceVersion: "7", Labels: lbl,
				Annotations:     map[string]string{aggregate.AnnotationRemoteFQName: "db.ns.svc.cluster.local", "other": "x"},
				OwnerReferences: []metav1.OwnerReference{{Name: "owner"}},
				ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
			},
			Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports, Selector: map[string]string{"app": "db"}, Type: corev1.ServiceTypeClusterIP},
		}
	}
	for _, tc := range []struct {
		name       string
		in         *corev1.Service
		wantLabels map[string]string // only the keys something reads
		wantPorts  bool
	}{
		{"headless mirror", full("db-east", corev1.ClusterIPNone, map[string]string{aggregate.LabelMirroredService: "true", "x": "y"}),
			map[string]string{aggregate.LabelMirroredService: "true"}, true},
		{"local member", full("db", corev1.ClusterIPNone, map[string]string{"team": "db", "tier": "1", "x": "y"}),
			map[string]string{"team": "db", "tier": "1"}, true},
		{"headless with a selector key only", full("db2", corev1.ClusterIPNone, map[string]string{"tier": "1"}), map[string]string{"tier": "1"}, true},
		{"managed global", full("db-global", corev1.ClusterIPNone, map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: "db", "user": "x"}),
			map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: "db"}, true},
		{"unrelated headless", full("web", corev1.ClusterIPNone, map[string]string{"app": "web"}), nil, true},
		{"unrelated ClusterIP service", full("api", "10.0.0.1", map[string]string{"app": "api"}), nil, false},
		{"ClusterIP mirror", full("api-east", "10.0.0.2", map[string]string{aggregate.LabelMirroredService: "true"}),
			map[string]string{aggregate.LabelMirroredService: "true"}, false},
		{"endpoint mirror", full("db-0-east", "10.0.0.3", map[string]string{aggregate.LabelMirroredService: "true",
			aggregate.LabelClusterName: "east", aggregate.LabelHeadlessMirrorName: "db-east", "app": "db"}),
			map[string]string{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "east", aggregate.LabelHeadlessMirrorName: "db-east"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newInterner().stripService(tc.in, keys, aggregate.DefaultSuffix, true).service()
			wantUID := types.UID("u")
			if tc.in.Labels[aggregate.LabelMirroredService] == "true" && tc.in.Spec.ClusterIP == corev1.ClusterIPNone {
				wantUID = "" // neither owned nor deleted by uid
			}
			if got.Name != tc.in.Name || got.Namespace != "ns" || got.UID != wantUID || got.Spec.ClusterIP != tc.in.Spec.ClusterIP {
				t.Errorf("identity or cluster IP lost: %+v", got.ObjectMeta)
			}
			if got.ResourceVersion != "" {
				t.Errorf("kept the resource version: %+v", got.ObjectMeta)
			}
			if !reflect.DeepEqual(got.Labels, tc.wantLabels) {
				t.Errorf("labels = %v, want %v", got.Labels, tc.wantLabels)
			}
			if (got.Spec.Ports != nil) != tc.wantPorts || (got.Spec.Selector != nil) != tc.wantPorts {
				t.Errorf("ports %v, selector %v; want kept: %v", got.Spec.Ports, got.Spec.Selector, tc.wantPorts)
			}
			if want := map[string]string{aggregate.AnnotationRemoteFQName: "db.ns.svc.cluster.local"}; !reflect.DeepEqual(got.Annotations, want) {
				t.Errorf("annotations = %v, want %v", got.Annotations, want)
			}
			if got.OwnerReferences != nil || got.ManagedFields != nil || got.Spec.Type != "" {
				t.Errorf("kept fields nothing reads: %+v", got)
			}
			// Classification must not change by stripping.
			wantC, wantWhy := aggregate.Classify(tc.in, local)
			gotC, gotWhy := aggregate.Classify(got, local)
			if gotC != wantC || !reflect.DeepEqual(gotWhy, wantWhy) {
				t.Errorf("Classify after strip = %+v %+v, before %+v %+v", gotC, gotWhy, wantC, wantWhy)
			}
		})
	}
}

func TestStripMemberSliceKeepsAddressesHostnamesReadiness(t *testing.T) {
	ready, host := false, "db-0"
	in := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db-east-abc", Namespace: "ns", UID: "u", ResourceVersion: "9",
			Labels:          map[string]string{discoveryv1.LabelServiceName: "db-east"},
			Annotations:     map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:00Z", "other": "x"},
			OwnerReferences: []metav1.OwnerReference{{Name: "db-east"}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("peer"), Port: new(int32(7000))}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.1.0.1"}, Hostname: &host,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: new(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: "db-0"}, NodeName: new("node"), Zone: new("z"),
		}},
	}
	c := newInterner().stripSlice(in, sliceService(in), aggregate.DefaultSuffix)
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db-east-abc", Namespace: "ns",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "db-east"},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:00Z"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       in.Ports,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.1.0.1"}, Hostname: &host,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		}},
	}
	if got := c.slice(sliceService(in)); !reflect.DeepEqual(got, want) {
		t.Errorf("StripMemberSlice =\n%+v\nwant\n%+v", got, want)
	}
}

// A slice's addresses and hostnames come back exactly as they came: packed
// where each is canonical, as they came where one is not (which the
// aggregation reports).
func TestStripMemberSliceAddressesComeBackAsTheyCame(t *testing.T) {
	for _, tc := range []struct {
		name   string
		family discoveryv1.AddressType
		addrs  [][]string
		packed bool
	}{
		{"IPv4", discoveryv1.AddressTypeIPv4, [][]string{{"10.1.0.1"}, {"10.1.0.2", "192.168.255.254"}, {}, {"0.0.0.0"}}, true},
		{"IPv6", discoveryv1.AddressTypeIPv6, [][]string{{"fd00::1"}, {"2001:db8::ff:1", "::ffff:10.0.0.1"}}, true},
		{"IPv4 not canonical", discoveryv1.AddressTypeIPv4, [][]string{{"10.1.0.1"}, {"010.1.0.2"}}, false},
		{"IPv6 in upper case", discoveryv1.AddressTypeIPv6, [][]string{{"FD00::1"}}, false},
		{"IPv6 in an IPv4 slice", discoveryv1.AddressTypeIPv4, [][]string{{"10.1.0.1", "fd00::1"}}, false},
		{"IPv4 in an IPv6 slice", discoveryv1.AddressTypeIPv6, [][]string{{"10.1.0.1"}}, false},
		{"zoned", discoveryv1.AddressTypeIPv6, [][]string{{"fe80::1%eth0"}}, false},
		{"not an address", discoveryv1.AddressTypeIPv4, [][]string{{"db.example"}}, false},
		{"FQDN", discoveryv1.AddressTypeFQDN, [][]string{{"db.example.org"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-abc", Namespace: "ns"}, AddressType: tc.family}
			for i, a := range tc.addrs {
				e := discoveryv1.Endpoint{Addresses: a}
				if i%2 == 0 {
					e.Hostname = new(fmt.Sprintf("db-%d", i))
				}
				in.Endpoints = append(in.Endpoints, e)
			}
			c := newInterner().stripSlice(in, "", aggregate.DefaultSuffix)
			if packed := c.rare == nil || c.rare.raw == nil; packed != tc.packed {
				t.Errorf("packed = %v, want %v", packed, tc.packed)
			}
			got := c.slice("")
			if len(got.Endpoints) != len(in.Endpoints) {
				t.Fatalf("%d endpoints, want %d", len(got.Endpoints), len(in.Endpoints))
			}
			for i := range in.Endpoints {
				if g, w := got.Endpoints[i].Addresses, in.Endpoints[i].Addresses; !slices.Equal(g, w) {
					t.Errorf("endpoint %d: addresses %q, want %q", i, g, w)
				}
				if g, w := got.Endpoints[i].Hostname, in.Endpoints[i].Hostname; (g == nil) != (w == nil) || (g != nil && *g != *w) {
					t.Errorf("endpoint %d: hostname %v, want %v", i, g, w)
				}
			}
		})
	}
}

// An endpoint mirror's slice is stored as whether an endpoint is ready, and
// answers readiness as the whole slice does.
func TestEndpointMirrorSliceIsStoredAsReadiness(t *testing.T) {
	mirror := func(ready ...bool) *discoveryv1.EndpointSlice {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: "db-0-east-x", Namespace: "ns", UID: "u", ResourceVersion: "3",
				Labels: map[string]string{discoveryv1.LabelServiceName: "db-0-east", aggregate.LabelHeadlessMirrorName: "db-east",
					aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: "east"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: new("peer"), Port: new(int32(4143))}},
		}
		for _, r := range ready {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: new(r)}})
		}
		return sl
	}
	for _, in := range []*discoveryv1.EndpointSlice{mirror(), mirror(false), mirror(true), mirror(false, true), mirror(false, false)} {
		hm := fixture.HeadlessMirror("ns", "db", "east")
		s := indexOf(hm, fixture.Slice(hm, "db-east-abc", discoveryv1.AddressTypeIPv4, nil, fixture.Ready("db-0", "10.1.0.1")), in)
		e := s.entries.get("ns", "db-east")
		if len(e.members) != 1 || s.entries.get("ns", "db-0-east") != nil {
			t.Errorf("an endpoint mirror's slice is stored as a member's: %+v", e.members)
		}
		stored := e.mirrors
		if len(stored) != 1 || stored[0].key != mirrorKey(s.hash.of("db-0-east-x"), mirrorFeed) || stored[0].serviceHash() != mirrorService(s.hash.of("db-0-east")) {
			t.Errorf("stored %+v", stored)
		}
		want := aggregate.MirrorEndpointReady(false, []*discoveryv1.EndpointSlice{in})
		em := s.Input(Key{"ns", "db"}).EndpointMirrors["db-0-east"]
		if got := aggregate.MirrorEndpointReady(false, em); got != want {
			t.Errorf("%d endpoints: ready %v when stored, %v in the API", len(in.Endpoints), got, want)
		}
	}
}

// Linkerd's remote-svc-fq-name is kept only where it names another base than
// the mirror's name does: Classify reads the same either way.
func TestRemoteNameKeptOnlyWhereItDecides(t *testing.T) {
	for _, tc := range []struct {
		name, fq string
		kept     bool
	}{
		{"db-east", "db.ns.svc.cluster.local", false},
		{"db-east", "other.ns.svc.cluster.local", true},
		{"renamed", "db.ns.svc.cluster.local", true},
		{"db-east", "DB.ns.svc.cluster.local", true}, // invalid: Classify reports it
	} {
		svc := fixture.HeadlessMirror("ns", "db", "east")
		svc.Name, svc.Annotations[aggregate.AnnotationRemoteFQName] = tc.name, tc.fq
		got := newInterner().stripService(svc, labelKeysRead(nil), aggregate.DefaultSuffix, true).service()
		if kept := got.Annotations[aggregate.AnnotationRemoteFQName] == tc.fq; kept != tc.kept {
			t.Errorf("%s with %s: kept %v, want %v", tc.name, tc.fq, kept, tc.kept)
		}
		wantC, wantWhy := aggregate.Classify(svc, nil)
		if gotC, gotWhy := aggregate.Classify(got, nil); gotC != wantC || !reflect.DeepEqual(gotWhy, wantWhy) {
			t.Errorf("%s with %s: Classify %+v %+v, before stripping %+v %+v", tc.name, tc.fq, gotC, gotWhy, wantC, wantWhy)
		}
	}
}

// A slice's trigger time is stored as the instant the aggregation reads from
// it; one the aggregation cannot read is stored as none.
func TestStripMemberSliceTriggerTime(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"2026-01-01T01:00:00.123456789+01:00", "2026-01-01T00:00:00.123456789Z"},
		{"yesterday", ""},
		{"9999-01-01T00:00:00Z", ""}, // beyond Unix nanoseconds
		{"", ""},
	} {
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-abc", Namespace: "ns",
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: tc.in}}, AddressType: discoveryv1.AddressTypeIPv4}
		got := newInterner().stripSlice(sl, "", aggregate.DefaultSuffix).slice("db").Annotations[corev1.EndpointsLastChangeTriggerTime]
		if got != tc.want {
			t.Errorf("trigger time %q stored as %q, want %q", tc.in, got, tc.want)
		}
	}
}

// An endpoint mirror's slices stay sorted by key however they arrive, and a
// headless mirror of three pods has three entries, not four.
func TestInsertMirrorKeepsOrderAndSize(t *testing.T) {
	var l []mirrorSlice
	for _, k := range []uint64{30, 10, 20} {
		i, _ := findMirror(l, k)
		l = insertMirror(l, i, mirrorSlice{key: k})
	}
	if cap(l) != 3 || l[0].key != 10 || l[1].key != 20 || l[2].key != 30 {
		t.Errorf("three inserts: %v, capacity %d", l, cap(l))
	}
	for k := range uint64(40) {
		i, had := findMirror(l, 1000-k)
		if had {
			t.Fatalf("%d found before its insert", 1000-k)
		}
		l = insertMirror(l, i, mirrorSlice{key: 1000 - k})
	}
	if !slices.IsSortedFunc(l, func(a, b mirrorSlice) int { return cmp.Compare(a.key, b.key) }) || len(l) != 43 {
		t.Errorf("after 43 inserts: %d, sorted %v", len(l), slices.IsSortedFunc(l, func(a, b mirrorSlice) int { return cmp.Compare(a.key, b.key) }))
	}
}

// A slice's name is stored at the start of its data, only its tail where it
// is named for its service, or, longer than a byte counts (the API admits
// 253), beside it; either way it comes back whole, its endpoints unharmed.
func TestStripMemberSliceKeepsItsName(t *testing.T) {
	for _, tc := range []struct{ name, service, kept string }{
		{"db-abc", "db", "abc"},
		{"db-abc", "web", "db-abc"},
		{"db-", "db", "db-"},
		{"db-abc", "", "db-abc"},
		{strings.Repeat("d", 300), "", strings.Repeat("d", 300)},
		{"db-" + strings.Repeat("d", 300), "db", strings.Repeat("d", 300)},
	} {
		in := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "ns"}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Hostname: new("db-0")}}}
		c := newInterner().stripSlice(in, tc.service, aggregate.DefaultSuffix)
		got := c.slice(tc.service)
		if c.nameKept() != tc.kept || c.name(tc.service) != tc.name || got.Name != tc.name || !c.named(tc.service, tc.name) {
			t.Errorf("%q of %q: kept %q, named %q, given back as %q", tc.name, tc.service, c.nameKept(), c.name(tc.service), got.Name)
		}
		for _, other := range []string{tc.name + "x", "x" + tc.name, tc.service + "-", ""} {
			if other != tc.name && c.named(tc.service, other) {
				t.Errorf("%q of %q is named %q too", tc.name, tc.service, other)
			}
		}
		if len(got.Endpoints) != 1 || got.Endpoints[0].Addresses[0] != "10.1.0.1" || *got.Endpoints[0].Hostname != "db-0" {
			t.Errorf("%q: endpoints %+v", tc.name, got.Endpoints)
		}
	}
}

// Without UIDs (the plugin's index), no Service keeps one; with them, those
// something owns or deletes by do.
func TestStripServiceUIDs(t *testing.T) {
	global := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db-global", Namespace: "ns", UID: "u1",
		Labels: map[string]string{aggregate.LabelManagedBy: aggregate.ManagedBy, aggregate.LabelBase: "db"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	keys := labelKeysRead(nil)
	if got := newInterner().stripService(global, keys, aggregate.DefaultSuffix, true).service(); got.UID != "u1" || got.Labels[aggregate.LabelBase] != "db" {
		t.Errorf("kept: UID %q, base %q", got.UID, got.Labels[aggregate.LabelBase])
	}
	c := newInterner().stripService(global, keys, aggregate.DefaultSuffix, false)
	if got := c.service(); got.UID != "" || got.Labels[aggregate.LabelBase] != "db" || c.rare != nil {
		t.Errorf("without UIDs: UID %q, base %q, rare %+v", got.UID, got.Labels[aggregate.LabelBase], c.rare)
	}
}
