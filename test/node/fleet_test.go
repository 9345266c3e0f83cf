package node_test

import (
	"context"
	"fmt"
	"github.com/globalmirror/globalmirror/aggregate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/test/bench"
	"github.com/globalmirror/globalmirror/test/bulk"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The fleet: Linkerd's shape at 18,000 mirrored endpoints (2,000 services
// exported from each of 3 clusters, 3 pods each: a headless mirror and its
// slice per service and cluster, an endpoint mirror slice per pod), written
// straight into the API as test/bench writes it, in a namespace of its own.
// Without the endpoint mirrors' Services: the global plugin never receives
// them, and their ClusterIPs are what this machine's API server is slowest
// to write (18,000 take minutes more than the rest). Its pod addresses are
// data only (198.18.0.0/15), its endpoint mirrors' slices name a gateway
// nothing sends to.
const (
	fleetNamespace = "fleet"
	fleetBases     = 2000
	// fleetMemoryLimit is the chart CoreDNS's memory limit for the fleet:
	// the stock kubernetes plugin holds every Service and slice of it, past
	// kubeadm's 170Mi.
	fleetMemoryLimit = "512Mi"
)

var fleet = bench.World{Namespace: fleetNamespace, NoEndpointMirrorServices: true}

// fleetEndpoints is how many mirrored endpoints the fleet holds.
var fleetEndpoints = fleetBases * fleet.Records()

// fleetQPS paces the fleet's writes and deletes: the node's pods share its
// two CPUs with the control plane, and an unpaced burst (500 writes a
// second) starved them into lookups lost and retried.
const fleetQPS = 300

// bulkClient is test/bench's writer's client, paced at fleetQPS.
func (s *install) bulkClient() kubernetes.Interface {
	s.t.Helper()
	client, err := bench.BulkClient(s.config, fleetQPS)
	if err != nil {
		s.t.Fatal(err)
	}
	return client
}

// writeFleet writes the fleet with an unthrottled client, and waits until
// every pod of the chart's CoreDNS answers its last global in full.
// writeFleet writes the fleet and waits until each of answering answers
// name (fleetLastGlobal, or its clusterset name) with every record.
func (s *install) writeFleet(answering []corev1.Pod, name string) {
	s.t.Helper()
	client := s.bulkClient()
	began := time.Now()
	s.must(fleet.Load(s.ctx, client, 0, fleetBases, bulk.Workers))
	s.must(fleet.LoadEndpointMirrors(s.ctx, client, 0, fleetBases, bulk.Workers))
	s.t.Logf("fleet: %d mirrored endpoints (%d objects) written in %v",
		fleetEndpoints, 2*fleetBases*len(bench.Clusters)+fleetEndpoints, time.Since(began).Round(time.Second))
	s.awaitFleetAnswered(answering, name)
}

// The asker asks the fleet's names from start to end (fleetAsked): a
// spread of its globals, the last one written included, and the first pod
// of the last one in east. None exists before the fleet is written or
// after it is deleted; while it is written or deleted, each global holds
// the pods of any of the clusters (fleetChanging).
var fleetSpread = []int{0, fleetBases / 2, fleetBases - 1}

// fleetPodName is the global per-pod name of the last global's first pod
// in east.
func fleetPodName() string {
	last := fleetSpread[len(fleetSpread)-1]
	return fleet.EndpointMirror(last, 0, 0) + "." + fleet.FQDN(bench.Global(last))
}

// fleetAsked are the asker's queries of the fleet (TYPE/NAME).
func fleetAsked() []string {
	qs := []string{"host/" + fleetPodName()}
	for _, i := range fleetSpread {
		qs = append(qs, "host/"+fleet.FQDN(bench.Global(i)))
	}
	return qs
}

// allClusters is the mask of every cluster of the fleet.
var allClusters = 1<<len(bench.Clusters) - 1

// withFleet is want with the answers to the fleet's queries while each of
// its globals holds the pods of the clusters in mask (bit c: cluster c of
// bench.Clusters).
func withFleet(want answers, mask int) answers {
	out := maps.Clone(want)
	for _, lib := range []string{"glibc", "go"} {
		pod := result{NotFound: true}
		if mask&1 != 0 {
			last := fleetSpread[len(fleetSpread)-1]
			pod = result{Records: []string{fleet.Addr(last, 0, 0).String()}}
		}
		out[lib+"/host/"+fleetPodName()] = pod
		for _, i := range fleetSpread {
			addrs := fleetAddrs(i, mask)
			out[lib+"/host/"+fleet.FQDN(bench.Global(i))] = result{Records: addrs, NotFound: len(addrs) == 0}
		}
	}
	return out
}

// fleetAddrs are the sorted addresses of the fleet's base i's pods in the
// clusters in mask.
func fleetAddrs(i, mask int) []string {
	var addrs []string
	for c := range bench.Clusters {
		for p := range bench.Pods {
			if mask&(1<<c) != 0 {
				addrs = append(addrs, fleet.Addr(i, c, p).String())
			}
		}
	}
	slices.Sort(addrs)
	return addrs
}

// fleetChanging makes right, from now until the truth is settled, every
// state the fleet's names pass through while it is written or deleted:
// want with (withFleet or withFleetClusterset) each mask of clusters.
func fleetChanging(tr *truth, want answers, with func(answers, int) answers) {
	for mask := range allClusters + 1 {
		tr.now(with(want, mask))
	}
}

// fleetLastGlobal is the name of the fleet's last global.
var fleetLastGlobal = fleet.FQDN(bench.Global(fleetBases - 1))

// awaitFleetAnswered waits until each of pods answers name, one of the
// fleet's last global, with every record.
func (s *install) awaitFleetAnswered(pods []corev1.Pod, name string) {
	s.t.Helper()
	for _, p := range pods {
		if err := scenario.AwaitRecords(s.ctx, net.JoinHostPort(p.Status.PodIP, "53"), name, fleet.Records(), readyTimeout); err != nil {
			s.t.Fatalf("%s answering the fleet: %v", p.Name, err)
		}
	}
}

// deleteFleet deletes what writeFleet wrote, its slices and then its
// Services an object a request (test/bulk: no request grows with the
// fleet, so none outlasts the API server's timeout; the namespace
// controller would delete them at kube-controller-manager's 20 requests a
// second), leaves the globals to the controller, which deletes them once
// their mirrors are gone, then deletes the namespace and waits until it is
// gone.
func (s *install) deleteFleet() {
	s.t.Helper()
	client := s.bulkClient()
	began := time.Now()
	slices, err := bulk.DeleteAll(s.ctx, client.DiscoveryV1().EndpointSlices(fleetNamespace), bench.SliceSelector)
	s.must(err)
	svcs, err := bulk.DeleteAll(s.ctx, client.CoreV1().Services(fleetNamespace), aggregate.LabelMirroredService+"=true")
	s.must(err)
	s.must(bulk.Retry(s.ctx, func(ctx context.Context) error {
		return s.c.CoreV1().Namespaces().Delete(ctx, fleetNamespace, metav1.DeleteOptions{})
	}))
	s.eventually("the fleet's namespace gone", func(ctx context.Context) string {
		if _, err := s.c.CoreV1().Namespaces().Get(ctx, fleetNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("still there (%v)", err)
		}
		return ""
	})
	s.t.Logf("fleet: %d slices and %d Services deleted, and its namespace, in %v", slices, svcs, time.Since(began).Round(time.Second))
}

// rolloutTimes says how long a Deployment's rollout took from began, and
// each of its pods' time from its container's start to Ready.
func (s *install) rolloutTimes(r chartRelease, component string, began time.Time) string {
	s.t.Helper()
	var ready []string
	for _, p := range r.podsOf(s, component) {
		var started, readyAt time.Time
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				started = c.State.Running.StartedAt.Time
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				readyAt = c.LastTransitionTime.Time
			}
		}
		ready = append(ready, fmt.Sprintf("%s Ready %v after its container started", p.Name, readyAt.Sub(started)))
	}
	slices.Sort(ready)
	return fmt.Sprintf("rolled out in %v; %s", time.Since(began).Round(100*time.Millisecond), strings.Join(ready, ", "))
}

// editCorefile replaces old with new in the release's CoreDNS ConfigMap, as
// a user editing it does: the pods are not rolled (only the chart's own
// upgrades change their checksum), and each pod's reload plugin reads the
// edit once the kubelet has written it into the pod's volume.
func (s *install) editCorefile(r chartRelease, old, new string) {
	s.t.Helper()
	cms := s.c.CoreV1().ConfigMaps(r.namespace)
	s.must(bulk.Retry(s.ctx, func(ctx context.Context) error {
		cm, err := cms.Get(ctx, r.deployment("coredns"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !strings.Contains(cm.Data["Corefile"], old) {
			s.t.Fatalf("the Corefile has no %q:\n%s", old, cm.Data["Corefile"])
		}
		cm.Data["Corefile"] = strings.Replace(cm.Data["Corefile"], old, new, 1)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}))
}

// awaitTTL waits until each of pods answers name with its records (how
// many) and ttl, from the instance that read the edited Corefile.
func (s *install) awaitTTL(pods []corev1.Pod, name string, records int, ttl uint32) {
	s.t.Helper()
	for _, p := range pods {
		s.eventually(p.Name+" answering with TTL "+fmt.Sprint(ttl), func(context.Context) string {
			r, err := dnsq.Ask("udp", net.JoinHostPort(p.Status.PodIP, "53"), name, dns.TypeA, 0)
			switch {
			case err != nil:
				return err.Error()
			case len(r.Answer) != records:
				return dnsq.Summary(r, nil)
			case r.Answer[0].Header().Ttl != ttl:
				return fmt.Sprintf("TTL %d", r.Answer[0].Header().Ttl)
			}
			return ""
		})
	}
}

// samePods: the same pods, none of whose containers restarted.
func samePods(before, after []corev1.Pod) bool {
	restarts := func(p corev1.Pod) (n int32) {
		for _, c := range p.Status.ContainerStatuses {
			n += c.RestartCount
		}
		return n
	}
	if len(before) != len(after) {
		return false
	}
	for i := range before {
		if before[i].UID != after[i].UID || restarts(before[i]) != restarts(after[i]) {
			return false
		}
	}
	return true
}

func podNames(pods []corev1.Pod) string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}
