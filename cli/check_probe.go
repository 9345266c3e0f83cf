package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// The DNS probe asks the data path what the objects only say: through each
// pod behind the cluster DNS Service (a port-forward through the API
// server, as kubectl port-forward opens it), one global service that has
// ready endpoints, which must answer exactly their addresses, and a global
// name nothing has, which must not exist. In forwarded mode it asks the
// same pods for the names of the clusterset view, which they forward to the
// chart's DNS.

// probeTarget is the global the probe asks for and what it must answer.
type probeTarget struct {
	namespace, name string
	base            string   // its name in the clusterset view
	want            []string // its ready IPv4 addresses, sorted
}

// probeTargetOf is the first global (by namespace and base) with a ready
// IPv4 endpoint and its objects in sync, or nil.
func probeTargetOf(j judgement) *probeTarget {
	if len(j.diffs) > 0 {
		return nil
	}
	var want []string
	for _, e := range j.View.Endpoints {
		if e.Ready && e.AddressType == discoveryv1.AddressTypeIPv4 {
			want = append(want, e.Addresses...)
		}
	}
	if len(want) == 0 {
		return nil
	}
	slices.Sort(want)
	return &probeTarget{namespace: j.Key.Namespace, name: j.Name, base: j.Key.Base, want: slices.Compact(want)}
}

func checkProbe(ctx context.Context, c check, cl *Cluster, g globals) Result {
	switch {
	case g.err != nil:
		return c.globalsFailure(g.err)
	case cl.DNS == nil || cl.judged() == nil || len(cl.judged().metrics) == 0:
		return c.skipped("cluster DNS image")
	}
	zone, via := "", ""
	if cl.Forwarded != nil {
		// The clusterset view's names, asked through the cluster DNS,
		// which forwards them to the chart's DNS (the path users'
		// lookups take), once the forwarding is right.
		if zone = forwardedZone(cl); zone == "" {
			return c.skipped("global stanza")
		}
		if !judgeForwarding(cl, zone).forwardsAll() {
			return c.skipped("zone forwarded")
		}
		via = fmt.Sprintf(" of the cluster DNS (forwarding %s to the chart's DNS %s)", strings.TrimSuffix(zone, "."), serviceName(cl.Forwarded.Service))
	} else {
		found, _, _ := stanzas(cl)
		for _, cm := range slices.Sorted(maps.Keys(found)) {
			if zs := found[cm].Zones; zone == "" && len(zs) > 0 {
				zone = zs[0]
			}
		}
		if zone == "" {
			return c.skipped("global stanza")
		}
	}
	// Without a global to ask for, the name that must not exist alone.
	target := cmp.Or(g.probe, &probeTarget{namespace: "default"})
	global, absent := probeNames(g, target, zone, cl.Forwarded != nil)
	var wrong, unread []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, pod := range cl.DNS.Pods {
		wg.Go(func() {
			got, err := probePod(ctx, cl, &pod, global, absent, target.want)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				unread = append(unread, pod.Name+": "+probeError(err, pod.Namespace))
			case got != "":
				wrong = append(wrong, pod.Name+": "+got)
			}
		})
	}
	wg.Wait()
	slices.Sort(wrong)
	slices.Sort(unread)
	if len(wrong) > 0 {
		hint := "the pod's log says what its global plugin did (coredns_global_* metrics too); globalmirror status NAMESPACE/NAME shows what each half has of a global"
		if cl.Forwarded != nil {
			hint = "the cluster DNS pod passes on what the chart's DNS answers: the chart's DNS pods' log says what their global plugin did (coredns_global_* metrics too); globalmirror status NAMESPACE/NAME shows what each half has of a global"
		}
		return c.result(Error, "answered otherwise than the halves should: "+strings.Join(wrong, "; "), hint)
	}
	if len(unread) > 0 {
		return c.unread("what the DNS answers: "+strings.Join(unread, "; "),
			"check asks each DNS pod through a port-forward: let your user create pods/portforward in "+cl.DNS.Service.Namespace)
	}
	if global == "" {
		return c.result(OK, fmt.Sprintf("%d pods%s answer %s NXDOMAIN; no global service has a ready endpoint to ask for", len(cl.DNS.Pods), via, absent), "")
	}
	return c.result(OK, fmt.Sprintf("%d pods%s answer %s with its %d ready addresses and %s NXDOMAIN", len(cl.DNS.Pods), via, global, len(target.want), absent), "")
}

// probeNames are the names the probe asks in zone: g's probe target's
// ("" where it has none), and one in target's namespace nothing has. In
// forwarded mode (clusterset) they are the clusterset view's, the target's
// base under its namespace; else the global names.
func probeNames(g globals, target *probeTarget, zone string, clusterset bool) (global, absent string) {
	if clusterset {
		absent = "globalmirror-check-" + randomLabel() + "." + target.namespace + ".svc." + zone
		if g.probe != nil {
			global = g.probe.base + "." + g.probe.namespace + ".svc." + zone
		}
		return global, absent
	}
	absent = "globalmirror-check-" + randomLabel() + g.suffix + "." + target.namespace + ".svc." + zone
	if g.probe != nil {
		global = g.probe.name + "." + g.probe.namespace + ".svc." + zone
	}
	return global, absent
}

// probeError is why a pod could not be asked, naming the right where that
// was it.
func probeError(err error, namespace string) string {
	if apierrors.IsForbidden(err) {
		return "forbidden: " + errMessage(err) + " (create pods/portforward in " + namespace + ")"
	}
	return err.Error()
}

// probePod asks pod, over TCP through a port-forward to its port 53, for
// global, unless "" (it must answer exactly want), and absent (NXDOMAIN). It returns
// how the answers differ, "" when they do not; a changing global is asked
// again for up to 4 s.
func probePod(ctx context.Context, cl *Cluster, pod *corev1.Pod, global, absent string, want []string) (string, error) {
	addr, stop, err := forward(ctx, cl, pod, 53)
	if err != nil {
		return "", err
	}
	defer stop()
	client := &dns.Client{Net: "tcp", Timeout: 3 * time.Second}
	ask := func(name string) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := client.ExchangeContext(ctx, m, addr)
		return r, err
	}
	var differs string
	for attempt := range 3 {
		if global == "" {
			break
		}
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return differs, nil
			case <-time.After(2 * time.Second):
			}
		}
		r, err := ask(global)
		if err != nil {
			return "", fmt.Errorf("asking %s: %w", global, err)
		}
		if differs = answerDiffers(global, r, want); differs == "" {
			break
		}
	}
	if differs != "" {
		return differs, nil
	}
	r, err := ask(absent)
	if err != nil {
		return "", fmt.Errorf("asking %s: %w", absent, err)
	}
	if r.Rcode != dns.RcodeNameError {
		return fmt.Sprintf("%s: %s, want NXDOMAIN", absent, dns.RcodeToString[r.Rcode]), nil
	}
	return "", nil
}

// answerDiffers says how r, the answer for name, differs from want.
func answerDiffers(name string, r *dns.Msg, want []string) string {
	if r.Rcode != dns.RcodeSuccess {
		return fmt.Sprintf("%s: %s, want %s", name, dns.RcodeToString[r.Rcode], strings.Join(want, " "))
	}
	var got []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			got = append(got, a.A.String())
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return fmt.Sprintf("%s: %s, want %s", name, cmp.Or(strings.Join(got, " "), "no address"), strings.Join(want, " "))
	}
	return ""
}

// forward opens a port-forward to pod's port through the API server
// (websocket, else SPDY, as kubectl does) on a free loopback port, and
// returns its address and how to close it.
func forward(ctx context.Context, cl *Cluster, pod *corev1.Pod, port int) (string, func(), error) {
	url := cl.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cl.Config)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	websocket, err := portforward.NewSPDYOverWebsocketDialer(url, cl.Config)
	if err != nil {
		return "", nil, err
	}
	fallback := portforward.NewFallbackDialer(websocket, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(fallback, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	var once sync.Once
	closeIt := func() { once.Do(func() { close(stop) }) }
	select {
	case <-ready:
	case err := <-done:
		return "", nil, cmp.Or(err, errors.New("the port-forward ended before it was ready"))
	case <-ctx.Done():
		closeIt()
		return "", nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		closeIt()
		return "", nil, cmp.Or(err, errors.New("no forwarded port"))
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), closeIt, nil
}

// randomLabel is 8 random hex digits, for a name nothing has.
func randomLabel() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
