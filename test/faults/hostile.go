package faults

import (
	"context"
	"fmt"
	"strings"

	"github.com/globalmirror/globalmirror/test/fixture"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// hostileLabel marks the hostile objects, so that they can be removed.
const hostileLabel = "faults.globalmirror.io/hostile"

var hostilePort = fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}

// addHostile writes objects into m that globalmirror must survive: a base
// too long for its global name, a 1000-endpoint slice, hostnames of 63
// characters, duplicated endpoints, an FQDN slice, mirrors without their
// labels or annotations or with a bad cluster name, a user's Service holding
// a global name, a slice port over 65535, and what the API server refuses
// (bad addresses, an address of the wrong family), recorded as refused.
func addHostile(ctx context.Context, r *runner, m *member) (string, error) {
	// One set per cluster: the drawn cluster may have its set already.
	for _, o := range r.members {
		if !r.hostile[m.name] {
			break
		}
		m = o
	}
	c := m.name
	hostile := labels.Set{hostileLabel: "true"}
	var svcs []*corev1.Service
	var sl []*discoveryv1.EndpointSlice
	v4 := discoveryv1.AddressTypeIPv4

	long := fixture.HeadlessMirror(Namespace, strings.Repeat("l", 62-len(c)), c, hostilePort)
	svcs = append(svcs, long)
	sl = append(sl, fixture.Slice(long, "hostile-long", v4, nil, fixture.Ready("p-0", "198.18.9.1")))

	big := fixture.HeadlessMirror(Namespace, "hostile", c, hostilePort)
	svcs = append(svcs, big)
	var eps []fixture.Endpoint
	for i := range 1000 {
		host := ""
		if i < 3 {
			host = fmt.Sprintf("h-%d", i)
		}
		eps = append(eps, fixture.Ready(host, fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)))
	}
	sl = append(sl,
		fixture.Slice(big, "hostile-huge", v4, fixture.SlicePorts(hostilePort), eps...),
		fixture.Slice(big, "hostile-63", v4, nil, fixture.Ready(strings.Repeat("x", 63), "198.18.8.1")),
		fixture.Slice(big, "hostile-dup", v4, nil, fixture.Ready("h-1", "198.18.0.2"), fixture.Ready("h-1", "198.18.0.2"), fixture.NotReady("d", "198.18.8.2")),
		fixture.Slice(big, "hostile-fqdn", discoveryv1.AddressTypeFQDN, nil, fixture.Ready("f", "example.org")),
		// The API server takes a slice port over 65535 (kube 1.36).
		fixture.Slice(big, "hostile-port", v4, fixture.SlicePorts(fixture.Port{Name: "bad", Port: 70000, Protocol: corev1.ProtocolTCP}), fixture.Ready("b", "198.18.9.3")))

	noCluster := fixture.HeadlessMirror(Namespace, "nocluster", c)
	delete(noCluster.Labels, "mirror.linkerd.io/cluster-name")
	noBase := fixture.HeadlessMirror(Namespace, "nobase", c)
	noBase.Name, noBase.Annotations = "nobase-"+c+"-x", nil
	badCluster := fixture.HeadlessMirror(Namespace, "badcluster", c)
	badCluster.Labels["mirror.linkerd.io/cluster-name"] = "East_1"
	owned := fixture.HeadlessMirror(Namespace, "owned", c, hostilePort)
	user := fixture.Service(Namespace, "owned-global", nil, "", hostilePort)
	user.Spec.ClusterIP = ""
	// The user's Service comes before the mirror that would make the
	// controller write its own owned-global, as a user's would.
	svcs = append([]*corev1.Service{user}, svcs...)
	svcs = append(svcs, noCluster, noBase, badCluster, owned)
	sl = append(sl, fixture.Slice(owned, "hostile-owned", v4, nil, fixture.Ready("o-0", "198.18.9.2")))

	// What the API server should refuse.
	refused := []*discoveryv1.EndpointSlice{
		fixture.Slice(big, "hostile-badaddr", v4, nil, fixture.Ready("b", "not-an-ip")),
		fixture.Slice(big, "hostile-family", v4, nil, fixture.Ready("b", "2001:db8::9")),
	}

	for _, s := range svcs {
		s.Labels, s.UID, s.ResourceVersion = labels.Merge(s.Labels, hostile), "", ""
		if _, err := m.c.Client.CoreV1().Services(Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("service %s: %w", s.Name, err)
		}
	}
	for _, s := range sl {
		s.Labels, s.UID, s.ResourceVersion = labels.Merge(s.Labels, hostile), "", ""
		if _, err := m.c.Client.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("slice %s: %w", s.Name, err)
		}
	}
	for _, s := range refused {
		s.Labels, s.UID, s.ResourceVersion = labels.Merge(s.Labels, hostile), "", ""
		_, err := m.c.Client.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, s, metav1.CreateOptions{})
		if err == nil {
			return "", fmt.Errorf("the API server took slice %s, which it should refuse", s.Name)
		}
		r.res.mu.Lock()
		if len(r.res.HostileRejected) < len(refused) {
			r.res.HostileRejected = append(r.res.HostileRejected, fmt.Sprintf("%s: %s", s.Name, firstSentence(err.Error())))
		}
		r.res.mu.Unlock()
	}
	r.hostile[m.name] = true
	return fmt.Sprintf("%d services, %d slices in %s", len(svcs), len(sl), c), nil
}

// removeHostile deletes the hostile objects of one cluster that has some.
func removeHostile(ctx context.Context, r *runner, _ *member) (string, error) {
	for _, m := range r.members {
		if !r.hostile[m.name] {
			continue
		}
		sel := metav1.ListOptions{LabelSelector: hostileLabel + "=true"}
		if err := m.c.Client.DiscoveryV1().EndpointSlices(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
			return "", err
		}
		svcs, err := m.c.Client.CoreV1().Services(Namespace).List(ctx, sel)
		if err != nil {
			return "", err
		}
		// The user's owned-global goes last, once no mirror asks for a
		// global of that name.
		for _, last := range []bool{false, true} {
			for _, s := range svcs.Items {
				if (s.Name == "owned-global") != last {
					continue
				}
				if err := m.c.Client.CoreV1().Services(Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
					return "", err
				}
			}
		}
		delete(r.hostile, m.name)
		return "removed from " + m.name, nil
	}
	return "none", nil
}

func firstSentence(s string) string {
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
