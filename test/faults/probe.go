package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/faults/truth"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// truths keeps, per member, the model of what its DNS should answer,
// refreshed from its API server, and what the probers saw against it.
type truths struct {
	group
	mu    sync.Mutex
	state map[*member]*memberTruth
	// worstLag is the longest an answer differed from the truth after the
	// truth's last change, since resetLag.
	worstLag time.Duration
}

// group is goroutines that run until stopped.
type group struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (g *group) stop() {
	g.cancel()
	g.done.Wait()
}

type memberTruth struct {
	world truth.World
	// changed is when world last changed, or when the watched truth did
	// (see watch): an answer given in a state between two polls is the
	// system following the API, not a wrong one.
	changed   time.Time
	refreshed time.Time // when the last refresh that reached the API began
	reachable bool      // the last refresh reached the API server
	lastWrong time.Time // the last answer that differed from world
	lastCheck time.Time
	// seen are the global and per-pod names ever expected, so that names
	// that went away are asked too (they must be gone from DNS as well).
	seen map[string]bool
}

func startTruths(ctx context.Context, r *runner) *truths {
	ctx, cancel := context.WithCancel(ctx)
	t := &truths{state: map[*member]*memberTruth{}, group: group{cancel: cancel}}
	for _, m := range r.members {
		t.state[m] = &memberTruth{seen: map[string]bool{}}
		t.refresh(ctx, m)
		t.done.Go(func() { t.watch(ctx, m) })
		t.done.Go(func() {
			for ctx.Err() == nil {
				t.refresh(ctx, m)
				_ = sleep(ctx, 100*time.Millisecond)
			}
		})
	}
	return t
}

// watch recomputes m's truth after every single change of its Services and
// EndpointSlices, and records when it changed: the states the polls may miss
// (an unlink deletes a cluster's mirrors one by one in tens of
// milliseconds; a pod created Ready and flipped not ready a moment later
// is Ready for less than a poll). It keeps its own copy of the objects and
// applies the watch's events one at a time, so no state is merged into the
// next. A watch resumes from the last version it saw; where that version is
// gone (410, as after an API server restart), the states in between are
// unknown: it lists again and counts that as a change. The expectations
// stay the polled truth's.
func (t *truths) watch(ctx context.Context, m *member) {
	var last truth.World
	for ctx.Err() == nil {
		err := t.watchFromList(ctx, m, &last)
		if ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		t.state[m].changed = time.Now() // blind since the watch ended
		t.mu.Unlock()
		if err != nil {
			_ = sleep(ctx, 100*time.Millisecond)
		}
	}
}

// watchFromList lists m's Services and slices, then applies their watches'
// events one by one until a watch ends.
func (t *truths) watchFromList(ctx context.Context, m *member, last *truth.World) error {
	c := m.c.Client
	svcList, err := c.CoreV1().Services(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	sliceList, err := c.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byName := map[string]corev1.Service{}
	for _, s := range svcList.Items {
		byName[s.Name] = s
	}
	sliceByName := map[string]discoveryv1.EndpointSlice{}
	for _, s := range sliceList.Items {
		sliceByName[s.Name] = s
	}
	watchFrom := func(rv string, w func(context.Context, metav1.ListOptions) (watch.Interface, error)) (*watchtools.RetryWatcher, error) {
		return watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: w})
	}
	svcWatch, err := watchFrom(svcList.ResourceVersion, c.CoreV1().Services(Namespace).Watch)
	if err != nil {
		return err
	}
	defer svcWatch.Stop()
	sliceWatch, err := watchFrom(sliceList.ResourceVersion, c.DiscoveryV1().EndpointSlices(Namespace).Watch)
	if err != nil {
		return err
	}
	defer sliceWatch.Stop()
	for {
		w := truth.Compute(slices.Collect(maps.Values(byName)), slices.Collect(maps.Values(sliceByName)), "-global")
		if !reflect.DeepEqual(w, *last) {
			*last = w
			t.mu.Lock()
			t.state[m].changed = time.Now()
			t.mu.Unlock()
		}
		var ev watch.Event
		open := true
		select {
		case <-ctx.Done():
			return nil
		case ev, open = <-svcWatch.ResultChan():
		case ev, open = <-sliceWatch.ResultChan():
		}
		if !open {
			return nil // the watch gave up: list again
		}
		switch o := ev.Object.(type) {
		case *corev1.Service:
			apply(byName, ev.Type, o.Name, *o)
		case *discoveryv1.EndpointSlice:
			apply(sliceByName, ev.Type, o.Name, *o)
		default:
			if ev.Type != watch.Bookmark {
				return nil // an error (410): list again
			}
		}
	}
}

// sleep waits d, or less if ctx ends first, and returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return ctx.Err()
}

// apply is a watch event of type typ about object o, named name, to objects.
func apply[T any](objects map[string]T, typ watch.EventType, name string, o T) {
	if typ == watch.Deleted {
		delete(objects, name)
	} else {
		objects[name] = o
	}
}

// refresh lists m's Services and slices and recomputes its truth.
func (t *truths) refresh(ctx context.Context, m *member) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	began := time.Now()
	svcs, err := m.c.Client.CoreV1().Services(Namespace).List(ctx, metav1.ListOptions{})
	var w truth.World
	if err == nil {
		sl, serr := m.c.Client.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{})
		if err = serr; err == nil {
			w = truth.Compute(svcs.Items, sl.Items, "-global")
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state[m]
	s.reachable = err == nil
	if err != nil {
		return
	}
	s.refreshed = began
	if !reflect.DeepEqual(w, s.world) {
		s.world, s.changed = w, time.Now()
		for g, gl := range w.Globals {
			s.seen[g] = true
			for h := range gl.Hosts {
				s.seen[h+"."+g] = true
			}
		}
	}
}

func (t *truths) world(m *member) truth.World {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state[m].world
}

// quiet reports whether m's truth has been stable, reachable and matched
// by every answer for at least d, with checks made after since.
func (t *truths) quiet(m *member, since time.Time, d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state[m]
	now := time.Now()
	return s.reachable && now.Sub(s.changed) >= d && now.Sub(s.lastWrong) >= d && s.lastCheck.After(since.Add(d))
}

func (t *truths) describe() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for m, s := range t.state {
		out = append(out, fmt.Sprintf("%s: reachable %v, changed %v ago, wrong %v ago, checked %v ago",
			m.name, s.reachable, time.Since(s.changed).Round(time.Millisecond), time.Since(s.lastWrong).Round(time.Millisecond),
			time.Since(s.lastCheck).Round(time.Millisecond)))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// verdict settles a mismatch once the truth has been read again after the
// query: the truth is polled, so an answer can be ahead of it. The answer
// was wrong if it still differs from the truth, the truth did not change
// since the query, and it had not changed for the window before.
// said is what the truth says of the question, and since when, for the
// report of a wrong answer.
func (t *truths) verdict(m *member, q expectation, got []string, rcode int, at time.Time) (wrong, settled bool, said string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state[m]
	if !s.refreshed.After(at) {
		return false, false, ""
	}
	if s.changed.After(at) {
		return false, true, "" // the answer may be ahead of the polled truth
	}
	e := s.expect(q.name)
	if e.matches(got, rcode) {
		return false, true, "" // the truth caught up with the answer
	}
	// The answer lagged the API's last change before it by this much.
	t.worstLag = max(t.worstLag, at.Sub(s.changed))
	if at.Sub(s.changed) <= window {
		return false, true, "" // converging
	}
	said = "NXDOMAIN"
	if e.exists {
		said = "NOERROR " + addresses(e.addrs)
	}
	return !e.matches(got, rcode), true, fmt.Sprintf("%s, unchanged since %s", said, s.changed.Format("15:04:05.000"))
}

// expectation is one question and what the truth says of it.
type expectation struct {
	name   string
	global string   // the global asked: name's own, or the one it is a per-pod name of
	exists bool     // false: NXDOMAIN
	addrs  []string // its IPv4 addresses, sorted
}

// questions are what to ask m now: every global, its per-pod names, and
// names seen before that are gone now. Names a user holds are not ours.
func (t *truths) questions(m *member) []expectation {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state[m]
	var qs []expectation
	for _, name := range slices.Sorted(maps.Keys(s.seen)) {
		g := name[strings.LastIndexByte(name, '.')+1:]
		if s.world.Theirs[g] {
			continue
		}
		qs = append(qs, s.expect(name+"."+Namespace+".svc.cluster.local."))
	}
	return qs
}

// expect is what the truth says of fqdn, a global or per-pod name.
func (s *memberTruth) expect(fqdn string) expectation {
	name := strings.TrimSuffix(fqdn, "."+Namespace+".svc.cluster.local.")
	host, g, perPod := strings.Cut(name, ".")
	if !perPod {
		g = host
	}
	e := expectation{name: fqdn, global: g}
	gl, ok := s.world.Globals[g]
	switch {
	case !ok:
	case !perPod:
		e.exists, e.addrs = len(gl.IPv4)+len(gl.IPv6) > 0, gl.IPv4
	default:
		e.exists, e.addrs = len(gl.Hosts[host]) > 0, v4(gl.Hosts[host])
	}
	return e
}

// matches reports whether an answer (its A records and rcode) is e's.
func (e expectation) matches(got []string, rcode int) bool {
	if !e.exists {
		return rcode == dns.RcodeNameError
	}
	return rcode == dns.RcodeSuccess && slices.Equal(got, e.addrs)
}

func (t *truths) checked(m *member, wrong bool, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state[m]
	s.lastCheck = at
	if wrong {
		s.lastWrong = at
	}
}

// resetLag starts measuring the longest lag anew.
func (t *truths) resetLag() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.worstLag = 0
}

// lag is the longest an answer differed from the truth after the API's
// last change before it, since resetLag: how long the answers took to
// follow the API, measured from the change as the window is.
func (t *truths) lag() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.worstLag
}

func v4(addrs []string) []string {
	return slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return strings.Contains(a, ":") })
}

// startProbers queries every member's DNS continuously.
func startProbers(ctx context.Context, r *runner) *group {
	ctx, cancel := context.WithCancel(ctx)
	p := &group{cancel: cancel}
	for i, m := range r.members {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)))
		p.done.Go(func() {
			for ctx.Err() == nil {
				r.probe(m, rng)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	return p
}

// probe asks m's DNS every current question once, over UDP or TCP.
func (r *runner) probe(m *member, rng *rand.Rand) {
	for _, q := range r.truths.questions(m) {
		network := "udp"
		if rng.IntN(3) == 0 {
			network = "tcp"
		}
		apiDown, dnsDown := m.state()
		at := time.Now()
		got, rcode, err := askA(m.dnsAddr(), network, q.name)
		apiDownAfter, dnsDownAfter := m.state()
		apiDown, dnsDown = apiDown || apiDownAfter, dnsDown || dnsDownAfter
		r.res.query(network)
		switch {
		case err != nil:
			r.res.failure(m.name, network, failureReason(apiDown, dnsDown, "no answer: "+why(err)))
			continue
		case rcode == dns.RcodeServerFailure:
			r.res.failure(m.name, network, failureReason(apiDown, dnsDown, "SERVFAIL"))
			continue
		}
		mismatch := !q.matches(got, rcode)
		r.truths.checked(m, mismatch, time.Now())
		if mismatch {
			r.pending.Add(1)
			go r.settle(m, q, network, got, rcode, at)
		}
	}
}

// settle waits for the truth to be read again after a mismatching answer
// and counts the answer wrong if the verdict says so.
func (r *runner) settle(m *member, q expectation, network string, got []string, rcode int, at time.Time) {
	defer r.pending.Done()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		wrong, settled, said := r.truths.verdict(m, q, got, rcode, at)
		if !settled {
			continue
		}
		if wrong {
			r.res.wrong(fmt.Sprintf("%s %s %s over %s: %s %s; the API said %s, before and after",
				at.Format("15:04:05.000"), m.name, q.name, network, dns.RcodeToString[rcode], addresses(got), said),
				m.name, q.global)
		}
		return
	}
}

// addresses lists a, the first dozen at most: enough for any global of
// the fault run, so that two lists can be compared.
func addresses(a []string) string {
	if len(a) <= 12 {
		return fmt.Sprint(a)
	}
	return fmt.Sprintf("%v … (%d addresses)", a[:12], len(a))
}

func failureReason(apiDown, dnsDown bool, what string) string {
	switch {
	case dnsDown:
		return what + " while CoreDNS restarted with its API server down (expected)"
	case apiDown:
		return what + " while the API server was down"
	}
	return what
}

// why says why a query got no answer, and in which step a timeout came:
// connecting (a TCP handshake not completed), sending, or waiting for the
// answer.
func why(err error) string {
	var op *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "connection refused"
	}
	if !errors.As(err, &op) || !op.Timeout() {
		return err.Error()
	}
	switch op.Op {
	case "dial":
		return "timeout connecting"
	case "write":
		return "timeout sending"
	}
	return "timeout waiting for the answer"
}

// askA asks name's A records of addr; a truncated UDP answer is asked again
// over TCP. It returns the sorted addresses and the rcode.
func askA(addr, network, name string) ([]string, int, error) {
	m, err := dnsq.Ask(network, addr, name, dns.TypeA, 0)
	if err == nil && m.Truncated && network == "udp" {
		m, err = dnsq.Ask("tcp", addr, name, dns.TypeA, 0)
	}
	if err != nil {
		return nil, 0, err
	}
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out), m.Rcode, nil
}
