package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// fault is one kind of fault: applicable says whether it can be injected now,
// inject does it (and undoes it where the fault is an outage) and says what
// it did.
type fault struct {
	kind       string
	weight     int
	applicable func(r *runner) bool
	inject     func(ctx context.Context, r *runner, m *member) (string, error)
}

const (
	compactionKind = "compact etcd, restart kube-apiserver (watches get 410 Gone)"
	rollingKind    = "restart three kube-apiservers one after another (HA upgrade)"
)

var faultKinds = []fault{
	{"unlink a cluster", 2, func(r *runner) bool { return true }, unlink},
	{"link a cluster back", 4, anyUnlinked, linkBack},
	{"scale pods", 3, func(r *runner) bool { return true }, scale},
	{"flip a pod's readiness", 3, func(r *runner) bool { return true }, flipReady},
	{"gateway down or up", 3, func(r *runner) bool { return true }, flipGateway},
	{"annotate an exported service (Helm, Argo CD)", 3, func(r *runner) bool { return true }, annotate},
	{"kill kube-apiserver and restart it", 2, func(r *runner) bool { return true }, apiserverOutage},
	{rollingKind, 2, func(r *runner) bool { return true }, rollingRestart},
	{compactionKind, 1, func(r *runner) bool { return true }, compactEtcd},
	{"kill the leader (SIGKILL)", 2, func(r *runner) bool { return true }, killLeader(true)},
	{"terminate the leader (SIGTERM)", 2, func(r *runner) bool { return true }, killLeader(false)},
	{"restart CoreDNS while its API server is down", 1, func(r *runner) bool { return true }, restartCoreDNSDuringOutage},
	{"add hostile objects", 1, func(r *runner) bool { return len(r.hostile) < len(r.members) }, addHostile},
	{"remove hostile objects", 2, func(r *runner) bool { return len(r.hostile) > 0 }, removeHostile},
}

// faultPhase injects faults until the duration is over, each once the
// answers have converged after the previous one.
func (r *runner) faultPhase(ctx context.Context) error {
	end := time.Now().Add(r.cfg.Duration)
	for time.Now().Before(end) {
		f := r.pick()
		m := r.members[r.rng.IntN(len(r.members))]
		at := time.Now()
		r.res.injecting(f.kind)
		what, err := f.inject(ctx, r, m)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", f.kind, m.name, err)
		}
		r.res.fault(f.kind)
		r.cfg.Log.Info("fault", "kind", f.kind, "cluster", m.name, "what", what, "at", at.Format("15:04:05.000"))
		if err := r.converged(ctx, f.kind, at); err != nil {
			return err
		}
		if err := sleep(ctx, time.Duration(200+r.rng.IntN(1300))*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// pick draws an applicable fault by weight, among the kinds not injected
// yet while there are such, so that even a short run injects every kind.
func (r *runner) pick() fault {
	injected := r.res.injected()
	candidates := slices.DeleteFunc(slices.Clone(faultKinds), func(f fault) bool { return !f.applicable(r) })
	if fresh := slices.DeleteFunc(slices.Clone(candidates), func(f fault) bool { return injected[f.kind] > 0 }); len(fresh) > 0 {
		candidates = fresh
	}
	total := 0
	for _, f := range candidates {
		total += f.weight
	}
	n := r.rng.IntN(total)
	for _, f := range candidates {
		if n < f.weight {
			return f
		}
		n -= f.weight
	}
	return candidates[len(candidates)-1]
}

func (r *runner) other(m *member) *member {
	for {
		if o := r.members[r.rng.IntN(len(r.members))]; o != m {
			return o
		}
	}
}

func unlink(ctx context.Context, r *runner, m *member) (string, error) {
	o := r.other(m)
	if !with(m, func() bool { return m.linked[o.name] }) {
		return linkBackTo(ctx, r, m, o)
	}
	if err := m.world.Sim.Unlink(ctx, o.name); err != nil {
		return "", err
	}
	m.locked(func() {
		delete(m.linked, o.name)
		delete(m.gateways, o.name)
	})
	return "unlinked " + o.name, nil
}

func anyUnlinked(r *runner) bool {
	for _, m := range r.members {
		if with(m, func() int { return len(m.linked) }) < len(r.members)-1 {
			return true
		}
	}
	return false
}

func linkBack(ctx context.Context, r *runner, _ *member) (string, error) {
	for _, m := range r.members {
		for _, o := range r.members {
			if o != m && !with(m, func() bool { return m.linked[o.name] }) {
				return linkBackTo(ctx, r, m, o)
			}
		}
	}
	return "nothing to link", nil
}

func linkBackTo(ctx context.Context, r *runner, m, o *member) (string, error) {
	if err := r.link(ctx, m, o); err != nil {
		return "", err
	}
	return fmt.Sprintf("linked %s into %s", o.name, m.name), nil
}

func scale(ctx context.Context, r *runner, m *member) (string, error) {
	m.mu.Lock()
	n := m.replicas + []int{-1, 1}[r.rng.IntN(2)]
	if n < 1 || n > 5 {
		n = 3
	}
	m.replicas = n
	for pod := range m.notReady {
		var ord int
		if _, err := fmt.Sscanf(pod, "db-%d", &ord); err == nil && ord >= n {
			delete(m.notReady, pod) // the pod goes; a new one would start ready
		}
	}
	m.mu.Unlock()
	return fmt.Sprintf("db to %d pods", n), m.db.Scale(ctx, n)
}

func flipReady(ctx context.Context, r *runner, m *member) (string, error) {
	m.mu.Lock()
	pod := fmt.Sprintf("db-%d", r.rng.IntN(m.replicas))
	ready := m.notReady[pod] // flipped: ready again if it was not
	m.notReady[pod] = !ready
	m.mu.Unlock()
	return fmt.Sprintf("%s ready=%v", pod, ready), m.db.SetReady(ctx, pod, ready)
}

func flipGateway(_ context.Context, r *runner, m *member) (string, error) {
	m.mu.Lock()
	linked := slices.Sorted(maps.Keys(m.linked))
	if len(linked) == 0 {
		m.mu.Unlock()
		return "no link", nil
	}
	o := linked[r.rng.IntN(len(linked))]
	up := !m.gateways[o]
	m.gateways[o] = up
	m.mu.Unlock()
	return fmt.Sprintf("%s's gateway up=%v", o, up), m.world.Sim.SetGatewayAlive(o, up)
}

// annotate writes an annotation on m's exported service, as Helm and Argo
// CD do on every sync: Linkerd rewrites its headless mirror in every
// cluster that links m to the gateway until m's pods next change.
func annotate(ctx context.Context, r *runner, m *member) (string, error) {
	value := fmt.Sprintf("%s:/Service:%s/db-%d", m.name, m.db.Namespace, r.rng.IntN(1_000_000))
	return "argocd.argoproj.io/tracking-id=" + value, m.db.Annotate(ctx, "argocd.argoproj.io/tracking-id", value)
}

// outage stops m's API server, runs during while it is down, waits a moment
// and brings it back.
func (r *runner) outage(ctx context.Context, m *member, during func() error) error {
	m.locked(func() { m.apiDown = true })
	defer m.locked(func() { m.apiDown = false })
	// The outage lasts 1–4 s from the stop, whatever during takes, so that
	// it stays within the leaders' renew deadline (10 s), as a brief
	// control-plane restart does in a cluster.
	down := time.Duration(1000+r.rng.IntN(3000)) * time.Millisecond
	if err := m.c.StopAPIServer(); err != nil {
		return err
	}
	stopped := time.Now()
	if during != nil {
		if err := during(); err != nil {
			return err
		}
	}
	time.Sleep(time.Until(stopped.Add(down)))
	return m.c.StartAPIServer(ctx)
}

// rollingRestart restarts the replicated cluster's kube-apiservers one
// after another, as an upgrade of a highly available control plane does,
// each back and ready before the next goes; watches resumed on one just
// restarted get 410 (its watch cache starts at its own revision). The
// address in front of them serves throughout.
func rollingRestart(ctx context.Context, r *runner, _ *member) (string, error) {
	m := r.members[0]
	for i := range m.c.APIServers() {
		if err := m.c.RestartAPIServerAt(ctx, i, time.Duration(500+r.rng.IntN(1500))*time.Millisecond); err != nil {
			return "", fmt.Errorf("kube-apiserver %d of %s: %w", i, m.name, err)
		}
	}
	return fmt.Sprintf("%s's %d kube-apiservers restarted in turn", m.name, m.c.APIServers()), nil
}

func apiserverOutage(ctx context.Context, r *runner, m *member) (string, error) {
	return "kube-apiserver down and back", r.outage(ctx, m, nil)
}

// compactEtcd compacts m's etcd up to now and restarts its API server:
// every informer then resumes its watch from a compacted revision, is told
// 410 Gone, and lists again.
func compactEtcd(ctx context.Context, r *runner, m *member) (string, error) {
	// A resourceVersion an informer could hold now.
	before, err := m.c.Client.CoreV1().Services(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	revision, err := m.c.CompactEtcd(ctx)
	if err != nil {
		return "", err
	}
	if err := r.outage(ctx, m, nil); err != nil {
		return "", err
	}
	// What every informer meets when it resumes its watch: 410 Gone.
	w, err := m.c.Client.CoreV1().Services(Namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err == nil {
		ev := <-w.ResultChan()
		w.Stop()
		if ev.Type == watch.Error && apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
			r.res.gone410()
		}
	} else if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		r.res.gone410()
	}
	return fmt.Sprintf("compacted to revision %d (a watch from %s: 410 Gone)", revision, before.ResourceVersion), nil
}

// killLeader ends m's leading controller and starts a replacement, so two
// replicas run again; kill is SIGKILL, else SIGTERM.
func killLeader(kill bool) func(context.Context, *runner, *member) (string, error) {
	return func(ctx context.Context, r *runner, m *member) (string, error) {
		for _, c := range m.controllers() {
			if exited, _ := c.Exited(); !exited && leads(c) {
				r.procs.stop(c.Process, kill)
				m.locked(func() { m.ctrls = slices.DeleteFunc(m.ctrls, func(x *run.Controller) bool { return x == c }) })
				return "leader " + c.LogPath + " ended", r.startController(ctx, m)
			}
		}
		return "no leader yet", nil
	}
}

// restartCoreDNSDuringOutage restarts m's CoreDNS while its API server is
// down: until the API server is back, the plugin has not synced and answers
// SERVFAIL (as the kubernetes plugin does); the probers count those as
// expected.
func restartCoreDNSDuringOutage(ctx context.Context, r *runner, m *member) (string, error) {
	err := r.outage(ctx, m, func() error {
		old := with(m, func() *run.CoreDNS { m.dnsDown = true; return m.dns })
		r.procs.stop(old.Process, false)
		return r.startCoreDNS(ctx, m, false)
	})
	if err == nil {
		err = waitReady(ctx, m)
	}
	m.locked(func() { m.dnsDown = false })
	return "CoreDNS restarted while kube-apiserver was down", err
}
