package node_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/test/helmtest"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/node"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/globalmirror/globalmirror/test/workload"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The releases: the controller in a namespace of its own, under Pod
// Security's restricted level; the cluster DNS in kube-system, where the
// kube-dns Service is.
var (
	controllerRelease = chartRelease{name: "gm", namespace: "globalmirror"}
	dnsRelease        = chartRelease{name: "gm-dns", namespace: metav1.NamespaceSystem}
)

// TestAdoptionOnANode changes the DNS of a running kubeadm-style cluster to
// globalmirror the ways the chart's README offers, on a real node, while a
// client pod never stops asking (the asker); then rolls CoreDNS the ways
// users do, and backs out. Every lookup of the asker is judged, step after
// step (timeline): none may fail, be wrong or be slow, except that where
// kubeadm's own pods end a few may be lost to them (kubeadmPodsEnd),
// and each step asks every query at minRate at least.
func TestAdoptionOnANode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a node, three control planes and the chart")
	}
	ctx := t.Context()
	logs := t.TempDir()
	env, err := localkube.Start(ctx, localkube.Options{
		Clusters:     []string{"source", "east", "west"},
		Dir:          filepath.Join(logs, "clusters"),
		RealNodes:    []string{"source"},
		NodeAddress:  netip.MustParseAddr(node.NodeIP),
		StopOnSignal: true,
	})
	if err != nil {
		t.Fatalf("localkube: %v", err)
	}
	source := env.Cluster("source")
	started := time.Now()
	n, err := node.Start(ctx, node.Options{Cluster: source, LogDir: filepath.Join(logs, "node"),
		Images: []string{"client", "coredns-stock", "controller", "coredns"}})
	if err != nil {
		t.Log(localkube.LogTails(filepath.Join(logs, "clusters"), 30))
		_ = env.Stop()
		t.Fatalf("node: %v", err)
	}
	t.Logf("node Ready in %v", time.Since(started).Round(time.Millisecond))
	world := scenario.NewWorld(source, ns, filepath.Join(logs, "world"))
	// The step that first failed, said again after the logs below: CI
	// shows only the output's tail.
	firstFailed := "the set-up, before the first step"
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.LogTails(3000))
			t.Log(localkube.LogTails(filepath.Join(logs, "clusters"), 20))
		}
		_ = world.Stop()
		n.Stop()
		if err := env.Stop(); err != nil {
			t.Errorf("localkube: stop: %v", err)
		}
		if t.Failed() {
			t.Logf("FAILED first in %s (the error is above the logs; the node's cgroup: %s)", firstFailed, node.Weighed())
		}
	})
	s := &install{t: t, ctx: ctx, node: n, c: source.Client, config: source.Config, kubeconfig: source.Kubeconfig,
		checkedPods: map[types.UID]string{}, readPods: map[types.UID]bool{}}
	s.auditRestricted()

	// Start like a kubeadm cluster: its cluster DNS, running a stock
	// CoreDNS of the version globalmirror builds on.
	kubeadm, err := loadKubeadmDNS(n.Images["coredns-stock"])
	if err != nil {
		t.Fatal(err)
	}
	s.createKubeadmDNS(kubeadm)
	s.waitRolledOut(metav1.NamespaceSystem, "coredns")

	// The workloads: db on this node (a StatefulSet of three, headless,
	// exported) and in two remote clusters, mirrored into the source by the
	// Linkerd mirror simulator.
	s.createNamespace(ns, nil)
	s.statefulSet("db", 3)
	var remoteDB []*workload.Workload // east's, west's
	for i, remote := range []*localkube.Cluster{env.Cluster("east"), env.Cluster("west")} {
		prefix := []string{"192.0.2.0/24", "203.0.113.0/24"}[i]
		wl, err := workload.Create(ctx, remote.Client, ns, "db", 2, workload.Options{
			Labels: map[string]string{workload.ExportedLabel: "true"},
			IPv4:   netip.MustParsePrefix(prefix),
		})
		s.must(err)
		remoteDB = append(remoteDB, wl)
		world.Links = true // Linkerd's Links, for the drain
		s.must(world.Link(ctx, remote))
	}
	want := s.expectations()
	// A client (which waits) with the kubelet's default DNS policy, ClusterFirst.
	s.runPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"}, Spec: s.podSpec("client", "client")})
	s.checkResolvConf("client")

	// What kube-proxy is told, from before the asker asks to the end.
	endpoints := s.watchKubeDNSEndpoints(ctx)
	// The asker asks from before the first install to the end.
	tr := &truth{}
	tr.now(want.before)
	asked := withBothResolvers(want.asked)
	tl := s.startTimeline(s.askerSpec("asker", asked), tr, asked, endpoints, netip.MustParseAddr(node.ClusterDNS))
	// timelines are the askers' timelines: the asker's, from the start,
	// and from the forwarded zone's steps on, the clusterset asker's.
	timelines := []*timeline{tl}
	var ended []*timeline // no longer asking, for the report at the end

	// step does a step, then ends its span of each timeline and judges it.
	step := func(name string, allows allowance, do func()) {
		t.Helper()
		var problems, samples []string
		if !t.Failed() {
			defer func() {
				if t.Failed() {
					firstFailed = fmt.Sprintf("%s %v %v", name, problems, samples)
				}
			}()
		}
		do()
		// Every pod the step made is read as it runs.
		if read := s.expectProbedAndUnprivileged(controllerRelease, dnsRelease, forwardedRelease); read > 0 {
			t.Logf("%s: %d new pods of the releases read from /proc and their runtime specs", name, read)
		}
		if allows == kubeadmPodsEnd {
			// What kubeadm's ended pods left (UDP conntrack entries to
			// them) lasts until kube-proxy has synced after their
			// endpoints went: the step's, not the next one's.
			time.Sleep(5 * time.Second)
		}
		for i, tl := range timelines {
			label := name
			if i > 0 {
				label = tl.log.pod + ": " + name
			}
			tally := tl.end(label, allows)
			t.Logf("%s", tally)
			samples = append(samples, tally.Samples[:min(3, len(tally.Samples))]...)
			if p := tally.problems(allows); len(p) > 0 {
				problems = append(problems, p...)
				var warnings []string
				if !tally.FirstBad.IsZero() {
					warnings = s.dnsWarnings(tally.FirstBad, 10*time.Second)
				}
				t.Errorf("%s: %s\n%s\n%s%s\nCoreDNS's warnings and errors within 10 s:\n  %s", tally.Step, strings.Join(p, "; "), tally,
					endpoints.around(tally.FirstBad, 10*time.Second), tl.wire.during(tally.firstBad), strings.Join(warnings, "\n  "))
				samples = append(samples, warnings[:min(3, len(warnings))]...)
			}
		}
	}
	defer func() {
		for _, tl := range append(slices.Clone(timelines), ended...) {
			t.Logf("lookups per step of %s:\n%s", tl.log.pod, markdown(tl.tallies))
		}
	}()

	step("kubeadm's cluster DNS, before globalmirror", strict, func() {
		s.awaitAnswers("client", want.before)
		time.Sleep(5 * time.Second)
	})

	// 1. The controller alone: the stock CoreDNS answers db-global from
	// its slices, with their ready addresses only, so the answers prove
	// the controller's work, done with its in-cluster configuration and
	// the chart's RBAC; globalmirror check names what is left to do.
	step("1. helm install, the controller only", strict, func() {
		s.createNamespace(controllerRelease.namespace, map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
		tr.now(want.global)
		helmtest.Must(t, append([]string{"install", controllerRelease.name, helmtest.ChartDir, "--namespace", controllerRelease.namespace,
			"--kubeconfig", s.kubeconfig}, s.image("controller")...)...)
		s.waitRolledOut(controllerRelease.namespace, controllerRelease.deployment("controller"))
		s.awaitAnswers("client", want.global)
		tr.settled()
		s.expectCheck(map[string]string{
			"cluster DNS image":           "patch deployment/coredns",
			"global stanza":               "global cluster.local",
			"plugin and controller agree": "– global stanza check",
			"both halves serve them":      "– cluster DNS image check",
			"DNS answers":                 "– cluster DNS image check",
			// kubeadm's system:coredns may not read Linkerd's Links.
			"RBAC of the cluster DNS": "‼ links.multicluster.linkerd.io",
		})
	})

	// 2. Patch the cluster's CoreDNS as the chart's README says: its image
	// and readiness probe (kubectl patch), then the global stanza and the
	// lameduck in its ConfigMap (kubectl edit), which the reload plugin
	// applies; then back, in the README's order.
	stockCorefile := kubeadm.configMap.Data["Corefile"]
	step("2. kubeadm's CoreDNS: the globalmirror image", kubeadmPodsEnd, func() {
		s.grantLinksToKubeadmDNS()
		s.patchKubeadmCoreDNS(n.Images["coredns"], patchedReadinessPeriod)
	})
	step("2. checked: the stanza in a Corefile CoreDNS rejects", strict, func() {
		// An unknown plugin: the reload plugin keeps the running instance,
		// which has no global, while the ConfigMap has the stanza.
		rejected := patchedCorefile(t, stockCorefile)
		if !strings.Contains(rejected, "    reload\n") {
			t.Fatalf("no reload line in the patched Corefile:\n%s", rejected)
		}
		s.writeCorefile(strings.Replace(rejected, "    reload\n", "    nosuchplugin\n    reload\n", 1))
		s.expectCheck(map[string]string{"global stanza": "keeps the old one where it rejects the new", "both halves serve them": "behind or stuck"})
	})
	step("2. kubeadm's CoreDNS: the global stanza in its Corefile", reloads, func() {
		s.setCorefile(patchedCorefile(t, stockCorefile), true)
		s.expectCheck(nil)
		s.expectStatus(want.podNames)
	})
	step("2. checked: a stanza whose suffix is not the controller's", reloads, func() {
		// The stock plugin answers db-global from the controller's slices
		// whichever stanza runs.
		s.setCorefile(patchedCorefile(t, stockCorefile, "suffix -all"), true)
		s.expectCheck(map[string]string{"plugin and controller agree": "the same suffix"})
	})
	step("2. rolled back: the stanza removed", reloads, func() {
		s.setCorefile(withLameduck(t, stockCorefile, patchedLameduck), false)
	})
	step("2. rolled back: the stock image", strict, func() {
		s.patchKubeadmCoreDNS(n.Images["coredns-stock"], kubeadmReadinessPeriod)
	})

	// 3. The chart's CoreDNS beside kubeadm's, behind the same kube-dns
	// Service; then kubeadm's scaled to 0.
	step("3. helm install, the chart's CoreDNS beside kube-dns", strict, func() {
		helmtest.Must(t, append([]string{"install", dnsRelease.name, helmtest.ChartDir, "--namespace", dnsRelease.namespace,
			"--kubeconfig", s.kubeconfig, "--set", "controller.enabled=false", "--set", "coredns.enabled=true",
			"--set", "coredns.isClusterService=true", "--set", "coredns.service.enabled=false"}, s.image("coredns")...)...)
		s.waitRolledOut(dnsRelease.namespace, dnsRelease.deployment("coredns"))
		s.awaitServing(dnsRelease.podsOf(s, "coredns"))
	})
	step("3. kubeadm's CoreDNS scaled to 0", kubeadmPodsEnd, func() {
		s.scale(metav1.NamespaceSystem, "coredns", 0)
	})

	// 4. The chart takes the kube-dns Service over: helm adopts the
	// existing object (the annotations and label helm looks for), and
	// keeps its ClusterIP.
	step("4. helm upgrade: the chart owns kube-dns", strict, func() {
		before, err := s.c.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.adoptForHelm(metav1.NamespaceSystem, "kube-dns", dnsRelease)
		helmtest.Must(t, "upgrade", dnsRelease.name, helmtest.ChartDir, "--namespace", dnsRelease.namespace, "--kubeconfig", s.kubeconfig,
			"--reuse-values", "--set", "coredns.service.enabled=true", "--set", "coredns.service.name=kube-dns",
			"--set", "coredns.service.clusterIP="+node.ClusterDNS)
		after, err := s.c.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.UID != before.UID || after.Spec.ClusterIP != node.ClusterDNS || after.Labels["app.kubernetes.io/instance"] != dnsRelease.name {
			t.Errorf("kube-dns after the upgrade: uid %s (was %s), ClusterIP %s, labels %v", after.UID, before.UID, after.Spec.ClusterIP, after.Labels)
		}
		s.expectCheck(nil)
	})

	// The chart's CoreDNS for a forwarded zone (step 5), installed now so
	// that the kubelet renews its pods' tokens (tokenLifetime) before
	// step 5 edits its Corefile; nothing forwards to it until then.
	var forwardBlock string
	forwardedTokens := map[string]string{}
	step("the chart's CoreDNS for a forwarded zone installed beside, not yet forwarded to", strict, func() {
		forwardBlock = s.installForwarded()
		for _, p := range s.forwardedPods() {
			token, err := podToken(p)
			if err != nil {
				t.Fatal(err)
			}
			forwardedTokens[p.Name] = token
		}
	})

	// On the final set-up, what users do to a running cluster DNS.
	step("helm upgrade that rolls CoreDNS (reverse names on)", strict, func() {
		old := dnsRelease.podsOf(s, "coredns")
		tr.now(want.reverse)
		values := helmtest.WriteValues(t, "coredns:\n"+corednsServers("ttl 5\n            reverse"))
		helmtest.Must(t, "upgrade", dnsRelease.name, helmtest.ChartDir, "--namespace", dnsRelease.namespace, "--kubeconfig", s.kubeconfig,
			"--reuse-values", "-f", values)
		s.waitReplaced(dnsRelease, "coredns", old)
		s.awaitAnswers("client", want.reverse)
		tr.settled()
	})
	step("every CoreDNS pod deleted at once (the old ones answer through their lameduck)", strict, func() {
		old := dnsRelease.podsOf(s, "coredns")
		for _, p := range old {
			s.must(s.c.CoreV1().Pods(dnsRelease.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}))
		}
		s.waitReplaced(dnsRelease, "coredns", old)
		s.awaitAnswers("client", want.reverse)
	})
	// At scale: the fleet (Linkerd's shape at 18,000 mirrored endpoints)
	// written into the cluster, with CoreDNS's memory limit raised for the
	// stock kubernetes plugin first; a rolling restart, an eviction and a
	// Corefile edit with it; then it is deleted.
	step("18,000 mirrored endpoints written, CoreDNS's memory limit raised for them first", strict, func() {
		old := dnsRelease.podsOf(s, "coredns")
		helmtest.Must(t, "upgrade", dnsRelease.name, helmtest.ChartDir, "--namespace", dnsRelease.namespace, "--kubeconfig", s.kubeconfig,
			"--reuse-values", "--set", "coredns.resources.limits.memory="+fleetMemoryLimit)
		s.waitReplaced(dnsRelease, "coredns", old)
		fleetChanging(tr, want.reverse, withFleet)
		s.writeFleet(dnsRelease.podsOf(s, "coredns"), fleetLastGlobal)
		tr.now(withFleet(want.reverse, allClusters))
		tr.settled()
	})
	// NodeLocal DNSCache in front of the cluster DNS, from here to the
	// back-out: the nodelocal asker asks what the asker asks through it,
	// and is judged by the same truth, with its cache's lag. (From here:
	// writing the fleet with it too took this node's two CPUs minutes
	// more.)
	step("NodeLocal DNSCache in front of the cluster DNS, and an asker behind it", strict, func() {
		s.startNodeLocalDNS()
		timelines = append(timelines, s.startNodeLocalAsker(tr, asked, endpoints))
	})

	step("a rolling restart of CoreDNS at 18,000 mirrored endpoints", strict, func() {
		old := dnsRelease.podsOf(s, "coredns")
		began := time.Now()
		s.restart(dnsRelease.namespace, dnsRelease.deployment("coredns"))
		s.waitReplaced(dnsRelease, "coredns", old)
		t.Logf("rolling restart at 18,000 mirrored endpoints: %s", s.rolloutTimes(dnsRelease, "coredns", began))
		s.awaitFleetAnswered(dnsRelease.podsOf(s, "coredns"), fleetLastGlobal)
	})
	step("one CoreDNS pod evicted at 18,000 mirrored endpoints (the PodDisruptionBudget honoured)", strict, func() {
		pods := dnsRelease.podsOf(s, "coredns")
		if len(pods) != 2 {
			t.Fatalf("%d CoreDNS pods", len(pods))
		}
		s.awaitDisruptionAllowed(dnsRelease)
		began := time.Now()
		s.evict(pods[0], true)
		// The budget allows one pod down: the other stays until the
		// first is replaced.
		s.evict(pods[1], false)
		s.waitReplaced(dnsRelease, "coredns", pods[:1])
		t.Logf("eviction at 18,000 mirrored endpoints: %s", s.rolloutTimes(dnsRelease, "coredns", began))
		s.awaitFleetAnswered(dnsRelease.podsOf(s, "coredns"), fleetLastGlobal)
	})
	step("the Corefile edited at 18,000 mirrored endpoints (each pod reloads it, none replaced)", reloads, func() {
		pods := dnsRelease.podsOf(s, "coredns")
		began := time.Now()
		s.editCorefile(dnsRelease, "ttl 5\n", fmt.Sprintf("ttl %d\n", editedTTL))
		s.awaitTTL(pods, fleetLastGlobal, fleet.Records(), editedTTL)
		t.Logf("Corefile edit at 18,000 mirrored endpoints: every pod answering from its reloaded instance after %v", time.Since(began).Round(time.Second))
		if now := dnsRelease.podsOf(s, "coredns"); !samePods(pods, now) {
			t.Errorf("the edit replaced or restarted CoreDNS's pods: %s, now %s", podNames(pods), podNames(now))
		}
	})
	step("the 18,000 mirrored endpoints deleted", strict, func() {
		fleetChanging(tr, want.reverse, withFleet)
		s.deleteFleet()
		tr.now(want.reverse)
		tr.settled()
	})
	step("the controller's leader killed", strict, func() {
		leader := s.leaderPod(controllerRelease)
		s.must(s.c.CoreV1().Pods(controllerRelease.namespace).Delete(ctx, leader.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		s.waitReplaced(controllerRelease, "controller", []corev1.Pod{leader})
		// The API forgets the pod at once; the kubelet still stops its
		// container with SIGTERM, so the leader may release the Lease (a
		// standby leads within its retry period) or not (once it expires).
		s.expectLeader(controllerRelease, leader.UID)
	})
	// A maintenance of east: its pods out of db-global and its SRV records,
	// their own names and PTR answering throughout; then back. Each answer
	// follows within a second of the write plus the TTL CoreDNS's cache
	// keeps an answer for: past that, the old one is wrong.
	step("globalmirror drain east (shared), then undrain east", strict, func() {
		const follows = time.Second + editedTTL*time.Second
		for _, d := range []struct {
			args []string
			want answers
		}{{[]string{"drain", "east"}, want.drained}, {[]string{"undrain", "east"}, want.reverse}} {
			tr.now(d.want)
			s.drain(d.args...)
			time.Sleep(follows)
			tr.settled()
			s.awaitAnswers("client", d.want)
		}
	})
	// The same maintenance written once in east itself, on the services it
	// exports (globalmirror drain --exported with east's kubeconfig):
	// Linkerd copies the annotation onto db-east here, and writes its
	// gateway into db-east until east's pods next change, which both halves
	// hold through. The same answers as the Link's drain, as promptly once
	// the copy is here.
	step("globalmirror drain --exported in east (shared), then undrain --exported there", strict, func() {
		const follows = time.Second + editedTTL*time.Second
		east := env.Cluster("east").Kubeconfig
		for _, d := range []struct {
			args  []string
			level string
			want  answers
		}{
			{[]string{"drain", "--exported", "--kubeconfig", east}, aggregate.DrainSharedValue, want.drained},
			{[]string{"undrain", "--exported", "--kubeconfig", east}, "", want.reverse},
		} {
			tr.now(d.want)
			var wrote []cli.Drained
			_, code, err := s.globalmirror(ctx, &wrote, d.args...)
			if err != nil || code != 0 || !slices.ContainsFunc(wrote, func(w cli.Drained) bool { return w.Object == "Service "+ns+"/db" && w.Written }) {
				t.Fatalf("globalmirror %s: exit %d, %+v, %v", strings.Join(d.args[:2], " "), code, wrote, err)
			}
			s.eventually("db-east carries east's drain "+d.level, func(ctx context.Context) string {
				svc, err := s.c.CoreV1().Services(ns).Get(ctx, "db-east", metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if got := svc.Annotations[aggregate.AnnotationDrain]; got != d.level {
					return fmt.Sprintf("db-east's drain is %q", got)
				}
				return ""
			})
			time.Sleep(follows)
			tr.settled()
			s.awaitAnswers("client", d.want)
		}
	})
	// Helm and Argo CD annotate what they sync: Linkerd then writes its
	// gateway into db-east, without a hostname, and leaves it there until
	// east's pods next change, so the steps after this one run with it
	// there. No answer changes.
	step("east's exported service annotated, as Helm and Argo CD do", strict, func() {
		tr.now(want.reverse)
		s.must(remoteDB[0].Annotate(ctx, "argocd.argoproj.io/tracking-id", ns+":/Service:"+ns+"/db"))
		s.eventually("Linkerd's gateway in db-east", func(ctx context.Context) string {
			return scenario.GatewayAlone(ctx, s.c, ns, "db-east")
		})
		time.Sleep(3 * time.Second)
		s.awaitAnswers("client", want.reverse)
	})
	// East's gateway fails its probes, then passes them again: Linkerd
	// marks east's endpoint mirrors not ready, then repairs them (its
	// gateway still in db-east). East's pods leave every answer, their own
	// names NXDOMAIN and their PTR the kubernetes plugin's, then come
	// back, each answer as promptly as a drain's: but for that PTR, which
	// CoreDNS's cache keeps for the kubernetes plugin's TTL once east is
	// back. Linkerd marks and repairs the endpoint mirrors one by one, so
	// the shared names pass through each state between (a run saw one).
	step("east's gateway down, then back", strict, func() {
		for _, g := range []struct {
			alive   bool
			want    answers
			follows time.Duration
		}{{false, want.gatewayDown, time.Second + editedTTL*time.Second}, {true, want.reverse, time.Second + kubernetesTTL}} {
			for _, b := range between(want.reverse, want.gatewayDown) {
				tr.now(b)
			}
			tr.now(g.want)
			s.must(world.Sim.SetGatewayAlive("east", g.alive))
			time.Sleep(g.follows)
			tr.settled()
			s.awaitAnswers("client", g.want)
		}
	})
	// globalmirror check, each of its failures made by breaking one thing,
	// then healed; every other check stays ✔.
	step("checked: the controller stopped, then a global's slice deleted (the plugin answers)", strict, func() {
		s.scale(controllerRelease.namespace, controllerRelease.deployment("controller"), 0)
		s.expectCheck(map[string]string{"controller running": "scale deployment", "controller leader": "– controller running check",
			"both halves serve them": "‼ controller running"})
		s.deleteGlobalSlice("db-global")
		s.expectCheck(map[string]string{"controller running": "scale deployment", "controller leader": "– controller running check",
			"global services in sync": "has not written their addresses", "both halves serve them": "‼ controller running"})
		s.scale(controllerRelease.namespace, controllerRelease.deployment("controller"), 2)
		s.expectCheck(nil)
	})
	step("checked: the Lease held by nobody running while the controller's pods run", strict, func() {
		restore := s.leaseHeldByAStranger(controllerRelease)
		s.expectCheck(map[string]string{"controller leader": "no running replica leads"})
		restore()
		s.expectLeader(controllerRelease)
	})
	step("checked: a rule missing from the controller's ClusterRole", strict, func() {
		restore := s.withoutRule(controllerRelease.deployment("controller"), "", "events")
		s.expectCheck(map[string]string{"RBAC of the controller": "grant it"})
		restore()
	})
	step("checked: a rule missing from the cluster DNS's ClusterRole", strict, func() {
		restore := s.withoutRule(dnsRelease.deployment("coredns"), "discovery.k8s.io", "endpointslices")
		s.expectCheck(map[string]string{"RBAC of the cluster DNS": "grant it"})
		restore()
	})
	step("checked: a user's Service holds a global's name", strict, func() {
		heal := s.nameConflict(env.Cluster("east"))
		s.expectCheck(map[string]string{"global names free": "rename or delete the Service"})
		heal()
	})
	step("checked: a Linkerd service mirror without headless mirroring", strict, func() {
		heal := s.serviceMirrorWithoutHeadless()
		s.expectCheck(map[string]string{"Linkerd's headless mirrors": "enableHeadlessServices=true"})
		heal()
		s.expectCheck(nil)
	})
	step("checked: the API server unreachable", strict, func() {
		s.expectUnreachable()
	})
	step("checked: Pod Security admitted every chart pod under restricted", strict, func() {
		s.expectAdmittedRestricted(source.AuditLog, controllerRelease.namespace)
	})

	// NodeLocal DNSCache out, once its asker's last span is judged.
	if i := slices.IndexFunc(timelines, func(tl *timeline) bool { return tl.log.pod == nodeLocalAsker }); i >= 0 {
		ended = append(ended, timelines[i])
		timelines = slices.Delete(timelines, i, i+1)
	}
	s.must(s.c.CoreV1().Pods(ns).Delete(ctx, nodeLocalAsker, metav1.DeleteOptions{}))
	s.stopNodeLocalDNS()

	// Back out: kubeadm's CoreDNS back behind kube-dns, then the releases
	// uninstalled; kube-dns stays (helm's keep policy), its ClusterIP with it.
	step("back out: kubeadm's CoreDNS scaled back to 2", strict, func() {
		tr.now(want.global)
		// Step 5 writes the fleet again: kubeadm's CoreDNS holds it too
		// (its kubernetes plugin lists every Service and slice), past its
		// 170Mi, as any cluster DNS of a cluster that size would. Set at
		// no replica, it ends no pod.
		s.setKubeadmMemoryLimit(fleetMemoryLimit)
		s.scale(metav1.NamespaceSystem, "coredns", 2)
		s.awaitServing(s.podsBySelector(metav1.NamespaceSystem, "k8s-app=kube-dns"))
	})
	step("helm uninstall of the cluster DNS release", strict, func() {
		helmtest.Must(t, "uninstall", dnsRelease.name, "--namespace", dnsRelease.namespace, "--kubeconfig", s.kubeconfig, "--wait", "--timeout", "2m")
		// The chart's pods answer reverse names until they are gone.
		s.eventually("the chart's CoreDNS pods gone", func(context.Context) string {
			if pods := dnsRelease.podsOf(s, "coredns"); len(pods) > 0 {
				return fmt.Sprintf("%d left", len(pods))
			}
			return ""
		})
		s.awaitAnswers("client", want.global)
		tr.settled()
		s.expectUninstalled(dnsRelease)
		svc, err := s.c.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil || svc.Spec.ClusterIP != node.ClusterDNS {
			t.Errorf("kube-dns after uninstall: %v (%v); the chart keeps the cluster DNS Service", svc, err)
		}
	})
	// 5. A cluster whose DNS you cannot replace: kubeadm's stock CoreDNS
	// forwards the clusterset zone to the chart's CoreDNS, a DNS of its
	// own, through the server block the chart's NOTES print; the
	// clusterset asker asks its names through the cluster DNS. Then the
	// fleet is written, that DNS reloads an edited Corefile, is rolled and
	// evicted with it, and the fleet is deleted; a drain and a gateway
	// failure; and the zone is backed out. The fleet is written after
	// kubeadm's Corefile reload and deleted before the next: kubeadm's
	// stock CoreDNS, reloading at 18,000 mirrored endpoints, serves
	// SERVFAIL once its kubernetes plugin's 5 s startup_timeout passes
	// before the new instance has listed them (a CI run saw 470 lookups
	// fail so), which no forwarded zone changes.
	zone := want.zone()
	zoneService := clustersetName("db", ns) + "."
	kubeadmCorefile := withLameduck(t, stockCorefile, patchedLameduck)
	ztr := &truth{}
	ztr.now(zone.before)
	step("5. kubeadm's Corefile forwarding the zone to the chart's CoreDNS, with the block its NOTES print", reloads, func() {
		queries := withBothResolvers(zone.asked)
		timelines = append(timelines, s.startTimeline(s.askerSpec(clustersetAsker, queries), ztr, queries, endpoints, netip.MustParseAddr(node.ClusterDNS)))
		// Not forwarded yet: check names the block to add, and its DNS
		// probe waits for it.
		s.expectCheck(map[string]string{"zone forwarded": "forward . ", "DNS answers": "– zone forwarded"})
		ztr.now(zone.forwarded)
		s.setCorefile(kubeadmCorefile+"\n"+forwardBlock, false)
		s.awaitAnswers("client", zone.forwarded)
		ztr.settled()
		s.expectCheck(nil)
	})
	// The fleet, forwarded to: the chart's DNS answers its clusterset
	// names, kubeadm's its globals from the controller's slices. While it
	// is written or deleted (change), every state in between is right for
	// both askers, until the client sees the answers zone and stock.
	fleetForwarded := func(zone, stock answers, change func()) {
		fleetChanging(ztr, zone, withFleetClusterset)
		fleetChanging(tr, stock, withFleet)
		change()
		ztr.now(zone)
		tr.now(stock)
		s.awaitForwardedAnswers(zone, zoneService)
		s.awaitAnswers("client", stock)
		ztr.settled()
		tr.settled()
	}
	step("5. 18,000 mirrored endpoints written", strict, func() {
		fleetForwarded(withFleetClusterset(zone.forwarded, allClusters), withFleet(want.global, allClusters), func() {
			s.writeFleet(s.forwardedPods(), fleetClusterset)
		})
	})
	// The kubelet renews each pod's token; the next reload's in-cluster
	// configuration reads the new one, of the same account: each pod's
	// reload keeps its index, listing nothing (#66).
	step("5. the forwarded zone's Corefile edited once its pods' tokens were renewed (each pod reloads it, listing nothing)", reloads, func() {
		pods := s.forwardedPods()
		s.awaitTokensRenewed(pods, forwardedTokens)
		before := map[string]indexCounters{}
		for _, p := range pods {
			before[p.Name] = s.indexCounters(p)
		}
		s.editCorefile(forwardedRelease, "ttl 5\n", fmt.Sprintf("ttl %d\n", editedTTL))
		s.awaitTTL(pods, zoneService, len(want.podNames), editedTTL)
		for _, p := range pods {
			if got, was := s.indexCounters(p), before[p.Name]; got.lists != was.lists || got.reused != was.reused+1 || got.built != was.built {
				t.Errorf("%s's reload after its token's renewal: lists %v -> %v, handovers reusing the index %v -> %v, building one %v -> %v; want no list and the index reused",
					p.Name, was.lists, got.lists, was.reused, got.reused, was.built, got.built)
			}
		}
		if now := s.forwardedPods(); !samePods(pods, now) {
			t.Errorf("the edit replaced or restarted CoreDNS's pods: %s, now %s", podNames(pods), podNames(now))
		}
	})
	// The forwarded zone's CoreDNS rolled, then a pod of it evicted: the
	// block the NOTES print forwards over TCP (force_tcp), so an ending pod
	// closes its connections and kubeadm's forward asks again on another.
	step("5. a rolling restart of the forwarded zone's CoreDNS", strict, func() {
		old := s.forwardedPods()
		began := time.Now()
		s.restart(forwardedRelease.namespace, forwardedRelease.deployment("coredns"))
		s.waitReplaced(forwardedRelease, "coredns", old)
		t.Logf("forwarded zone: rolling restart at 18,000 mirrored endpoints: %s", s.rolloutTimes(forwardedRelease, "coredns", began))
		s.awaitFleetAnswered(s.forwardedPods(), fleetClusterset)
	})
	step("5. one of the forwarded zone's CoreDNS pods evicted", strict, func() {
		pods := s.forwardedPods()
		s.awaitDisruptionAllowed(forwardedRelease)
		began := time.Now()
		s.evict(pods[0], true)
		s.waitReplaced(forwardedRelease, "coredns", pods[:1])
		t.Logf("forwarded zone: eviction at 18,000 mirrored endpoints: %s", s.rolloutTimes(forwardedRelease, "coredns", began))
		s.awaitFleetAnswered(s.forwardedPods(), fleetClusterset)
	})
	step("5. the 18,000 mirrored endpoints deleted", strict, func() {
		fleetForwarded(zone.forwarded, want.global, s.deleteFleet)
	})
	// followed makes zone and stock the clusterset asker's and the asker's
	// answers, does change, and holds both to them from a second plus the
	// TTL on.
	followed := func(zone, stock answers, change func()) {
		const follows = time.Second + editedTTL*time.Second
		ztr.now(zone)
		tr.now(stock)
		change()
		time.Sleep(follows)
		ztr.settled()
		tr.settled()
		s.awaitForwardedAnswers(zone, zoneService)
		s.awaitAnswers("client", stock)
	}
	// A maintenance of east seen through the forward: its pods out of the
	// clusterset service's name and SRV, their own names answering; then
	// back. No cache between: the forward block has none. The asker's
	// cluster.local names, which kubeadm's CoreDNS answers from the
	// controller's slices (its cache skips cluster.local), follow as
	// promptly.
	step("5. globalmirror drain east (shared), then undrain east, through the forward", strict, func() {
		for _, d := range []struct {
			args        []string
			zone, stock answers
		}{{[]string{"drain", "east"}, zone.drained, want.drainedStock}, {[]string{"undrain", "east"}, zone.forwarded, want.global}} {
			followed(d.zone, d.stock, func() { s.drain(d.args...) })
		}
	})
	// East's gateway down, then back, seen through the forward: east's
	// pods out of every clusterset name, then back; kubeadm's answers from
	// the controller's slices as for the drain.
	step("5. east's gateway down, then back, through the forward", strict, func() {
		for _, g := range []struct {
			alive       bool
			zone, stock answers
		}{{false, zone.gatewayDown, want.drainedStock}, {true, zone.forwarded, want.global}} {
			for _, b := range between(zone.forwarded, zone.gatewayDown) {
				ztr.now(b)
			}
			for _, b := range between(want.global, want.drainedStock) {
				tr.now(b)
			}
			followed(g.zone, g.stock, func() { s.must(world.Sim.SetGatewayAlive("east", g.alive)) })
		}
	})
	step("5. back out: the forwarding taken out of kubeadm's Corefile", reloads, func() {
		ztr.now(zone.before)
		s.setCorefile(kubeadmCorefile, false)
		s.awaitAnswers("client", zone.before)
		time.Sleep(editedTTL * time.Second)
		ztr.settled()
	})
	step("5. helm uninstall of the forwarded zone's release", strict, func() {
		helmtest.Must(t, "uninstall", forwardedRelease.name, "--namespace", forwardedRelease.namespace, "--kubeconfig", s.kubeconfig, "--wait", "--timeout", "2m")
		s.expectUninstalled(forwardedRelease)
	})
	step("helm uninstall of the controller release", strict, func() {
		helmtest.Must(t, "uninstall", controllerRelease.name, "--namespace", controllerRelease.namespace, "--kubeconfig", s.kubeconfig, "--wait", "--timeout", "2m")
		s.expectUninstalled(controllerRelease)
		s.expectGlobalKept(controllerRelease)
	})
}

// withGlobalStanza is corefile with the global stanza of the chart's
// README added to its server block, before kubernetes (where a reader
// would put it; the plugin's order is CoreDNS's, whatever the file says).
func withGlobalStanza(t *testing.T, corefile string, options ...string) string {
	t.Helper()
	const at = "    kubernetes "
	i := strings.Index(corefile, at)
	if i < 0 {
		t.Fatalf("kubeadm's Corefile has no kubernetes stanza:\n%s", corefile)
	}
	block := "        ttl 5\n"
	for _, o := range options {
		block += "        " + o + "\n"
	}
	return corefile[:i] + "    global cluster.local {\n" + block + "    }\n" + corefile[i:]
}

// patchedCorefile is kubeadm's Corefile as the chart's README edits it:
// the global stanza (withGlobalStanza) and the patched lameduck.
func patchedCorefile(t *testing.T, corefile string, options ...string) string {
	return withLameduck(t, withGlobalStanza(t, corefile, options...), patchedLameduck)
}

// withLameduck is kubeadm's Corefile with its health plugin's lameduck
// changed to d.
func withLameduck(t *testing.T, corefile, d string) string {
	t.Helper()
	const kubeadms = "lameduck 5s"
	if strings.Count(corefile, kubeadms) != 1 {
		t.Fatalf("kubeadm's Corefile has not one %q:\n%s", kubeadms, corefile)
	}
	return strings.Replace(corefile, kubeadms, "lameduck "+d, 1)
}

// drain runs globalmirror drain or undrain with args, which must write.
func (s *install) drain(args ...string) {
	s.t.Helper()
	var wrote cli.Drained
	if _, code, err := s.globalmirror(s.ctx, &wrote, args...); err != nil || code != 0 || !wrote.Written {
		s.t.Fatalf("globalmirror %s: exit %d, %+v, %v", strings.Join(args, " "), code, wrote, err)
	}
}

// awaitDisruptionAllowed waits until r's CoreDNS PodDisruptionBudget
// allows one disruption.
func (s *install) awaitDisruptionAllowed(r chartRelease) {
	s.t.Helper()
	s.eventually("the budget allowing one disruption", func(ctx context.Context) string {
		pdb, err := s.c.PolicyV1().PodDisruptionBudgets(r.namespace).Get(ctx, r.deployment("coredns"), metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if pdb.Status.DisruptionsAllowed != 1 {
			return fmt.Sprintf("%d disruptions allowed", pdb.Status.DisruptionsAllowed)
		}
		return ""
	})
}

// evict asks the Eviction API to evict p; allowed says whether the
// PodDisruptionBudget should let it.
func (s *install) evict(p corev1.Pod, allowed bool) {
	s.t.Helper()
	err := s.c.CoreV1().Pods(p.Namespace).EvictV1(s.ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
	switch {
	case allowed && err != nil:
		s.t.Fatalf("evicting %s: %v", p.Name, err)
	case !allowed && err == nil:
		s.t.Fatalf("evicted %s while the PodDisruptionBudget allowed no more", p.Name)
	case !allowed && !apierrors.IsTooManyRequests(err):
		s.t.Fatalf("evicting %s: %v, want 429 (the budget refuses)", p.Name, err)
	}
}

// adoptForHelm marks an existing object as release's, as helm requires to
// adopt it (`kubectl annotate` and `kubectl label`).
func (s *install) adoptForHelm(namespace, service string, r chartRelease) {
	s.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"Helm"},"annotations":{"meta.helm.sh/release-name":%q,"meta.helm.sh/release-namespace":%q}}}`,
		r.name, r.namespace)
	s.must(s.c.CoreV1().Services(namespace).Patch(s.ctx, service, types.MergePatchType, []byte(patch), metav1.PatchOptions{}))
}

// TestTheDocsSayWhatTheNodeTestHolds holds the chart's README and DESIGN.md
// to the thresholds TestAdoptionOnANode judges by and the patch it applies.
// editedTTL is the global stanza's TTL once the Corefile edit set it, for
// which CoreDNS's cache keeps an answer after a drain.
const editedTTL = 6

func TestTheDocsSayWhatTheNodeTestHolds(t *testing.T) {
	if slowLookup != time.Second {
		t.Errorf("slowLookup is %v; the docs say a second", slowLookup)
	}
	if node.CPUShares != 8*1024 {
		t.Errorf("node.CPUShares is %d; the chart's README says eight control-plane threads' worth", node.CPUShares)
	}
	retry := int(oneRetry.Seconds())
	claims := map[string][]string{
		filepath.Join(helmtest.ChartDir, "README.md"): {
			"slow: answered after more than a second",
			fmt.Sprintf("each resolver asks at least %d lookups a second over each transport", minRate),
			fmt.Sprintf(`"readinessProbe":{"periodSeconds":%d}`, patchedReadinessPeriod),
			fmt.Sprintf(`"periodSeconds":%d`, kubeadmReadinessPeriod),
			"lameduck 5s -> " + patchedLameduck,
			fmt.Sprintf("writes %d,%03d mirrored endpoints in Linkerd's shape", fleetEndpoints/1000, fleetEndpoints%1000),
			"coredns.resources.limits.memory=" + fleetMemoryLimit,
			"cgroup weighs as much as eight busy control-plane threads",
			"A lookup slow by one retry over UDP whose answer the test saw orphaned is not counted slow",
			"in that step; none in a step that ends no pod",
			`the "answer orphaned" column; at most one for each such pod`,
			fmt.Sprintf("(the %q column; at most one for each pod)", closedByReload),
			"Over UDP a reload loses nothing.",
			fmt.Sprintf("at most %d lookups may be lost, each slow by one retry at most (%d s) or refused by the ended pod, orphaned answers included", maxKubeadmLost, retry),
			fmt.Sprintf("each answer follows within a second of the write plus the TTL (%d s since the Corefile edit) CoreDNS's cache keeps an answer", editedTTL),
			"following within a second of the write plus the TTL (the forward block caches nothing)",
			fmt.Sprintf("CoreDNS's cache keeps for the `kubernetes` stanza's TTL (%d s) once east is back: the test holds it to a second plus that TTL", int(kubernetesTTL.Seconds())),
			"is raised to " + fleetMemoryLimit + " for them when it is scaled back",
		},
		"../../README.md": {
			fmt.Sprintf("down with its stanza's TTL (%d s in the chart's)", int(kubernetesTTL.Seconds())),
			"the test holds an asker of the cluster DNS to a second plus that TTL after the gateway passes its probes again, and the asker behind NodeLocal DNSCache to that TTL more",
		},
		"../../DESIGN.md": {
			fmt.Sprintf("at least %d lookups a second each", minRate),
			"answered after more than 1 s",
			fmt.Sprintf("the node test allows %d lost there, each within %d s or refused", maxKubeadmLost, retry),
			fmt.Sprintf("(`cpu.shares` %d in v1, `cpu.weight` %d on a", node.CPUShares, node.CPUWeight),
			"does not count a lookup slow by one retry over UDP whose answer it saw orphaned",
			"at most one for each pod whose endpoint stopped serving in the step, none where none did",
			"the node test excuses such a lookup only where the wire shows the pod closing the connection first, at most one for each pod that reloaded",
		},
	}
	for file, phrases := range claims {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(data)), " ")
		for _, p := range phrases {
			if !strings.Contains(text, p) {
				t.Errorf("%s does not say %q", file, p)
			}
		}
	}
}
