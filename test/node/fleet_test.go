package node_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/bench"
	"github.com/globalmirror/globalmirror/test/scenario"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	bulk, err := bench.BulkClient(s.config, fleetQPS)
	if err != nil {
		s.t.Fatal(err)
	}
	return bulk
}

// writeFleet writes the fleet with an unthrottled client, and waits until
// every pod of the chart's CoreDNS answers its last global in full.
func (s *install) writeFleet() {
	s.t.Helper()
	bulk := s.bulkClient()
	began := time.Now()
	s.must(fleet.Load(s.ctx, bulk, 0, fleetBases, 8))
	s.must(fleet.LoadEndpointMirrors(s.ctx, bulk, 0, fleetBases, 8))
	s.t.Logf("fleet: %d mirrored endpoints (%d objects) written in %v",
		fleetEndpoints, 2*fleetBases*len(bench.Clusters)+fleetEndpoints, time.Since(began).Round(time.Second))
	s.awaitFleetAnswered(dnsRelease.podsOf(s, "coredns"))
}

// awaitFleetAnswered waits until each of pods answers the fleet's last
// global with every record.
func (s *install) awaitFleetAnswered(pods []corev1.Pod) {
	s.t.Helper()
	name := fleet.FQDN(bench.Global(fleetBases - 1))
	for _, p := range pods {
		if err := scenario.AwaitRecords(s.ctx, net.JoinHostPort(p.Status.PodIP, "53"), name, fleet.Records(), readyTimeout); err != nil {
			s.t.Fatalf("%s answering the fleet: %v", p.Name, err)
		}
	}
}

// deleteFleet deletes the fleet's slices a linked cluster at a time (one
// request for all of them outlasts the API server's 60 s), and its
// Services each (Services have no delete-collection; the namespace
// controller would delete them at kube-controller-manager's 20 requests a
// second), then its namespace, and waits until that is gone.
func (s *install) deleteFleet() {
	s.t.Helper()
	bulk := s.bulkClient()
	began := time.Now()
	for _, cluster := range bench.Clusters {
		s.must(bulk.DiscoveryV1().EndpointSlices(fleetNamespace).DeleteCollection(s.ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: aggregate.LabelClusterName + "=" + cluster}))
	}
	svcs, err := bulk.CoreV1().Services(fleetNamespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	g, gctx := errgroup.WithContext(s.ctx)
	g.SetLimit(8)
	for _, svc := range svcs.Items {
		g.Go(func() error {
			if err := bulk.CoreV1().Services(fleetNamespace).Delete(gctx, svc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	s.must(g.Wait())
	s.must(s.c.CoreV1().Namespaces().Delete(s.ctx, fleetNamespace, metav1.DeleteOptions{}))
	s.eventually("the fleet's namespace gone", func(ctx context.Context) string {
		if _, err := s.c.CoreV1().Namespaces().Get(ctx, fleetNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("still there (%v)", err)
		}
		return ""
	})
	s.t.Logf("fleet: deleted in %v", time.Since(began).Round(time.Second))
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
