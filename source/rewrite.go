package source

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Linkerd's gateway rewrite. On an update of an exported Service (an
// annotation from Helm or Argo CD is enough), Linkerd's service mirror writes
// the headless mirror's Endpoints anew with its gateway's address alone,
// without a hostname, on the gateway port (cluster_watcher.go:
// handleRemoteExportedServiceUpdated), and nothing puts the pods back until
// the next event on the remote Endpoints (createOrUpdateHeadlessEndpoints).
// Everywhere else Linkerd writes a headless mirror's addresses with their
// hostnames, so an endpoint without one in a headless mirror's slice is that
// rewrite. The pods are still what Linkerd last mirrored, and their
// endpoint mirrors (one per pod, which carry their readiness) are left as
// they were. So the index holds a headless mirror's slices as they were last
// with every endpoint named, from the moment a slice without a name comes,
// until its slices are all named again: Input reads the held ones, each
// endpoint only while its endpoint mirror has slices. For where the remote
// pods change as the exported Service is updated, Linkerd writes the pods
// and then the gateway, and the EndpointSlice mirroring controller may
// mirror the last alone; but Linkerd changes the endpoint mirrors as it
// changes the pods. So a pod whose endpoint mirror goes leaves the held view
// at once, and an endpoint mirror that comes or goes makes the index rebuild
// the view from the endpoint mirrors, as it does for a rewrite it never saw
// named (a process started during one): one list of the Services labelled
// with that headless mirror (the index keeps no endpoint mirror Service),
// each a pod: its hostname, its ClusterIP, the headless mirror's Service
// ports, the pods' own where a target port names them (the Endpoints Linkerd
// replaced had them). Until then, and where there is no endpoint mirror, the
// aggregation drops the gateway.

// unnamed reports whether an endpoint of c has no hostname.
func (c *indexedSlice) unnamed() bool {
	body := c.body()
	for i := range int(c.endpoints) {
		if endpointFlags(body[endpointHeader*i+2])&hasHostname == 0 || body[endpointHeader*i+1] == 0 {
			return true
		}
	}
	return false
}

// namedOnly reports whether the mirror feed's slices of e have an endpoint
// and every endpoint a hostname.
func namedOnly(e *entry) (named bool) {
	for _, m := range e.members {
		if m.feed() != mirrorFeed || m.cluster() == "" {
			continue
		}
		if m.unnamed() {
			return false
		}
		named = named || m.endpoints > 0
	}
	return named
}

// holdBefore is called before cur, a headless mirror's slice (or one that
// may be), is filed under service: where cur has an endpoint without a
// hostname and service's slices are named, they are held.
func (s *Source) holdBefore(namespace, service string, cur *indexedSlice) {
	if service == "" || cur.cluster() == "" || !cur.unnamed() || s.held.get(namespace, service) != nil {
		return
	}
	e := s.entries.get(namespace, service)
	if e == nil || !namedOnly(e) {
		s.rebuilds.Add(nsName{namespace, service}) // nothing named to hold
		return
	}
	held := slices.DeleteFunc(slices.Clone(e.members), func(m *indexedSlice) bool { return m.feed() != mirrorFeed })
	s.held.set(s.intern.str(namespace), e.svc.name, held)
	klog.InfoS("Linkerd wrote its gateway into a headless mirror (an update of the exported Service); answering its pods as they were until Linkerd writes them again",
		"namespace", namespace, "mirror", service)
	// Linkerd may have written pods the index never saw named (the
	// mirroring controller mirrors the gateway that followed them alone),
	// and their endpoint mirrors came before the hold: rebuilt from those.
	if s.missesEndpointMirrors(e, cur.cluster(), service, held) {
		s.rebuilds.Add(nsName{namespace, service})
	}
}

// missesEndpointMirrors reports whether headless mirror service of cluster
// has an endpoint mirror (one with slices in e) that no endpoint of held
// names.
func (s *Source) missesEndpointMirrors(e *entry, cluster, service string, held []*indexedSlice) bool {
	named := map[uint64]bool{}
	for _, h := range held {
		for _, ep := range h.slice(service).Endpoints {
			if ep.Hostname != nil {
				named[mirrorService(s.hash.of(*ep.Hostname+"-"+cluster))] = true
			}
		}
	}
	return slices.ContainsFunc(e.mirrors, func(m mirrorSlice) bool { return !named[m.serviceHash()] })
}

// releaseAfter is called after service's slices changed: once none lacks a
// hostname, the held ones are dropped.
func (s *Source) releaseAfter(namespace, service string) {
	if service == "" || s.held.get(namespace, service) == nil {
		return
	}
	if e := s.entries.get(namespace, service); e != nil && slices.ContainsFunc(e.members, func(m *indexedSlice) bool {
		return m.feed() == mirrorFeed && m.unnamed()
	}) {
		return
	}
	s.held.del(namespace, service)
	klog.InfoS("Linkerd wrote a headless mirror's pods again", "namespace", namespace, "mirror", service)
}

// Held is how many headless mirrors the index answers from held slices now.
func (s *Source) Held() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.held.len()
}

// newRebuilds is the queue of headless mirrors to rebuild from their
// endpoint mirrors; a failed list is tried again after 100 ms, up to 30 s.
func newRebuilds() workqueue.TypedRateLimitingInterface[nsName] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[nsName](100*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[nsName]{Name: "rewritten-headless-mirrors"})
}

// runRebuilds rebuilds the queued headless mirrors until ctx is done,
// starting once the feeds have listed: a queued name's Service is known then.
// The source is synced once each rebuild those lists queued was tried (a
// failed one is tried again later, without holding the sync).
func (s *Source) runRebuilds(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.rebuilds.ShutDown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), s.listed) {
		return
	}
	for {
		if s.rebuilds.Len() == 0 {
			s.rebuilt.Store(true) // each rebuild the first lists queued was tried
		}
		k, shutdown := s.rebuilds.Get()
		if shutdown {
			return
		}
		if err := s.rebuild(ctx, k); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Listing a rewritten headless mirror's endpoint mirrors failed; trying again", "namespace", k.namespace, "mirror", k.name)
			s.rebuilds.AddRateLimited(k)
		} else {
			s.rebuilds.Forget(k)
		}
		s.rebuilds.Done(k)
	}
}

// endpointMirrorsChanged is called where an endpoint mirror slice of
// headless mirror hm came or went: a held view is rebuilt.
func (s *Source) endpointMirrorsChanged(namespace, hm string) {
	if s.held.get(namespace, hm) != nil {
		s.rebuilds.Add(nsName{namespace, hm})
	}
}

// heldPresent filters the endpoints of held, the sparse slices of a held
// headless mirror of cluster, to those whose endpoint mirror has slices in
// e: a pod Linkerd no longer mirrors leaves at once.
func (s *Source) heldPresent(e *entry, cluster string, held []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	present := make(map[uint64]bool, len(e.mirrors))
	for _, m := range e.mirrors {
		present[m.serviceHash()] = true
	}
	for _, sl := range held {
		sl.Endpoints = slices.DeleteFunc(sl.Endpoints, func(ep discoveryv1.Endpoint) bool {
			return ep.Hostname == nil || !present[mirrorService(s.hash.of(*ep.Hostname+"-"+cluster))]
		})
	}
	return held
}

// rewritten is the cluster and Service of headless mirror k where its
// slices hold Linkerd's gateway.
func (s *Source) rewritten(k nsName) (string, *corev1.Service, bool) {
	e := s.entries.get(k.namespace, k.name)
	if e == nil || !e.svc.present() ||
		!slices.ContainsFunc(e.members, func(m *indexedSlice) bool { return m.feed() == mirrorFeed && m.unnamed() }) {
		return "", nil, false
	}
	svc := e.svc.service()
	cl, _ := aggregate.Classify(svc, s.cfg.LocalSelector)
	return cl.Cluster, svc, cl.Role == aggregate.RoleHeadlessMirror
}

// rebuild holds headless mirror k rebuilt from its endpoint mirrors, where
// its slices still hold Linkerd's gateway: where nothing is held for it, or
// its endpoint mirrors changed since.
func (s *Source) rebuild(ctx context.Context, k nsName) error {
	s.mu.RLock()
	cluster, svc, ok := s.rewritten(k)
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	sel := labels.Set{aggregate.LabelClusterName: cluster, aggregate.LabelHeadlessMirrorName: k.name}.String()
	// A consistent read: the endpoint mirror whose slice queued this rebuild
	// must be in it, whichever API server answers.
	list, err := s.cfg.Client.CoreV1().Services(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	pods := podsOf(k.name, cluster, svc, list.Items)
	s.write(func() []Key {
		if _, _, ok := s.rewritten(k); !ok {
			return nil
		}
		rebuilt := s.held.get(k.namespace, k.name) != nil
		held := make([]*indexedSlice, 0, len(pods))
		for _, sl := range pods {
			held = append(held, s.intern.stripSlice(sl, k.name, s.cfg.Suffix))
		}
		s.held.set(s.intern.str(k.namespace), s.entries.get(k.namespace, k.name).svc.name, held)
		if !rebuilt {
			klog.InfoS("Linkerd wrote its gateway into a headless mirror before this process saw its pods; answering them from its endpoint mirrors until Linkerd writes them again",
				"namespace", k.namespace, "mirror", k.name, "pods", len(list.Items))
		}
		return s.memberKeyOf(k.namespace, k.name, nil)
	})
	return nil
}

// podsOf are the slices, one per address family, of the pods of headless
// mirror `name` of cluster that its endpoint mirrors stand for: each
// endpoint mirror <hostname>-<cluster> a named endpoint at its ClusterIPs, on
// the headless mirror's Service ports: the pods' own where a port names a
// number as its target (Linkerd copies target ports onto mirrors), else the
// Service's.
func podsOf(name, cluster string, headless *corev1.Service, endpointMirrors []corev1.Service) []*discoveryv1.EndpointSlice {
	var ports []discoveryv1.EndpointPort
	for _, p := range headless.Spec.Ports {
		port := p.Port
		if p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal > 0 {
			port = p.TargetPort.IntVal
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: &p.Name, Port: &port, Protocol: &p.Protocol, AppProtocol: p.AppProtocol})
	}
	byFamily := map[discoveryv1.AddressType]*discoveryv1.EndpointSlice{}
	for _, em := range endpointMirrors {
		host, ok := strings.CutSuffix(em.Name, "-"+cluster)
		if !ok || host == "" {
			continue
		}
		ips := em.Spec.ClusterIPs
		if len(ips) == 0 {
			ips = []string{em.Spec.ClusterIP}
		}
		for _, ip := range ips {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				continue
			}
			family := discoveryv1.AddressTypeIPv4
			if a.Is6() {
				family = discoveryv1.AddressTypeIPv6
			}
			sl := byFamily[family]
			if sl == nil {
				sl = &discoveryv1.EndpointSlice{
					ObjectMeta: metav1.ObjectMeta{Name: name + "-" + strings.ToLower(string(family)), Namespace: headless.Namespace, Labels: map[string]string{
						discoveryv1.LabelServiceName: name, aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: cluster}},
					AddressType: family, Ports: ports,
				}
				byFamily[family] = sl
			}
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Hostname: &host})
		}
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(byFamily))
	for _, f := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		if sl := byFamily[f]; sl != nil {
			slices.SortFunc(sl.Endpoints, func(a, b discoveryv1.Endpoint) int { return strings.Compare(*a.Hostname, *b.Hostname) })
			out = append(out, sl)
		}
	}
	return out
}
