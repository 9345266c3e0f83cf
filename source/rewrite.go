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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
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
// rewrite. The pods are what Linkerd mirrors in its endpoint mirrors (one
// Service per pod, <hostname>-<cluster>, whose ClusterIP is the pod's
// address in the headless mirror and whose slices carry its readiness):
// Linkerd creates and deletes them as the remote pods come and go, before it
// writes the pods, which the EndpointSlice mirroring controller may then
// skip (mirroring only the gateway written after them).
//
// So the index holds a headless mirror's slices as they were last with every
// endpoint named, from the moment a slice without a name comes, until its
// slices are all named again, and Input reads the held ones. At once, and
// whenever one of its endpoint mirror Services comes or goes while it is
// held, the held view is rebuilt from them: one consistent list of the
// Services labelled with that headless mirror, each a pod at its ClusterIP,
// on the headless mirror's Service ports (the pods' own where a target port
// names them: the Endpoints Linkerd replaced had them). The index keeps no
// endpoint mirror Service (they are the bulk of a large world): while a
// headless mirror of a namespace is held, the endpoint mirror Services of
// that namespace are watched from then on, nothing listed or kept, and the
// watch ends with the last hold there. A rebuild from no endpoint mirror
// holds nothing: the live slices' named endpoints answer (what Linkerd never
// writes), and the gateway is dropped.

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
	// Linkerd may have changed the pods as the Service was updated, and the
	// mirroring controller mirrored only the gateway that followed: the
	// endpoint mirrors say which pods Linkerd mirrors now.
	s.rebuilds.Add(nsName{namespace, service})
	s.followEndpointMirrors(namespace)
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
		s.followEndpointMirrors(k.namespace)
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

// followEndpointMirrors makes sure the endpoint mirror Services of
// namespace are watched while a headless mirror there is held: Linkerd
// deletes a gone pod's endpoint mirror, and creates a new pod's, before it
// writes the pods (which the mirroring controller may then never mirror,
// the gateway coming after them), and the endpoint mirrors' own slices
// follow only once the EndpointSlice mirroring controller gets to them.
// Called with the lock held.
func (s *Source) followEndpointMirrors(namespace string) {
	if s.ctx == nil || s.endpointMirrorWatches[namespace] {
		return
	}
	if s.endpointMirrorWatches == nil {
		s.endpointMirrorWatches = map[string]bool{}
	}
	s.endpointMirrorWatches[namespace] = true
	go s.watchEndpointMirrors(namespace)
}

// endpointMirrorWatchCheck is how often a watch of endpoint mirrors looks
// whether a headless mirror of its namespace is still held.
const endpointMirrorWatchCheck = 5 * time.Second

// watchEndpointMirrors watches the endpoint mirror Services of namespace,
// from now (nothing is listed or kept: the index keeps no endpoint
// mirror), and rebuilds each held headless mirror one of them belongs to
// as it comes or goes, until none of the namespace is held. Each time its
// watch begins, every held mirror of the namespace is rebuilt: what changed
// before it.
func (s *Source) watchEndpointMirrors(namespace string) {
	ctx := s.ctx
	log := klog.FromContext(ctx).WithValues("namespace", namespace)
	services := s.cfg.Client.CoreV1().Services(namespace)
	retry := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 10, Cap: 5 * time.Second}
	check := time.NewTicker(endpointMirrorWatchCheck)
	defer check.Stop()
	for ctx.Err() == nil && s.stillHolding(namespace) {
		opts := metav1.ListOptions{LabelSelector: aggregate.LabelHeadlessMirrorName, Limit: 1}
		list, err := services.List(ctx, opts)
		var w watch.Interface
		if err == nil {
			opts.Limit, opts.ResourceVersion = 0, list.ResourceVersion
			w, err = services.Watch(ctx, opts)
		}
		if err != nil {
			log.Error(err, "Watching endpoint mirrors under a held headless mirror failed; trying again")
			select {
			case <-ctx.Done():
			case <-time.After(retry.Step()):
			}
			continue
		}
		s.rebuildHeld(namespace)
		s.followWatch(w, namespace, check.C)
		w.Stop()
	}
}

// followWatch queues a rebuild of the held headless mirror of each
// endpoint mirror w delivers, until w ends or, on a tick of check, none of
// namespace is held.
func (s *Source) followWatch(w watch.Interface, namespace string, check <-chan time.Time) {
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			svc, isService := ev.Object.(*corev1.Service)
			if !isService {
				continue
			}
			hm := svc.Labels[aggregate.LabelHeadlessMirrorName]
			s.mu.RLock()
			held := hm != "" && s.held.get(namespace, hm) != nil
			s.mu.RUnlock()
			if held {
				s.rebuilds.Add(nsName{namespace, hm})
			}
		case <-check:
			if !s.stillHolding(namespace) {
				return
			}
		}
	}
}

// stillHolding reports whether a headless mirror of namespace is held; if
// none is, the namespace's watch of endpoint mirrors is ended (a hold begun
// later starts another).
func (s *Source) stillHolding(namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held[namespace]) > 0 {
		return true
	}
	delete(s.endpointMirrorWatches, namespace)
	return false
}

// rebuildHeld queues a rebuild of every headless mirror of namespace held.
func (s *Source) rebuildHeld(namespace string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name := range s.held[namespace] {
		s.rebuilds.Add(nsName{namespace, name})
	}
}
