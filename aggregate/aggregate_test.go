package aggregate

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// ep is a compact endpoint for tables: "host=addr" or "addr", "!" prefix = not ready.
func ep(spec string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{}
	if strings.HasPrefix(spec, "!") {
		e.Conditions.Ready = ptr.To(false)
		spec = spec[1:]
	}
	if host, addr, ok := strings.Cut(spec, "="); ok {
		e.Hostname = ptr.To(host)
		spec = addr
	}
	e.Addresses = []string{spec}
	return e
}

func slice(name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns"},
		AddressType: family,
		Ports:       ports,
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, ep(e))
	}
	return s
}

var dbPorts = []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}}

func svc(name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.ServiceSpec{ClusterIP: "None", Ports: ports}}
}

func member(cluster string, slices ...*discoveryv1.EndpointSlice) Member {
	name := "db"
	if cluster != "" {
		name += "-" + cluster
	}
	return Member{Cluster: cluster, Service: svc(name, corev1.ServicePort{Name: "db", Port: 5432}), Slices: slices}
}

// render prints endpoints one per line: family cluster host addrs ready.
func render(v View) []string {
	var out []string
	for _, e := range v.Endpoints {
		r := "ready"
		if !e.Ready {
			r = "not-ready"
		}
		out = append(out, fmt.Sprintf("%s %s %s %s %s", e.AddressType, cmpOr(e.Cluster, "local"), cmpOr(e.Hostname, "-"), strings.Join(e.Addresses, ","), r))
	}
	return out
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func reasons(v View) []string {
	var out []string
	for _, p := range v.Problems {
		out = append(out, p.Reason)
	}
	return out
}

// endpointMirrors gives each named endpoint mirror a slice with one gateway
// endpoint, ready or not, and one more slice with a not-ready endpoint.
func endpointMirrors(ready map[string]bool) map[string][]*discoveryv1.EndpointSlice {
	out := map[string][]*discoveryv1.EndpointSlice{}
	for name, r := range ready {
		gw := "192.0.2.254"
		if !r {
			gw = "!" + gw
		}
		out[name] = []*discoveryv1.EndpointSlice{
			slice(name+"-a", discoveryv1.AddressTypeIPv4, dbPorts, "!192.0.2.253"),
			slice(name+"-b", discoveryv1.AddressTypeIPv4, dbPorts, gw),
		}
	}
	return out
}

func TestMirrorEndpointReady(t *testing.T) {
	for _, tc := range []struct {
		headless bool
		mirror   []*discoveryv1.EndpointSlice
		want     bool
	}{
		{true, nil, true},
		{false, nil, false},
		{true, endpointMirrors(map[string]bool{"m": false})["m"], false},
		{false, endpointMirrors(map[string]bool{"m": true})["m"], true},
		{true, []*discoveryv1.EndpointSlice{slice("empty", discoveryv1.AddressTypeIPv4, dbPorts)}, false},
	} {
		if got := MirrorEndpointReady(tc.headless, tc.mirror); got != tc.want {
			t.Errorf("MirrorEndpointReady(%v, %d slices) = %v, want %v", tc.headless, len(tc.mirror), got, tc.want)
		}
	}
}

func TestAggregate(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	v6 := discoveryv1.AddressTypeIPv6
	long := strings.Repeat("a", 60)
	tests := []struct {
		name     string
		in       Input
		want     []string
		problems []string
	}{{
		name: "local and two mirrors: local names stay, mirror names get the cluster",
		in: Input{Members: []Member{
			member("west", slice("w", v4, dbPorts, "db-0=10.0.2.1", "db-1=10.0.2.2")),
			member("", slice("l", v4, dbPorts, "db-0=10.0.0.1")),
			member("east", slice("e", v4, dbPorts, "db-0=10.0.1.1")),
		}},
		want: []string{
			"IPv4 local db-0 10.0.0.1 ready",
			"IPv4 east db-0-east 10.0.1.1 ready",
			"IPv4 west db-0-west 10.0.2.1 ready",
			"IPv4 west db-1-west 10.0.2.2 ready",
		},
	}, {
		name: "not ready stays, written not ready",
		in:   Input{Members: []Member{member("east", slice("e", v4, dbPorts, "!db-0=10.0.1.1", "db-1=10.0.1.2"))}},
		want: []string{"IPv4 east db-0-east 10.0.1.1 not-ready", "IPv4 east db-1-east 10.0.1.2 ready"},
	}, {
		name: "dead gateway: endpoint mirror without ready endpoints makes the mirror endpoint not ready",
		in: Input{
			Members:         []Member{member("east", slice("e", v4, dbPorts, "db-0=10.0.1.1", "db-1=10.0.1.2", "db-2=10.0.1.3"))},
			EndpointMirrors: endpointMirrors(map[string]bool{"db-0-east": false, "db-1-east": true}),
		},
		want: []string{
			"IPv4 east db-0-east 10.0.1.1 not-ready",
			"IPv4 east db-1-east 10.0.1.2 ready",
			"IPv4 east db-2-east 10.0.1.3 ready", // no endpoint mirror slices: unknown, stays ready
		},
	}, {
		name: "gateway back: a ready endpoint mirror heals a headless mirror Linkerd left not ready",
		in: Input{
			Members:         []Member{member("east", slice("e", v4, dbPorts, "!db-0=10.0.1.1", "!db-1=10.0.1.2", "!db-2=10.0.1.3"))},
			EndpointMirrors: endpointMirrors(map[string]bool{"db-0-east": true, "db-1-east": false}),
		},
		want: []string{
			"IPv4 east db-0-east 10.0.1.1 ready",
			"IPv4 east db-1-east 10.0.1.2 not-ready",
			"IPv4 east db-2-east 10.0.1.3 not-ready", // no endpoint mirror: the headless mirror decides
		},
	}, {
		name: "endpoint mirrors never decide for local endpoints",
		in: Input{
			Members:         []Member{member("", slice("l", v4, dbPorts, "!db-0-east=10.0.0.1"))},
			EndpointMirrors: endpointMirrors(map[string]bool{"db-0-east": true}),
		},
		want: []string{"IPv4 local db-0-east 10.0.0.1 not-ready"},
	}, {
		// What Linkerd leaves after an annotation on east's exported
		// Service: its gateway, on the gateway port, no hostname, in the
		// headless mirror, ready or not as the gateway is.
		name: "a headless mirror rewritten to Linkerd's gateway: the gateway is never a member",
		in: Input{
			Members: []Member{
				member("", slice("l", v4, dbPorts, "db-0=10.0.0.1", "10.0.0.2")),
				member("east", slice("e", v4, []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](4143)}}, "192.0.2.254")),
				member("west", slice("w", v4, dbPorts, "db-0=10.0.2.1", "!192.0.2.254")),
			},
			EndpointMirrors: endpointMirrors(map[string]bool{"db-0-east": true, "db-1-east": true}),
		},
		want: []string{"IPv4 local - 10.0.0.2 ready", "IPv4 local db-0 10.0.0.1 ready", "IPv4 west db-0-west 10.0.2.1 ready"},
	}, {
		name: "collision: local wins over a mirror",
		in: Input{Members: []Member{
			member("", slice("l", v4, dbPorts, "db-0-east=10.0.0.9")),
			member("east", slice("e", v4, dbPorts, "db-0=10.0.1.1")),
		}},
		want:     []string{"IPv4 local db-0-east 10.0.0.9 ready", "IPv4 east - 10.0.1.1 ready"},
		problems: []string{ReasonHostnameCollision},
	}, {
		name: "collision between clusters: the smaller cluster name wins",
		in: Input{Members: []Member{
			member("b-a", slice("x", v4, dbPorts, "x=10.0.2.1")), // x-b-a
			member("a", slice("y", v4, dbPorts, "x-b=10.0.1.1")), // x-b-a
		}},
		want:     []string{"IPv4 a x-b-a 10.0.1.1 ready", "IPv4 b-a - 10.0.2.1 ready"},
		problems: []string{ReasonHostnameCollision},
	}, {
		name: "dual stack: one pod in both families is no collision",
		in: Input{Members: []Member{member("east",
			slice("e4", v4, dbPorts, "db-0=10.0.1.1"),
			slice("e6", v6, dbPorts, "db-0=2001:db8::1"))}},
		want: []string{"IPv4 east db-0-east 10.0.1.1 ready", "IPv6 east db-0-east 2001:db8::1 ready"},
	}, {
		name:     "hostname over 63 characters loses the name, keeps the address",
		in:       Input{Members: []Member{member("east", slice("e", v4, dbPorts, long+"=10.0.1.1"))}},
		want:     []string{"IPv4 east - 10.0.1.1 ready"},
		problems: []string{ReasonInvalidHostname},
	}, {
		name:     "hostile addresses are dropped, the rest kept",
		in:       Input{Members: []Member{member("east", slice("e", v4, dbPorts, "a=not-an-ip", "b=2001:db8::1", "c=10.0.1.3", "d=010.0.1.4"))}},
		want:     []string{"IPv4 east c-east 10.0.1.3 ready"},
		problems: []string{ReasonInvalidAddress, ReasonInvalidAddress, ReasonInvalidAddress},
	}, {
		name: "an endpoint listed twice while it moves between slices counts once, ready if either is",
		in: Input{Members: []Member{member("east",
			slice("e1", v4, dbPorts, "!db-0=10.0.1.1", "db-1=10.0.1.2"),
			slice("e2", v4, dbPorts, "db-0=10.0.1.1"))}},
		want: []string{"IPv4 east db-0-east 10.0.1.1 ready", "IPv4 east db-1-east 10.0.1.2 ready"},
	}, {
		name: "two slices listing one address without a name: once, ready if either copy is",
		in: Input{Members: []Member{member("",
			slice("l1", v4, dbPorts, "!10.0.1.1"),
			slice("l2", v4, dbPorts, "10.0.1.1"))}},
		want: []string{"IPv4 local - 10.0.1.1 ready"},
	}, {
		name: "FQDN slices are ignored; no hostname, no name",
		in: Input{Members: []Member{member("",
			slice("f", discoveryv1.AddressTypeFQDN, dbPorts, "x.example.com"),
			slice("e", v4, dbPorts, "10.0.1.1"))}},
		want: []string{"IPv4 local - 10.0.1.1 ready"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Namespace, tt.in.Base, tt.in.Suffix = "ns", "db", DefaultSuffix
			v := Aggregate(tt.in)
			if got := render(v); !slices.Equal(got, tt.want) {
				t.Errorf("endpoints:\n got %q\nwant %q", got, tt.want)
			}
			if got := reasons(v); !slices.Equal(got, tt.problems) {
				t.Errorf("problems: got %q, want %q (%v)", got, tt.problems, v.Problems)
			}
			if v.Name != "db-global" {
				t.Errorf("name = %q", v.Name)
			}
		})
	}
}

func TestAggregateIsDeterministic(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	a := member("east", slice("e1", v4, dbPorts, "db-1=10.0.1.2"), slice("e0", v4, dbPorts, "db-0=10.0.1.1"))
	b := member("west", slice("w", v4, dbPorts, "db-0=10.0.2.1"))
	one := render(Aggregate(Input{Namespace: "ns", Base: "db", Suffix: "-global", Members: []Member{a, b}}))
	a.Slices[0], a.Slices[1] = a.Slices[1], a.Slices[0]
	two := render(Aggregate(Input{Namespace: "ns", Base: "db", Suffix: "-global", Members: []Member{b, a}}))
	if !slices.Equal(one, two) {
		t.Fatalf("order of inputs changed the view:\n%q\n%q", one, two)
	}
}

func TestUnionPorts(t *testing.T) {
	local := Member{Service: svc("db", corev1.ServicePort{Name: "db", Port: 5432, TargetPort: intstr.FromInt32(5432)})}
	east := Member{Cluster: "east", Service: svc("db-east",
		corev1.ServicePort{Name: "db", Port: 6000},                                    // name taken by local: dropped
		corev1.ServicePort{Name: "metrics", Port: 9187, Protocol: corev1.ProtocolTCP}, // new
		corev1.ServicePort{Name: "dup", Port: 5432},                                   // port/protocol taken: dropped
		corev1.ServicePort{Name: "udp", Port: 5432, Protocol: corev1.ProtocolUDP})}    // same number, other protocol: kept
	west := Member{Cluster: "west", Service: svc("db-west", corev1.ServicePort{Name: "metrics", Port: 9999})} // loses to east
	v := Aggregate(Input{Namespace: "ns", Base: "db", Suffix: "-global", Members: []Member{west, east, local}})
	var got []string
	for _, p := range v.Ports {
		got = append(got, fmt.Sprintf("%s/%d/%s", p.Name, p.Port, p.Protocol))
	}
	want := []string{"db/5432/TCP", "metrics/9187/TCP", "udp/5432/UDP"}
	if !slices.Equal(got, want) {
		t.Fatalf("ports = %q, want %q", got, want)
	}
}

func TestTriggerTimeIsNewestMemberSlice(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	older, newer := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 1, 500, time.UTC)
	s1 := slice("a", v4, dbPorts, "db-0=10.0.1.1")
	s1.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: older.Format(time.RFC3339Nano)}
	s2 := slice("b", v4, dbPorts, "db-1=10.0.1.2")
	s2.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: newer.Format(time.RFC3339Nano)}
	s3 := slice("c", v4, dbPorts, "db-2=10.0.1.3")
	s3.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: "garbage"}
	v := Aggregate(Input{Namespace: "ns", Base: "db", Suffix: "-global", Members: []Member{member("east", s1, s2, s3)}})
	if !v.TriggerTime.Equal(newer) {
		t.Fatalf("trigger time = %v, want %v", v.TriggerTime, newer)
	}
}

func TestExists(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	localOnly := Input{Base: "db", Suffix: "-global", Members: []Member{member("", slice("l", v4, dbPorts))}}
	if Exists(localOnly) {
		t.Error("a local service alone must not make a global")
	}
	withMirror := Input{Base: "db", Suffix: "-global", Members: []Member{member("east")}}
	if !Exists(withMirror) {
		t.Error("a headless mirror without endpoints still makes a global")
	}
	tooLong := Input{Base: strings.Repeat("d", 60), Suffix: "-global", Members: []Member{member("east")}}
	if Exists(tooLong) {
		t.Error("a global name over 63 characters cannot exist")
	}
	if v := Aggregate(tooLong); len(v.Problems) != 1 || v.Problems[0].Reason != ReasonInvalidName {
		t.Errorf("problems = %v, want one %s", v.Problems, ReasonInvalidName)
	}
}

func TestReadyBySaysWhatDecided(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	v := Aggregate(Input{
		Base: "db", Suffix: "-global",
		Members: []Member{
			member("", slice("l", v4, dbPorts, "!db-0=10.0.0.1")),
			member("east", slice("e", v4, dbPorts, "db-0=10.0.1.1", "!db-1=10.0.1.2", "db-2=10.0.1.3")),
		},
		EndpointMirrors: endpointMirrors(map[string]bool{"db-0-east": false, "db-1-east": true}),
	})
	want := map[string]string{
		"db-0":      "false its own condition",
		"db-0-east": "false its endpoint mirror",
		"db-1-east": "true its endpoint mirror", // Linkerd's unrepaired headless mirror overruled
		"db-2-east": "true the headless mirror",
	}
	got := map[string]string{}
	for _, e := range v.Endpoints {
		got[e.Hostname] = fmt.Sprintf("%v %v", e.Ready, e.ReadyBy)
	}
	if !maps.Equal(got, want) {
		t.Errorf("readiness and what decided it:\n got %v\nwant %v", got, want)
	}
}
