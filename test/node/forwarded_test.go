package node_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/bench"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/globalmirror/globalmirror/test/helmtest"
	"github.com/globalmirror/globalmirror/test/node"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// The forwarded zone is the way in for clusters whose DNS you cannot
// replace: kubeadm's stock CoreDNS, untouched but for the server block the
// chart's NOTES print, forwards the clusterset zone to the chart's CoreDNS,
// a DNS of its own. The clusterset asker asks that zone's names through the
// cluster DNS, as any pod of such a cluster does, from before the install
// to the end.

// forwardedRelease runs the chart's CoreDNS alone, for the forwarded zone,
// beside the controller's release.
var forwardedRelease = chartRelease{name: "gm-zone", namespace: "globalmirror"}

const (
	clustersetZone  = "clusterset.local"
	localClusterID  = "source"
	clustersetAsker = "asker-clusterset"
)

// clustersetName is name (a service, or a per-pod name under one) of
// namespace in the clusterset zone.
func clustersetName(name, namespace string) string {
	return name + "." + namespace + ".svc." + clustersetZone
}

// zoneExpectations are the clusterset asker's queries and the answers the
// cluster gives them: before the zone is forwarded (every name NXDOMAIN, from
// the node's upstream), once it is, and with east drained at the shared
// level (east's pods out of the service's name and SRV, their own names
// answering), and with east's gateway down (east's pods out of every name).
type zoneExpectations struct {
	asked                                   []string // TYPE/NAME
	before, forwarded, drained, gatewayDown answers
}

// fleetClusterset is the clusterset name of the fleet's last global's base.
var fleetClusterset = clustersetName(bench.Base(fleetBases-1), fleetNamespace) + "."

// zone is what the clusterset asker asks and is answered, from the same
// world as e: db's local pods under localClusterID, the mirrors' under
// their Linkerd cluster names.
func (e expectations) zone() zoneExpectations {
	service := clustersetName("db", ns)
	perPod := func(global string) string { // db-0-east -> db-0.east.db...
		host, cluster := global, localClusterID
		for _, remote := range []string{"east", "west"} {
			if h, ok := strings.CutSuffix(global, "-"+remote); ok {
				host, cluster = h, remote
			}
		}
		return host + "." + cluster + "." + service + "."
	}
	var all, undrained, srv, undrainedSRV []string
	for global, addr := range e.podNames {
		all = append(all, addr)
		if !strings.HasSuffix(global, "-east") {
			undrained = append(undrained, addr)
		}
	}
	for global := range e.podNames {
		srv = append(srv, "0 "+weight(len(all))+" 5432 "+perPod(global))
		if !strings.HasSuffix(global, "-east") {
			undrainedSRV = append(undrainedSRV, "0 "+weight(len(undrained))+" 5432 "+perPod(global))
		}
	}
	for _, s := range [][]string{all, undrained, srv, undrainedSRV} {
		slices.Sort(s)
	}
	mirrored, local := perPod("db-0-east"), perPod("db-1")
	srvName, nope := "SRV/_db._tcp."+service+".", "SRV/"+clustersetName("nope", ns)+"."
	z := zoneExpectations{
		// The service's name as pods write it, through their search path
		// (ndots:5); the rest absolute.
		asked:     []string{"host/" + service, "host/" + mirrored, "host/" + local, srvName, nope, "host/" + fleetClusterset},
		before:    answers{},
		forwarded: answers{},
		drained:   answers{},
	}
	for _, lib := range []string{"glibc", "go"} {
		q := func(query string) string { return lib + "/" + query }
		nxdomain := result{NotFound: true, NXDomain: lib == "glibc"}
		for _, name := range z.asked {
			z.before[q(name)] = result{NotFound: true}
		}
		z.before[q(srvName)], z.before[q(nope)] = nxdomain, nxdomain
		z.forwarded[q("host/"+service)] = result{Records: all}
		z.forwarded[q("host/"+mirrored)] = result{Records: []string{e.podNames["db-0-east"]}}
		z.forwarded[q("host/"+local)] = result{Records: []string{e.podNames["db-1"]}}
		z.forwarded[q(srvName)] = result{Records: srv}
		z.forwarded[q(nope)] = nxdomain
		z.forwarded[q("host/"+fleetClusterset)] = result{NotFound: true}
	}
	// Once both libraries' are in: copied in the loop, the second's copy
	// would undo the first's drained answers.
	maps.Copy(z.drained, z.forwarded)
	for _, lib := range []string{"glibc", "go"} {
		z.drained[lib+"/host/"+service] = result{Records: undrained}
		z.drained[lib+"/"+srvName] = result{Records: undrainedSRV}
	}
	z.gatewayDown = maps.Clone(z.drained)
	for _, lib := range []string{"glibc", "go"} {
		z.gatewayDown[lib+"/host/"+mirrored] = result{NotFound: true}
	}
	return z
}

// withFleetClusterset is want with the fleet's last clusterset service
// holding the pods of the clusters in mask (as withFleet).
func withFleetClusterset(want answers, mask int) answers {
	out := maps.Clone(want)
	addrs := fleetAddrs(fleetBases-1, mask)
	for _, lib := range []string{"glibc", "go"} {
		out[lib+"/host/"+fleetClusterset] = result{Records: addrs, NotFound: len(addrs) == 0}
	}
	return out
}

// startTimeline runs an asker pod of its own, asking queries (LIB/TYPE/NAME)
// of the DNS server at server, and returns its timeline, judged against tr
// from its first lookup on.
func (s *install) startTimeline(spec *corev1.Pod, tr *truth, queries []string, endpoints *endpointHistory, server netip.Addr) *timeline {
	s.t.Helper()
	pod := s.runPod(spec)
	tl := &timeline{log: &askerLog{s: s, pod: pod.Name, offset: map[string]int{}}, tr: tr, queries: queries,
		wire: s.captureAskersDNS(pod, server), endpoints: endpoints}
	tl.log.readPast(time.Time{})
	tl.at = slices.MinFunc(tl.log.all, func(a, b lookup) int { return cmp.Compare(a.At, b.At) }).asked()
	return tl
}

// installForwarded installs forwardedRelease as the chart's README says
// for the forwarded zone, its pods' tokens lasting tokenLifetime, its
// memory limit the fleet's, waits
// until its pods serve, and returns the server block its NOTES say to add
// to a Corefile, with the Service's ClusterIP for the address its NOTES
// read with kubectl.
func (s *install) installForwarded() string {
	s.t.Helper()
	out := helmtest.Must(s.t, append([]string{"install", forwardedRelease.name, helmtest.ChartDir, "--namespace", forwardedRelease.namespace,
		"--kubeconfig", s.kubeconfig, "--set", "controller.enabled=false", "--set", "coredns.enabled=true",
		"--set", "coredns.forwarded.enabled=true", "--set", "coredns.forwarded.clusterID=" + localClusterID,
		"--set", fmt.Sprintf("coredns.serviceAccount.tokenExpirationSeconds=%d", int(tokenLifetime.Seconds())),
		// It holds the fleet whenever it is written.
		"--set", "coredns.resources.limits.memory=" + fleetMemoryLimit}, s.image("coredns")...)...)
	s.waitRolledOut(forwardedRelease.namespace, forwardedRelease.deployment("coredns"))
	s.awaitAnswering(s.forwardedPods(), clustersetName("db", ns)+".")
	svc, err := s.c.CoreV1().Services(forwardedRelease.namespace).Get(s.ctx, forwardedRelease.deployment("coredns"), metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	readIP := fmt.Sprintf("IP=$(kubectl -n %s get service %s -o jsonpath='{.spec.clusterIP}')", svc.Namespace, svc.Name)
	if !strings.Contains(out, readIP) {
		s.t.Fatalf("the NOTES do not read the Service's address with %s:\n%s", readIP, out)
	}
	return strings.ReplaceAll(notesBlock(s.t, out), "<IP>", svc.Spec.ClusterIP)
}

// tokenLifetime is the forwarded zone's pods' API token lifetime: the
// shortest the API server grants, which the kubelet renews at 80% (8
// minutes), so that it is renewed while the node test runs.
const tokenLifetime = 10 * time.Minute

// podToken is the API token the kubelet has mounted into p, read on the
// node.
func podToken(p corev1.Pod) (string, error) {
	b, err := os.ReadFile(filepath.Join(node.StateDir, "kubelet", "pods", string(p.UID), "volumes", "kubernetes.io~projected", "kube-api-access", "token"))
	return string(b), err
}

// awaitTokensRenewed waits until the kubelet has renewed the token of each
// of pods since it read them into before (pod name -> token).
func (s *install) awaitTokensRenewed(pods []corev1.Pod, before map[string]string) {
	s.t.Helper()
	began := time.Now()
	err := await.Poll(s.ctx, tokenLifetime, time.Second, func(context.Context) string {
		for _, p := range pods {
			token, err := podToken(p)
			if err != nil {
				return err.Error()
			}
			if token == before[p.Name] {
				return p.Name + "'s token not renewed yet"
			}
		}
		return ""
	})
	if err != nil {
		s.t.Fatalf("the forwarded zone's tokens: %v", err)
	}
	s.t.Logf("the forwarded zone's pods' tokens renewed by the kubelet (waited %v)", time.Since(began).Round(time.Second))
}

// indexCounters are a CoreDNS pod's lists of its global index and the
// reloads that handed it over, by how.
type indexCounters struct{ lists, reused, built float64 }

func (s *install) indexCounters(p corev1.Pod) indexCounters {
	s.t.Helper()
	m, err := s.podMetrics(p)
	if err != nil {
		s.t.Fatal(err)
	}
	return indexCounters{lists: m.Sum("coredns_global_lists_total"), reused: m.Sum("coredns_global_handovers_total", `index="reused"`),
		built: m.Sum("coredns_global_handovers_total", `index="built"`)}
}

// notesBlock is the server block the NOTES of a forwarded-zone release say
// to add after the last block of a Corefile, unindented.
func notesBlock(t interface{ Fatalf(string, ...any) }, notes string) string {
	i := strings.Index(notes, "Corefile, add\n")
	if i < 0 {
		t.Fatalf("no server block in the NOTES:\n%s", notes)
	}
	var block []string
	sc := bufio.NewScanner(strings.NewReader(notes[i+len("Corefile, add\n"):]))
	for sc.Scan() && strings.TrimSpace(sc.Text()) != "" {
		block = append(block, strings.TrimPrefix(sc.Text(), "  "))
	}
	text := strings.Join(block, "\n") + "\n"
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(clustersetZone) + `:53 \{\n(    .*\n)+\}\n$`).MatchString(text) {
		t.Fatalf("the NOTES' server block is not one block of %s:\n%s", clustersetZone, text)
	}
	return text
}

// forwardedPods are forwardedRelease's CoreDNS pods.
func (s *install) forwardedPods() []corev1.Pod { return forwardedRelease.podsOf(s, "coredns") }

// awaitForwardedAnswers is awaitAnswers of the client pod through the
// forward; where the answers never come, it first logs what each of the
// forwarded zone's pods holds (its answer, its drain gauges, what it
// logged), the Links and east's mirror, so that a failure says which pod
// kept what.
func (s *install) awaitForwardedAnswers(want answers, service string) {
	s.t.Helper()
	if !s.answered("client", want) {
		s.logForwardedState(service)
		s.t.Fatalf("answers in pod client through the forward, not after %v: %s", readyTimeout, s.wrongAnswers(s.ctx, "client", want))
	}
}

// logForwardedState logs what each forwarded pod answers for service and
// what its drain gauges and log say, with the Links' and db-east's drain
// annotations.
func (s *install) logForwardedState(service string) {
	s.t.Helper()
	for _, p := range s.forwardedPods() {
		r, err := dnsq.Ask("tcp", net.JoinHostPort(p.Status.PodIP, "53"), service, dns.TypeA, 0)
		s.t.Logf("forwarded pod %s (%s): %s A: %v %v", p.Name, p.Status.PodIP, service, r, err)
		if m, err := s.podMetrics(p); err == nil {
			s.t.Logf("  drained clusters shared %v all %v; drained services shared %v all %v; links readable %v",
				m.Sum("coredns_global_drained_clusters", `level="shared"`), m.Sum("coredns_global_drained_clusters", `level="all"`),
				m.Sum("coredns_global_drained_services", `level="shared"`), m.Sum("coredns_global_drained_services", `level="all"`),
				m.Sum("coredns_global_links_readable"))
		} else {
			s.t.Logf("  metrics: %v", err)
		}
		raw, err := s.c.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](60), Timestamps: true}).DoRaw(s.ctx)
		s.t.Logf("  log (%v):\n%s", err, raw)
	}
	dc, err := dynamic.NewForConfig(s.config)
	if err != nil {
		s.t.Fatal(err)
	}
	if l, err := dc.Resource(fixture.LinkGVR).List(s.ctx, metav1.ListOptions{}); err == nil {
		for _, link := range l.Items {
			s.t.Logf("Link %s/%s: annotations %v", link.GetNamespace(), link.GetName(), link.GetAnnotations())
		}
	} else {
		s.t.Logf("Links: %v", err)
	}
	if svc, err := s.c.CoreV1().Services(ns).Get(s.ctx, "db-east", metav1.GetOptions{}); err == nil {
		s.t.Logf("db-east: annotations %v", svc.Annotations)
	}
}
