package node_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// The asker is a client pod that never stops asking, from before the first
// install to the end of the test: two containers running test/cmd/resolve
// -watch, one over UDP and one over TCP (glibc told so by RES_OPTIONS, Go
// by its dialer), each asking every query with glibc's and with Go's
// resolver in turn, one lookup every askEvery, and writing each result with
// when it was asked into a file of a volume they share. The test reads the
// files as it goes and judges every lookup against what the cluster said
// at that moment (truth): failed, wrong, or slow.

const (
	askEvery = 10 * time.Millisecond // per container, at most
	// minRate is the fewest lookups a second each resolver (glibc, Go)
	// makes over each transport in every span of the timeline.
	minRate = 20
	// slowLookup: a lookup answered after more than this is slow. Lost
	// queries show here: glibc and Go wait 5 s before they ask again.
	slowLookup = time.Second
	// oneRetry bounds a slow lookup where one is allowed: the resolver's
	// 5 s timeout, then an answer that is not slow itself.
	oneRetry = 5*time.Second + slowLookup
)

// withBothResolvers is queries (TYPE/NAME) as each container asks them in
// turn (LIB/TYPE/NAME): each with glibc, then with Go.
func withBothResolvers(queries []string) []string {
	var qs []string
	for _, q := range queries {
		qs = append(qs, "glibc/"+q, "go/"+q)
	}
	return qs
}

// askerSpec runs the asker's containers, in a pod called name, on queries
// (LIB/TYPE/NAME).
func (s *install) askerSpec(name string, qs []string) *corev1.Pod {
	container := func(network string, env ...corev1.EnvVar) corev1.Container {
		args := []string{"resolve", "-watch", "/lookups/" + network + ".jsonl", "-every", askEvery.String()}
		if network == "tcp" {
			args = append(args, "-tcp")
		}
		return corev1.Container{
			Name: network, Image: s.node.Images["client"], ImagePullPolicy: corev1.PullNever,
			Command: append(args, qs...), Env: env,
			VolumeMounts: []corev1.VolumeMount{{Name: "lookups", MountPath: "/lookups"}},
		}
	}
	spec := s.podSpec("unused", "client")
	spec.Containers = []corev1.Container{container("udp"), container("tcp", corev1.EnvVar{Name: "RES_OPTIONS", Value: "use-vc"})}
	spec.Volumes = []corev1.Volume{{Name: "lookups", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

// lookup is one line of the asker's files.
type lookup struct {
	At     int64   `json:"at"` // Unix milliseconds
	Millis float64 `json:"ms"`
	result
	network string
}

func (l lookup) asked() time.Time    { return time.UnixMilli(l.At) }
func (l lookup) took() time.Duration { return time.Duration(l.Millis * float64(time.Millisecond)) }
func (l lookup) answered() time.Time { return l.asked().Add(l.took()) }

// askerLog reads the asker's files as they grow.
type askerLog struct {
	s      *install
	pod    string
	offset map[string]int // bytes read of each file
	all    []lookup
}

// readPast reads the asker's files until each holds a lookup asked after
// t: each container asks one lookup at a time, so every lookup asked
// before t is then written, however long it took.
func (a *askerLog) readPast(t time.Time) {
	a.s.t.Helper()
	a.s.eventually("the asker's lookups past "+t.Format("15:04:05.000"), func(context.Context) string {
		a.read()
		for _, network := range []string{"udp", "tcp"} {
			if !slices.ContainsFunc(a.all, func(l lookup) bool { return l.network == network && l.asked().After(t) }) {
				return "no " + network + " lookup asked after it yet"
			}
		}
		return ""
	})
}

// read reads what the asker wrote since the last read.
func (a *askerLog) read() {
	a.s.t.Helper()
	for _, network := range []string{"udp", "tcp"} {
		out, err := a.s.node.ExecIn(a.s.ctx, ns, a.pod, "udp", "tail", "-c", "+"+strconv.Itoa(a.offset[network]+1), "/lookups/"+network+".jsonl")
		if err != nil {
			a.s.t.Fatalf("reading the asker's %s lookups: %v", network, err)
		}
		// Only whole lines: the asker may be writing one.
		end := strings.LastIndexByte(out, '\n') + 1
		a.offset[network] += end
		for line := range strings.Lines(out[:end]) {
			var l lookup
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				a.s.t.Fatalf("the asker's %s lookups: %v: %s", network, err, line)
			}
			l.network = network
			a.all = append(a.all, l)
		}
	}
}

// truth is what the cluster says at each moment: the expected results of
// every query, each valid over a span. A change of the world (the global
// service appears; reverse names are switched on) opens a new span while
// the old one stays valid until the answers have all followed.
type truth struct {
	spans []span
}

type span struct {
	from, to time.Time // to zero: still valid
	want     answers
}

// now makes want what the cluster says from now on; what it said before
// stays right too until settled.
func (tr *truth) now(want answers) {
	tr.spans = append(tr.spans, span{from: time.Now(), want: want})
}

// settled ends every span but the last: the answers have followed.
func (tr *truth) settled() {
	for i := range tr.spans[:len(tr.spans)-1] {
		if tr.spans[i].to.IsZero() {
			tr.spans[i].to = time.Now()
		}
	}
}

// right reports whether l is a result the cluster gave at some moment
// while l was asked, or lag before: a cache between the asker and the
// cluster DNS keeps an answer that long past it.
func (tr *truth) right(l lookup, lag time.Duration) bool {
	for _, sp := range tr.spans {
		if l.answered().Before(sp.from) || !sp.to.IsZero() && l.asked().After(sp.to.Add(lag)) {
			continue
		}
		if w, ok := sp.want[l.Query]; ok && w.matches(l.result) {
			return true
		}
	}
	return false
}

// allowance is what a span of the timeline may do to lookups.
type allowance int

const (
	strict allowance = iota // no lookup fails, is wrong or slow
	// kubeadmPodsEnd: kubeadm's own CoreDNS pods end, with kubeadm's
	// readiness probe (10 s x 3), which may outlast their lameduck (5 s as
	// kubeadm writes it, 15 s where way 2 was undone), so a client port
	// reused while kube-proxy still keeps the UDP conntrack entry to an
	// ended pod loses its query (DESIGN.md): the lookup is slow, by one
	// retry at most (the query lost to the pod), or refused at once (the
	// pod's closed port answers ICMP port unreachable): glibc gives up, Go
	// goes on down the search path and finds nothing. At most
	// maxKubeadmLost lookups may be lost so, answers orphaned included,
	// each proven by the wire (dnsWire.cause).
	kubeadmPodsEnd
	// reloads: CoreDNS reloads its Corefile in place. The instance being
	// replaced shuts its TCP connections at once, so one it took but had
	// not answered yet is closed under its asker (CoreDNS's server, with or
	// without global), and glibc fails the lookup where the close comes as
	// a FIN, or, where it cost the first name of its search list its
	// answers, finds nothing. Such a failed or empty TCP lookup is excused
	// where the wire shows the pod closing the connection first
	// (dnsWire.closedFirst), one lookup for each pod at most.
	reloads
)

const maxKubeadmLost = 3

// timeline judges every lookup the asker makes, span after span: each span
// starts where the last ended, so none is left out, whatever the test was
// doing when it was asked.
type timeline struct {
	log       *askerLog
	tr        *truth
	wire      *dnsWire
	endpoints *endpointHistory
	queries   []string // LIB/TYPE/NAME, as each container asks them
	// lag is how long past the cluster DNS's answers the asker's to a
	// query may be the old ones (a cache in front of it); nil: not at all.
	lag     func(query string) time.Duration
	at      time.Time
	tallies []tally
}

// end ends the span that started at tl.at, once every query has been asked
// in it over both transports (a span too short for that waits), and tallies
// its lookups.
func (tl *timeline) end(name string, allows allowance) tally {
	from := tl.at
	tl.log.s.eventually("every query asked since "+from.Format("15:04:05.000"), func(context.Context) string {
		tl.log.read()
		asked := map[string]bool{}
		for _, l := range tl.log.all {
			if !l.asked().Before(from) {
				asked[l.network+" "+l.Query] = true
			}
		}
		for _, network := range []string{"udp", "tcp"} {
			for _, q := range tl.queries {
				if !asked[network+" "+q] {
					return q + " not asked over " + network + " yet"
				}
			}
		}
		return ""
	})
	to := time.Now()
	tl.log.readPast(to)
	t := tl.log.judge(tl.tr, tl.lag, tl.wire, tl.endpoints.ended(from, to), allows, name, from, to)
	tl.wire.forget(from)
	tl.at = to
	tl.tallies = append(tl.tallies, t)
	return t
}

// tally is what the lookups of a span came to.
type tally struct {
	Step  string
	Took  time.Duration
	Asked int
	// By is the lookups of each resolver over each transport ("glibc/udp").
	By                  map[string]int
	Failed, Wrong, Slow int
	// Ended are the CoreDNS pods whose endpoints stopped serving in the
	// span: the only pods an excused lookup may be lost to.
	Ended int
	// Orphaned lookups were slow by one retry over UDP because kube-proxy
	// left their answer from an ended pod without its NAT; Refused ones
	// failed at once, or were wrong by Go's going on down the search path,
	// because an ended pod refused their query; Lost ones were slow by one
	// retry because their query went to an ended pod that never answered.
	// None is counted failed, wrong or slow: each is proven by a packet
	// (Excused says which).
	Orphaned, Refused, Lost int
	// Closed lookups failed over TCP because a reloading pod closed their
	// connection first; also proven by a packet.
	Closed  int
	Excused []string
	Slowest time.Duration
	Samples []string // of the failed, wrong and slow lookups
	// FirstBad is when the first of them was asked; firstBad is that lookup.
	FirstBad time.Time
	firstBad lookup
}

// resolverTransports are the keys of tally.By.
var resolverTransports = []string{"glibc/udp", "glibc/tcp", "go/udp", "go/tcp"}

// rate is the lookups a second of one resolver over one transport (a key
// of By).
func (t tally) rate(k string) float64 { return float64(t.By[k]) / t.Took.Seconds() }

// lowestRate is the fewest lookups a second of any resolver and transport.
func (t tally) lowestRate() float64 {
	return t.rate(slices.MinFunc(resolverTransports, func(a, b string) int { return cmp.Compare(t.By[a], t.By[b]) }))
}

// problems are what the span's lookups did that allows does not allow:
// any failed, wrong or slow lookup (judge has excused at most one orphaned
// answer for each ended pod, in a reload one closed connection for each
// pod, and nothing else outside kubeadm's steps);
// where kubeadm's pods end, more than maxKubeadmLost excused.
func (t tally) problems(allows allowance) []string {
	var out []string
	if t.Failed+t.Wrong+t.Slow > 0 {
		out = append(out, fmt.Sprintf("%d failed, %d wrong, %d slow (over %v)", t.Failed, t.Wrong, t.Slow, slowLookup))
	}
	if lost := t.Orphaned + t.Refused + t.Lost; allows == kubeadmPodsEnd && lost > maxKubeadmLost {
		out = append(out, fmt.Sprintf("%d lookups lost to ended pods (%d orphaned, %d refused, %d lost), at most %d where kubeadm's pods end",
			lost, t.Orphaned, t.Refused, t.Lost, maxKubeadmLost))
	}
	for _, k := range resolverTransports {
		if r := t.rate(k); r < minRate {
			out = append(out, fmt.Sprintf("%s asked %.1f lookups a second, want %d at least", k, r, minRate))
		}
	}
	return out
}

func (t tally) String() string {
	excused := ""
	if n := t.Orphaned + t.Refused + t.Lost; n > 0 {
		excused = fmt.Sprintf(", %d orphaned, %d refused and %d lost by the %d CoreDNS pods that ended", t.Orphaned, t.Refused, t.Lost, t.Ended)
	}
	if t.Closed > 0 {
		excused += fmt.Sprintf(", %d closed by a reload", t.Closed)
	}
	out := fmt.Sprintf("%s: %d lookups (%v), %d failed, %d wrong, %d slow (over %v)%s, the slowest %v, in %v",
		t.Step, t.Asked, t.By, t.Failed, t.Wrong, t.Slow, slowLookup, excused, t.Slowest.Round(time.Millisecond), t.Took.Round(100*time.Millisecond))
	if bad := append(slices.Clone(t.Samples), t.Excused...); len(bad) > 0 {
		out += ":\n  " + strings.Join(bad, "\n  ")
	}
	return out
}

// markdown is the tallies as the chart's README shows them.
func markdown(ts []tally) string {
	var b strings.Builder
	b.WriteString("| step | lookups | a second, fewest of the four | failed | wrong | slow | answer orphaned | refused | lost | pods ended | closed by a reload | slowest | took |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range ts {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %d | %d | %d | %d | %d | %d | %d | %d | %v | %v |\n", t.Step, t.Asked, t.lowestRate(), t.Failed, t.Wrong, t.Slow,
			t.Orphaned, t.Refused, t.Lost, t.Ended, t.Closed, t.Slowest.Round(time.Millisecond), t.Took.Round(100*time.Millisecond))
	}
	return b.String()
}

// The excuses allowed one lookup at most for each pod: kube-proxy's
// conntrack cleanup orphans an answer once for each pod that ended, and a
// reload closes the asker's one TCP connection to a pod once.
const (
	orphanedAnswer = "answer orphaned"
	closedByReload = "closed by a reload"
)

// judge tallies the lookups asked in [from, to). A lookup that went wrong
// over UDP is excused only by what the wire proves befell it through a pod
// in ended (dnsWire.cause): an orphaned answer (slow by one retry) in any
// span, one lookup for each such pod; a refusal (failed at once, or Go's
// not-found that follows one, or failed after one retry where the retry was
// lost too) or a query lost (slow by one retry) only where allows says
// kubeadm's pods end (problems bounds those); over TCP, a connection a
// pod closed first (failed, or found nothing) only where allows says
// CoreDNS reloads, one lookup for each pod.
func (a *askerLog) judge(tr *truth, lag func(query string) time.Duration, wire *dnsWire, ended map[netip.Addr]time.Time, allows allowance, step string, from, to time.Time) tally {
	t := tally{Step: step, Took: to.Sub(from), By: map[string]int{}, Ended: len(ended)}
	sample := func(l lookup, desc string) {
		if t.FirstBad.IsZero() {
			t.FirstBad, t.firstBad = l.asked(), l
		}
		if len(t.Samples) < 10 {
			t.Samples = append(t.Samples, desc)
		}
	}
	oncePerPod := map[string]map[netip.Addr]bool{orphanedAnswer: {}, closedByReload: {}}
	excuse := func(e *evidence, what string, n *int, desc string) bool {
		if e == nil || oncePerPod[what][e.pod] {
			return false
		}
		if once := oncePerPod[what]; once != nil {
			once[e.pod] = true
		}
		*n++
		t.Excused = append(t.Excused, fmt.Sprintf("%s: %s: %s", what, desc, e.packet))
		return true
	}
	for _, l := range a.all {
		if l.asked().Before(from) || !l.asked().Before(to) {
			continue
		}
		t.Asked++
		lib, _, _ := strings.Cut(l.Query, "/")
		t.By[lib+"/"+l.network]++
		t.Slowest = max(t.Slowest, l.took())
		desc := fmt.Sprintf("%s %s over %s after %.0f ms", l.asked().Format("15:04:05.000"), l.Query, l.network, l.Millis)
		var lagged time.Duration
		if lag != nil {
			lagged = lag(l.Query)
		}
		right := l.Err == "" && tr.right(l, lagged)
		if right && l.took() <= slowLookup {
			continue
		}
		var orphaned, refused, lost, closed *evidence
		if l.network == "udp" {
			orphaned, refused, lost = wire.cause(l, ended)
			if allows != kubeadmPodsEnd {
				refused, lost = nil, nil
			}
		} else if allows == reloads {
			closed = wire.closedFirst(l)
		}
		byOneRetry := l.took() <= oneRetry
		switch {
		case !right && l.took() < slowLookup && excuse(refused, "refused", &t.Refused, desc):
		// glibc asks again from a new port after a refusal, which a
		// stale conntrack entry may carry to the other ended pod.
		case !right && byOneRetry && lost != nil && excuse(refused, "refused, its retry lost", &t.Refused, desc):
		case right && byOneRetry && excuse(orphaned, orphanedAnswer, &t.Orphaned, desc):
		case right && byOneRetry && excuse(lost, "query lost", &t.Lost, desc):
		// glibc's TCP search ends in not found, rather than failed, where
		// the close cost its first name its answers: no record, and proven
		// the same way.
		case (l.Err != "" || !right && l.NotFound && len(l.Records) == 0) && excuse(closed, closedByReload, &t.Closed, desc):
		case l.Err != "":
			t.Failed++
			sample(l, "failed: "+desc+": "+l.Err)
		case !right:
			t.Wrong++
			sample(l, fmt.Sprintf("wrong: %s: %+v", desc, l.result))
		default:
			t.Slow++
			sample(l, "slow: "+desc)
		}
	}
	return t
}

// matches reports whether got is w: the same records (any order), the
// same kind of negative answer; where w lists alternatives (Any), one of
// them.
func (w result) matches(got result) bool {
	if got.Err != "" {
		return false
	}
	if len(w.Any) > 0 {
		return slices.ContainsFunc(w.Any, func(alt []string) bool { return slices.Equal(alt, got.Records) })
	}
	return slices.Equal(w.Records, got.Records) && w.NotFound == got.NotFound && w.NXDomain == got.NXDomain
}

// endpointHistory is every state of kube-dns's endpoints the API announced
// while the test ran, with when the test heard of it: what kube-proxy was
// told, which pods ended when (ended), and, beside a lookup that went
// wrong, what was said around it.
type endpointHistory struct {
	mu     sync.Mutex
	states []endpointState
}

type endpointState struct {
	at    time.Time
	slice string
	eps   string
	// serving are the addresses serving and not terminating.
	serving map[netip.Addr]bool
}

// watchKubeDNSEndpoints records kube-dns's EndpointSlices until ctx ends,
// through an informer (its relists and rewatches are client-go's).
func (s *install) watchKubeDNSEndpoints(ctx context.Context) *endpointHistory {
	h := &endpointHistory{}
	factory := informers.NewSharedInformerFactoryWithOptions(s.c, 0, informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=kube-dns" }))
	record := func(st endpointState) {
		st.at = time.Now()
		h.mu.Lock()
		h.states = append(h.states, st)
		h.mu.Unlock()
	}
	announced := func(o any) {
		sl := o.(*discoveryv1.EndpointSlice)
		st := endpointState{slice: sl.Name, serving: map[netip.Addr]bool{}}
		var eps []string
		for _, e := range sl.Endpoints {
			c := e.Conditions
			eps = append(eps, fmt.Sprintf("%v ready %v serving %v terminating %v", e.Addresses,
				ptr.Deref(c.Ready, false), ptr.Deref(c.Serving, false), ptr.Deref(c.Terminating, false)))
			for _, a := range e.Addresses {
				if addr, err := netip.ParseAddr(a); err == nil && ptr.Deref(c.Serving, false) && !ptr.Deref(c.Terminating, false) {
					st.serving[addr] = true
				}
			}
		}
		st.eps = strings.Join(eps, "; ")
		record(st)
	}
	s.must(factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    announced,
		UpdateFunc: func(_, o any) { announced(o) },
		DeleteFunc: func(o any) {
			key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(o)
			_, name, _ := cache.SplitMetaNamespaceKey(key)
			record(endpointState{slice: name, eps: "deleted"})
		},
	}))
	factory.Start(ctx.Done())
	return h
}

// ended is each address whose endpoint stopped serving, began terminating
// or went in [from, to], and when it first did.
func (h *endpointHistory) ended(from, to time.Time) map[netip.Addr]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[netip.Addr]time.Time{}
	serving := map[string]map[netip.Addr]bool{} // by slice, as last announced
	for _, st := range h.states {
		if st.at.After(to) {
			break
		}
		if !st.at.Before(from) {
			for addr := range serving[st.slice] {
				if _, seen := out[addr]; !seen && !st.serving[addr] {
					out[addr] = st.at
				}
			}
		}
		serving[st.slice] = st.serving
	}
	return out
}

// around is the states heard within d of t.
func (h *endpointHistory) around(t time.Time, d time.Duration) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "kube-dns's endpoints as announced from %s to %s:\n", t.Add(-d).Format("15:04:05.000"), t.Add(d).Format("15:04:05.000"))
	for _, st := range h.states {
		if st.at.After(t.Add(-d)) && st.at.Before(t.Add(d)) {
			fmt.Fprintf(&b, "  %s %s: %s\n", st.at.Format("15:04:05.000"), st.slice, st.eps)
		}
	}
	return b.String()
}
