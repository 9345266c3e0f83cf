package aggregate

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// benchInput is one base with a local member and clusters × pods mirrored pods.
func benchInput(clusters, pods int) Input {
	in := Input{Namespace: "ns", Base: "db", Suffix: DefaultSuffix, EndpointMirrors: map[string][]*discoveryv1.EndpointSlice{}}
	for c := 0; c <= clusters; c++ {
		cluster := ""
		if c > 0 {
			cluster = fmt.Sprintf("c%d", c)
		}
		var eps []string
		for p := 0; p < pods; p++ {
			eps = append(eps, fmt.Sprintf("db-%d=10.%d.%d.%d", p, c, p/250, p%250+1))
			if cluster != "" {
				name := fmt.Sprintf("db-%d-%s", p, cluster)
				in.EndpointMirrors[name] = []*discoveryv1.EndpointSlice{slice(name, discoveryv1.AddressTypeIPv4, dbPorts, "192.0.2.254")}
			}
		}
		in.Members = append(in.Members, member(cluster, slice("s", discoveryv1.AddressTypeIPv4, dbPorts, eps...)))
	}
	return in
}

func BenchmarkAggregate(b *testing.B) {
	for _, size := range []struct{ clusters, pods int }{{2, 3}, {3, 100}} {
		in := benchInput(size.clusters, size.pods)
		b.Run(fmt.Sprintf("clusters=%d/pods=%d", size.clusters, size.pods), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v := Aggregate(in)
				if len(v.Endpoints) != (size.clusters+1)*size.pods {
					b.Fatalf("got %d endpoints", len(v.Endpoints))
				}
			}
		})
	}
}
