package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/cli"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/mirrorsim"
	"github.com/miekg/dns"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The storms run in the largest Linkerd users' shape: ten linked clusters,
// StormBases headless services each, Pods pods each, in Linkerd's full
// shape (a headless mirror per service and cluster, an endpoint mirror's
// slice per pod; not the endpoint mirrors' Services, which neither half
// receives), in a namespace of their own.
var stormWorld = World{Namespace: "storm", NoEndpointMirrorServices: true, Clusters: func() []string {
	var c []string
	for i := range 10 {
		c = append(c, fmt.Sprintf("c%02d", i))
	}
	return c
}()}

// StormBases is the number of services every cluster of the storm world exports.
const StormBases = 1000

// stormCorefile is CoreDNS with global alone, watching the storm's namespace.
const stormCorefile = `.:{$DNS_PORT} {
    bind 127.0.0.1
    global cluster.local {
        kubeconfig {$BENCH_KUBECONFIG}
        namespaces storm
        ttl 5
    }
}
`

// StormResult is how fast both halves follow one cluster changing at once.
type StormResult struct {
	What    string
	Globals int
	Writes  int // the simulator's
	Writers int
	// Writing is from the first write sent to the last answered.
	Writing time.Duration
	// After is, per global, from the last write answered to the plugin's
	// first right answer; zero where it was right before.
	After []time.Duration
	// ControllerWrites are the controller's writes of its global slices in
	// the storm; ControllerFirst when the first of them was seen and
	// ControllerAfter, per global written, when its last was, after the
	// last write (zero if before).
	ControllerWrites int
	ControllerFirst  time.Duration
	ControllerAfter  []time.Duration
	// ControllerBusy is the share of the machine's CPUs busy from the first
	// write to the controller's last, sampled every 100 ms: near 1, the writes wait for CPU (the
	// API server's, on a machine that runs everything), not for the
	// controller.
	ControllerBusy float64
	// Plain is how long a plain writer took, in the same run right before,
	// to make as many slice updates as the globals (PlainWrites, of
	// slices like its, PlainWorkers at a time, no client-side limit): what
	// the API server takes, for the controller's time to be judged
	// against. Drain storms only.
	Plain        time.Duration
	PlainWrites  int
	PlainWorkers int
	// Round numbers a drain storm's rounds from 1; 0 for the others.
	Round int
}

// drainRounds: drain storms of each kind, each beside its plain writer.
const drainRounds = 3

// RestartResult is how long a half takes to answer, and to converge, once
// restarted in the storm world.
type RestartResult struct {
	What string
	// First is from the start to the first right answer (CoreDNS) or the
	// controller's readiness; Converged to every global right (CoreDNS) or
	// the controller's queue drained with every global built.
	First, Converged time.Duration
	// Writes are the controller's API writes after it restarted.
	Writes int
}

// StormReport is everything the storm world measured.
type StormReport struct {
	Clusters, Bases, Objects int
	Loading                  time.Duration
	Storms                   []StormResult
	Restarts                 []RestartResult
}

// stormSweepers ask for every global in turn, in parallel.
const stormSweepers = 8

// Storm loads the storm world and, with the controller and CoreDNS with
// global running, takes one cluster's gateway down and back, unlinks it and
// links it again, then restarts each half.
func Storm(ctx context.Context, cfg Config, kubeconfig string, client kubernetes.Interface, env []string) (*StormReport, error) {
	w, bases := stormWorld, StormBases
	records := w.Records()
	rep := &StormReport{Clusters: len(w.clusters()), Bases: bases, Objects: bases * len(w.clusters()) * (2 + Pods)}
	t := time.Now()
	if err := w.Load(ctx, client, 0, bases, cfg.LoadWorkers); err != nil {
		return rep, err
	}
	if err := w.LoadEndpointMirrors(ctx, client, 0, bases, cfg.LoadWorkers); err != nil {
		return rep, err
	}
	// Linkerd's Links, one per cluster, for the drains: before either half
	// starts, so that both read them from their first list.
	drainLink, err := w.writeLinks(ctx, kubeconfig)
	if err != nil {
		return rep, err
	}
	rep.Loading = time.Since(t)
	cfg.Log("storm world: %d clusters × %d services × %d pods, %d objects loaded in %v", rep.Clusters, bases, Pods, rep.Objects, rep.Loading.Round(time.Second))
	unpin, err := PinControlPlane(ctx)
	if err != nil {
		return rep, err
	}
	defer unpin()

	ctrl, err := startController(ctx, cfg, kubeconfig, stormWorld.Namespace, "storm-controller.log")
	if err != nil {
		return rep, err
	}
	defer func() { ctrl.Stop() }()
	if _, err := Converged(ctx, ctrl, bases, bases*records, 10*time.Minute); err != nil {
		return rep, err
	}
	srv, err := StartCoreDNS(ctx, cfg.Dir, "storm", stormCorefile, "", []string{"DNS_PORT"}, env)
	if err != nil {
		return rep, err
	}
	defer func() { srv.Stop() }()
	addr := srv.PortAddr("DNS_PORT")
	if _, err := w.sweepAll(ctx, addr, bases, records, 3*time.Minute); err != nil {
		return rep, err
	}

	plain, err := newPlainWriter(ctx, client, stormWorld.Namespace+"-plain", 2*bases)
	if err != nil {
		return rep, err
	}
	c := len(w.clusters()) - 1
	name := w.clusters()[c]
	type phase struct {
		what  string
		want  int
		write func(context.Context, kubernetes.Interface, int, int) error
		count int // writes per base; 0: one write in all (calls write once)
		round int
	}
	phases := []phase{
		{"gateway of " + name + " down", records - Pods, w.setGateway(false), Pods, 0},
		{"gateway of " + name + " back", records, w.setGateway(true), Pods, 0},
		{"unlink of " + name, records - Pods, w.unlink, 2 + Pods, 0},
		{"link of " + name + " again", records, w.link, 2 + Pods, 0},
	}
	// The drains are judged on medians of drainRounds, each beside a round
	// of the plain writer, and each of those starts with the API server's
	// garbage collected: a round's time doubled where a collection of its
	// heap (50,000 objects, 0.7-1 s of CPU) fell into it, and the rounds
	// before set where it fell (with three rounds of the plain writer after
	// each drain, into every undrain).
	for r := range drainRounds {
		phases = append(phases, phase{DrainStorm + " of " + name, records - Pods, drainLink(aggregate.DrainShared), 0, r + 1},
			phase{UndrainStorm + " of " + name, records, drainLink(aggregate.NotDrained), 0, r + 1})
	}
	for _, phase := range phases {
		calls, writes := bases, bases*phase.count
		var plainTook time.Duration
		if phase.count == 0 {
			// A drain: one write, a slice write per global. The plain
			// writer's round of as many goes right before it, so that
			// they take turns through the API server's collections.
			calls, writes = 1, 1
			if err := collectGarbage(ctx, client); err != nil {
				return rep, err
			}
			if plainTook, err = plain.write(ctx, bases, cfg.LoadWorkers); err != nil {
				return rep, fmt.Errorf("%s: the plain writer: %w", phase.what, err)
			}
			cfg.Log("storm, %s: a plain writer made %d slice updates in %v, %d at a time", phase.what, bases, plainTook.Round(time.Millisecond), cfg.LoadWorkers)
		}
		if phase.count == 0 {
			if err := collectGarbage(ctx, client); err != nil {
				return rep, err
			}
		}
		res, err := w.stormOnce(ctx, addr, client, bases, calls, c, phase.want, cfg.LoadWorkers, phase.write)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", phase.what, err)
		}
		res.What, res.Writes, res.Round = phase.what, writes, phase.round
		if phase.count == 0 {
			res.Plain, res.PlainWrites, res.PlainWorkers = plainTook, bases, cfg.LoadWorkers
		}
		cfg.Log("storm, %s: %d writes in %v; every global right %v after the last (p50 %v); the controller wrote %d slices, the first %v after, the last %v (CPUs %.0f%% busy)",
			res.What, res.Writes, res.Writing.Round(time.Millisecond), DurationQuantile(res.After, 1).Round(time.Millisecond),
			DurationQuantile(res.After, .5).Round(time.Millisecond), res.ControllerWrites, res.ControllerFirst.Round(time.Millisecond),
			DurationQuantile(res.ControllerAfter, 1).Round(time.Millisecond), 100*res.ControllerBusy)
		rep.Storms = append(rep.Storms, *res)
	}

	// CoreDNS restarted: its first right answer and every global right.
	srv.Stop()
	start := time.Now()
	if srv, err = StartCoreDNS(ctx, cfg.Dir, "storm-restarted", stormCorefile, "", []string{"DNS_PORT"}, env); err != nil {
		return rep, err
	}
	right, err := w.sweepAll(ctx, srv.PortAddr("DNS_PORT"), bases, records, 3*time.Minute)
	if err != nil {
		return rep, fmt.Errorf("CoreDNS restarted: %w", err)
	}
	first, last := slices.MinFunc(right, time.Time.Compare), slices.MaxFunc(right, time.Time.Compare)
	r := RestartResult{What: "CoreDNS", First: first.Sub(start), Converged: last.Sub(start)}
	cfg.Log("storm world, CoreDNS restarted: first right answer after %v, every global right after %v", r.First.Round(time.Millisecond), r.Converged.Round(time.Millisecond))
	rep.Restarts = append(rep.Restarts, r)

	// The controller restarted: ready, converged, and what it wrote.
	ctrl.Stop()
	start = time.Now()
	if ctrl, err = startController(ctx, cfg, kubeconfig, stormWorld.Namespace, "storm-controller-restarted.log"); err != nil {
		return rep, err
	}
	r = RestartResult{What: "controller", First: time.Since(start)}
	done, err := Converged(ctx, ctrl, bases, bases*records, 10*time.Minute)
	if err != nil {
		return rep, fmt.Errorf("controller restarted: %w", err)
	}
	r.Converged = done.Sub(start)
	writes, err := Settle(ctx, ctrl, 5*time.Second, 2*time.Minute)
	if err != nil {
		return rep, err
	}
	r.Writes = int(writes.Total())
	cfg.Log("storm world, controller restarted: ready after %v, converged after %v, %d writes", r.First.Round(time.Millisecond), r.Converged.Round(time.Millisecond), r.Writes)
	rep.Restarts = append(rep.Restarts, r)
	return rep, nil
}

// sweep starts stormSweepers clients asking for every global until each
// answers want A records or ctx ends: client s asks for every
// stormSweepers-th global from s on in turn. The function it returns waits
// for them and returns when each global first did.
func (w World) sweep(ctx context.Context, addr string, bases, want int) func() ([]time.Time, error) {
	right := make([]time.Time, bases)
	var sweepers sync.WaitGroup
	for s := range stormSweepers {
		sweepers.Go(func() {
			var pending []int
			for i := s; i < bases; i += stormSweepers {
				pending = append(pending, i)
			}
			for len(pending) > 0 && ctx.Err() == nil {
				pending = slices.DeleteFunc(pending, func(i int) bool {
					r, err := dnsq.Ask("udp", addr, w.FQDN(Global(i)), dns.TypeA, dns.DefaultMsgSize)
					if err != nil || len(r.Answer) != want {
						return false // asked again next sweep
					}
					right[i] = time.Now()
					return true
				})
			}
		})
	}
	return func() ([]time.Time, error) {
		sweepers.Wait()
		for i, t := range right {
			if t.IsZero() {
				return nil, fmt.Errorf("%s never answered %d records", Global(i), want)
			}
		}
		return right, nil
	}
}

// sweepAll is sweep, waited for, within timeout.
func (w World) sweepAll(ctx context.Context, addr string, bases, want int, timeout time.Duration) ([]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return w.sweep(ctx, addr, bases, want)()
}

// stormOnce writes, for each of calls bases (every base, or one for a write
// that changes every base at once), what write writes for cluster c, up to
// workers at a time, while the sweepers wait for every global to answer
// want records and a watch notes the controller's writes of its slices.
func (w World) stormOnce(ctx context.Context, addr string, client kubernetes.Interface, bases, calls, c, want, workers int,
	write func(context.Context, kubernetes.Interface, int, int) error) (*StormResult, error) {
	res := &StormResult{Globals: bases, Writers: workers, After: make([]time.Duration, bases)}
	writes, stopWatching, err := w.watchControllerSlices(ctx, client)
	if err != nil {
		return nil, err
	}
	defer stopWatching()

	sweepCtx, stopSweeping := context.WithTimeout(ctx, 2*time.Minute)
	defer stopSweeping()
	swept := w.sweep(sweepCtx, addr, bases, want)

	cpuCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	cpu, err := sampleCPU(cpuCtx, 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var mu sync.Mutex
	var last time.Time
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range calls {
		g.Go(func() error {
			if err := write(gctx, client, i, c); err != nil {
				return err
			}
			mu.Lock()
			last = time.Now()
			mu.Unlock()
			return nil
		})
	}
	err = g.Wait()
	res.Writing = last.Sub(start)
	if err != nil {
		return nil, err
	}
	right, err := swept()
	if err != nil {
		return nil, err
	}
	for i, t := range right {
		res.After[i] = max(0, t.Sub(last))
	}
	// The controller is done when its slices have been still for a while.
	if err := await.Poll(ctx, 2*time.Minute, 100*time.Millisecond, func(context.Context) string {
		if s := writes(); s.n < bases || time.Since(s.last) < 3*time.Second {
			return fmt.Sprintf("%d slice writes seen, the last at %v", s.n, s.last.Format(time.StampMilli))
		}
		return ""
	}); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	s := writes()
	res.ControllerWrites, res.ControllerFirst = s.n, max(0, s.first.Sub(last))
	for _, t := range s.byGlobal {
		res.ControllerAfter = append(res.ControllerAfter, max(0, t.Sub(last)))
	}
	res.ControllerBusy = cpu.busy(s.last)
	return res, nil
}

// The drain storms' names, for their floors.
const (
	DrainStorm   = "drain (shared)"
	UndrainStorm = "undrain"
)

// writeLinks installs Linkerd's Link CRD and writes a Link for each of the
// world's clusters, and returns the write that drains (or, NotDrained,
// undrains) cluster c: one merge patch of its Link's annotation.
func (w World) writeLinks(ctx context.Context, kubeconfig string) (func(aggregate.Drain) func(context.Context, kubernetes.Interface, int, int) error, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := mirrorsim.InstallLinkCRD(ctx, rc); err != nil {
		return nil, err
	}
	links := dynamic.NewForConfigOrDie(rc).Resource(mirrorsim.LinkResource).Namespace(mirrorsim.LinkNamespace)
	for _, c := range w.clusters() {
		link := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mirrorsim.LinkResource.GroupVersion().String(), "kind": "Link",
			"metadata": map[string]any{"name": c}, "spec": map[string]any{"targetClusterName": c},
		}}
		if _, err := links.Create(ctx, link, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	return func(level aggregate.Drain) func(context.Context, kubernetes.Interface, int, int) error {
		patch := cli.DrainPatch(level)
		return func(ctx context.Context, _ kubernetes.Interface, _, c int) error {
			_, err := links.Patch(ctx, w.clusters()[c], types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}
	}, nil
}

// setGateway marks every endpoint mirror of base i from cluster c ready or
// not, as Linkerd does when the cluster's gateway goes down or comes back.
func (w World) setGateway(ready bool) func(context.Context, kubernetes.Interface, int, int) error {
	return func(ctx context.Context, client kubernetes.Interface, i, c int) error {
		for p := range Pods {
			s := w.EndpointMirrorSlice(i, c, p)
			s.Endpoints[0].Conditions.Ready = new(ready)
			// Unconditional: EndpointSlices take an update without a version.
			if _, err := client.DiscoveryV1().EndpointSlices(w.Namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
}

// unlink deletes what Linkerd wrote for base i from cluster c, as it does
// when the cluster is unlinked: endpoint mirrors first, then the headless
// mirror, each Service (where written) before its slice.
func (w World) unlink(ctx context.Context, client kubernetes.Interface, i, c int) error {
	svcs, eps := client.CoreV1().Services(w.Namespace), client.DiscoveryV1().EndpointSlices(w.Namespace)
	for p := range Pods + 1 {
		name, service := w.Mirror(i, c), true
		if p < Pods {
			name, service = w.EndpointMirror(i, c, p), !w.NoEndpointMirrorServices
		}
		if service {
			if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if err := eps.Delete(ctx, name+"-m", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// link writes base i from cluster c again: the headless mirror, then its
// endpoint mirrors.
func (w World) link(ctx context.Context, client kubernetes.Interface, i, c int) error {
	if err := w.createMirror(ctx, client, i, c); err != nil {
		return err
	}
	for p := range Pods {
		if err := w.createEndpointMirror(ctx, client, i, c, p); err != nil {
			return err
		}
	}
	return nil
}

// sliceWrites is what a watch of the controller's slices saw: how many
// writes, when the first and the last, when each global's slices were last
// written.
type sliceWrites struct {
	n           int
	first, last time.Time
	byGlobal    map[string]time.Time
}

// watchControllerSlices watches globalmirror's EndpointSlices in the world's
// namespace from now on: seen is what it saw so far; stop ends the watch.
func (w World) watchControllerSlices(ctx context.Context, client kubernetes.Interface) (seen func() sliceWrites, stop func(), err error) {
	api := client.DiscoveryV1().EndpointSlices(w.Namespace)
	sel := discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
	if err != nil {
		return nil, nil, err
	}
	wi, err := api.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	s := sliceWrites{byGlobal: map[string]time.Time{}}
	go func() {
		for ev := range wi.ResultChan() {
			slice, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted) {
				continue
			}
			now := time.Now()
			mu.Lock()
			s.n++
			if s.first.IsZero() {
				s.first = now
			}
			s.last = now
			s.byGlobal[slice.Labels[discoveryv1.LabelServiceName]] = now
			mu.Unlock()
		}
	}()
	return func() sliceWrites {
		mu.Lock()
		defer mu.Unlock()
		c := s
		c.byGlobal = maps.Clone(s.byGlobal)
		return c
	}, wi.Stop, nil
}

// stormSection titles the storms in RESULTS.md.
const stormSection = "### Storms in the largest users' shape"

// ReportStorm writes the storm world's results.
func ReportStorm(out io.Writer, rep *StormReport) {
	if rep == nil || len(rep.Storms) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	rs := rep.Storms
	p("\n%s\n\n%d linked clusters × %s headless services × %d pods in Linkerd's full shape, "+
		"but for the endpoint mirrors' Services, which neither half receives (%s objects, loaded in %v). The controller and CoreDNS with `global` alone run; one cluster changes at once, "+
		"written by %d concurrent clients as fast as the API server takes them; %d clients ask for every global in turn until "+
		"each answers right, so a global's time is late by up to one sweep of its client. Time from the last write answered to "+
		"each global's first right answer; the controller's writes of its slices (one per global is the least it can do), "+
		"when the first was seen and, per global, its last; and the share of the machine's CPUs busy from the first write to the controller's last. "+
		"The control plane (API server, etcd, kube-controller-manager) runs on one half of the CPUs and everything else (both halves, the askers, the bench) on the other, as a cluster's control plane has machines of its own. "+
		"Before each drain, a plain writer makes as many updates of slices shaped like the controller's (as many endpoints, labels and annotations, owned by a Service, the managed fields left to the API server), %d at a time, with no client-side limit, "+
		"watched by two clients as the controller's are (its own informer and the bench): what the API server takes. Each round, the plain writer's and the drain's, starts with the API server's garbage collected. "+
		"Drain and undrain take turns, %d rounds of each; the median of the controller's last writes is judged against the median of the plain writer's rounds:\n\n",
		stormSection, rep.Clusters, thousands(rep.Bases), Pods, thousands(rep.Objects), rep.Loading.Round(time.Second), rs[0].Writers, stormSweepers, plainWorkers(rs), drainRounds)
	p("| storm | globals | writes | writing took | p50 | p99 | p100 | controller's writes | its first after | its p99 | its p100 | CPUs busy | plain writer |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		plain := "—"
		if r.PlainWrites > 0 {
			plain = millis(r.Plain)
		}
		what := r.What
		if r.Round > 0 {
			what += fmt.Sprintf(", round %d", r.Round)
		}
		p("| %s | %s | %s | %v | %s | %s | %s | %s | %s | %s | %s | %.0f%% | %s |\n", what, thousands(r.Globals), thousands(r.Writes), r.Writing.Round(time.Millisecond),
			millis(DurationQuantile(r.After, .5)), millis(DurationQuantile(r.After, .99)), millis(DurationQuantile(r.After, 1)),
			thousands(r.ControllerWrites), millis(r.ControllerFirst), millis(DurationQuantile(r.ControllerAfter, .99)),
			millis(DurationQuantile(r.ControllerAfter, 1)), 100*r.ControllerBusy, plain)
	}
	if len(rep.Restarts) > 0 {
		p("\nRestarts in that world: from the start of the process.\n\n| restarted | first right answer (controller: ready) | every global right (controller: converged) | controller's writes |\n|---|---:|---:|---:|\n")
		for _, r := range rep.Restarts {
			w := "—"
			if r.What == "controller" {
				w = strconv.Itoa(r.Writes)
			}
			p("| %s | %s | %s | %s |\n", r.What, millis(r.First), millis(r.Converged), w)
		}
	}
}

// StormAlone runs Storm on a control plane of its own (bin/bench -storm).
func StormAlone(ctx context.Context, cfg Config) (*StormReport, error) {
	env, cluster, client, err := startCluster(ctx, filepath.Join(cfg.Dir, "storm-cluster"), "", "")
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	return Storm(ctx, cfg, cluster.Kubeconfig, client, []string{"BENCH_KUBECONFIG=" + cluster.Kubeconfig})
}

// plainWriter updates EndpointSlices shaped like the controller's (as many
// endpoints, labels and annotations, owned by a Service), in a namespace of
// their own, as fast as the API server takes them: the yardstick of the
// controller's writes in the same run.
type plainWriter struct {
	client kubernetes.Interface
	slices []*discoveryv1.EndpointSlice
	ready  bool
}

// plainManager is the plain writer's field manager and label value.
const plainManager = "bench-plain-writer"

// newPlainWriter creates namespace and n copies of one of the controller's
// global slices in the storm world.
func newPlainWriter(ctx context.Context, client kubernetes.Interface, namespace string, n int) (*plainWriter, error) {
	list, err := client.DiscoveryV1().EndpointSlices(stormWorld.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + aggregate.EndpointSliceManagedBy, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no slice of the controller's to copy")
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	tmpl := list.Items[0]
	// Owned by a Service, labelled and annotated as the controller's are.
	owner, err := client.CoreV1().Services(namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "plain-owner"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "p", Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	p := &plainWriter{client: client, slices: make([]*discoveryv1.EndpointSlice, n), ready: true}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			name := fmt.Sprintf("plain-%04d", i)
			labels := maps.Clone(tmpl.Labels)
			for k := range labels {
				labels[k] = plainManager // as many labels, none the controller's
			}
			labels[discoveryv1.LabelServiceName] = name
			sl := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, Annotations: maps.Clone(tmpl.Annotations),
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: owner.Name, UID: owner.UID, Controller: new(true)}}},
				AddressType: tmpl.AddressType, Endpoints: tmpl.Endpoints, Ports: tmpl.Ports,
			}
			created, err := client.DiscoveryV1().EndpointSlices(namespace).Create(gctx, sl, metav1.CreateOptions{FieldManager: plainManager})
			p.slices[i] = created
			return err
		})
	}
	return p, g.Wait()
}

// write makes n slice updates, workers at a time, each flipping every
// endpoint's readiness (as a drain or an undrain flips some), and returns
// how long they took.
func (p *plainWriter) write(ctx context.Context, n, workers int) (time.Duration, error) {
	if n > len(p.slices) {
		return 0, fmt.Errorf("%d writes asked of %d slices", n, len(p.slices))
	}
	p.ready = !p.ready
	// Watched as the controller's slices are: by the controller's own
	// informer and by the bench, so that the API server sends each write
	// to as many.
	for range 2 {
		w, err := p.client.DiscoveryV1().EndpointSlices(p.slices[0].Namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: p.slices[0].ResourceVersion})
		if err != nil {
			return 0, err
		}
		defer w.Stop()
		go func() {
			for range w.ResultChan() {
			}
		}()
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error {
			k := i
			sl := p.slices[k].DeepCopy()
			// As the controller writes: its own fields, not the managed
			// fields it read, and the change's trigger time.
			sl.ManagedFields = nil
			if sl.Annotations == nil {
				sl.Annotations = map[string]string{}
			}
			sl.Annotations[corev1.EndpointsLastChangeTriggerTime] = time.Now().UTC().Format(time.RFC3339Nano)
			for e := range sl.Endpoints {
				sl.Endpoints[e].Conditions.Ready = &p.ready
			}
			updated, err := p.client.DiscoveryV1().EndpointSlices(sl.Namespace).Update(gctx, sl, metav1.UpdateOptions{FieldManager: plainManager})
			if err == nil {
				p.slices[k] = updated
			}
			return err
		})
	}
	err := g.Wait()
	return time.Since(start), err
}

// collectGarbage has the API server collect its garbage (its pprof heap
// handler runs a collection first) and returns when it has.
func collectGarbage(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("the API server's garbage collected: %w", err)
	}
	return nil
}

// plainWorkers is how many writes the plain writer of rs had in flight.
func plainWorkers(rs []StormResult) int {
	for _, r := range rs {
		if r.PlainWorkers > 0 {
			return r.PlainWorkers
		}
	}
	return 0
}
