package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"path"
	"slices"
	"strings"

	"github.com/globalmirror/globalmirror/plugin/global"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// In forwarded mode (the chart's coredns.forwarded) the chart's CoreDNS is a
// DNS of its own behind its ClusterIP Service, answering the clusterset view
// of the global services in a zone of its own, and the stock cluster DNS
// forwards that zone to it: the way in where the cluster DNS cannot run the
// globalmirror image (AKS, EKS, GKE). The cluster DNS forwards by a server
// block of its Corefile (kubeadm's and EKS's coredns ConfigMap, or a
// *.server key of AKS's coredns-custom that it imports), or by kube-dns's
// stubDomains (GKE's kube-dns). The checks of the plugin then judge the
// chart's CoreDNS; the DNS probe still asks the cluster DNS, the way users'
// lookups go.

// forwardedSelector selects the chart's CoreDNS Services by its part-of and
// component labels, which a release name or nameOverride leaves alone.
const forwardedSelector = "app.kubernetes.io/part-of=globalmirror,app.kubernetes.io/component=coredns"

// instanceLabel names the release of a chart's object.
const instanceLabel = "app.kubernetes.io/instance"

// discoverForwarded finds, where the cluster DNS's Corefiles hold no global
// stanza, the chart's CoreDNS of a forwarded zone in namespace (every
// namespace if empty), read as the cluster DNS is; and with it kube-dns's
// stubDomains, where a cluster DNS pod loads no Corefile (kube-dns's own).
func discoverForwarded(ctx context.Context, c kubernetes.Interface, cl *Cluster, namespace string) {
	if cl.DNS == nil || servesGlobal(cl.DNS) {
		return
	}
	cl.Forwarded, cl.ForwardedErr = findForwarded(ctx, c, cl, namespace)
	if cl.Forwarded == nil || !slices.ContainsFunc(cl.DNS.Pods, loadsNoCorefile) {
		return
	}
	ns := cl.DNS.Service.Namespace
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-dns", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cl.DNS.KubeDNS = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-dns"}}
	case err != nil:
		cl.DNS.KubeDNSErr = err
	default:
		cl.DNS.KubeDNS = cm
	}
}

// servesGlobal says whether a Corefile of d, as read, has a global stanza
// in any server block: d then serves the global names itself. What could
// not be read or parsed holds none.
func servesGlobal(d *DNS) bool {
	for cm, corefile := range d.Corefiles {
		blocks, _, err := parseCorefile(corefile, d.Files[cm])
		if err == nil && slices.ContainsFunc(blocks, func(b serverBlock) bool {
			_, ok := b.Tokens["global"]
			return ok
		}) {
			return true
		}
	}
	return false
}

// loadsNoCorefile says whether p loads no Corefile from a ConfigMap: not
// CoreDNS, as kube-dns's pods.
func loadsNoCorefile(p corev1.Pod) bool {
	cm, _ := corefileOf(&p)
	return cm == ""
}

// findForwarded is the chart's CoreDNS with a DNS Service of its own other
// than the cluster DNS's: that of the controller's release first, else the
// first by namespace and name; nil where there is none. One whose pods the
// cluster DNS Service selects too (the chart's CoreDNS as the cluster DNS)
// is not forwarded to.
func findForwarded(ctx context.Context, c kubernetes.Interface, cl *Cluster, namespace string) (*DNS, error) {
	svcs, err := c.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: forwardedSelector})
	if apierrors.IsForbidden(err) && namespace == metav1.NamespaceAll {
		return nil, fmt.Errorf("listing Services labelled %s in every namespace (give the chart's namespace with --controller-namespace): %w", forwardedSelector, err)
	}
	if err != nil {
		return nil, fmt.Errorf("listing Services labelled %s: %w", forwardedSelector, err)
	}
	cluster := cl.DNS.Service
	candidates := slices.DeleteFunc(svcs.Items, func(s corev1.Service) bool {
		return !servesDNS(&s) || s.Namespace == cluster.Namespace && s.Name == cluster.Name
	})
	other := func(s *corev1.Service) int {
		if ctl := cl.Controller; ctl != nil && s.Namespace == ctl.Deployment.Namespace && s.Labels[instanceLabel] == ctl.Deployment.Labels[instanceLabel] {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(candidates, func(a, b corev1.Service) int {
		return cmp.Or(cmp.Compare(other(&a), other(&b)), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	clusterPods := map[string]bool{}
	for _, p := range cl.DNS.Pods {
		clusterPods[p.Namespace+"/"+p.Name] = true
	}
	for i := range candidates {
		d, err := dnsOf(ctx, c, &candidates[i])
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(d.Pods, func(p corev1.Pod) bool { return clusterPods[p.Namespace+"/"+p.Name] }) {
			return d, nil
		}
	}
	return nil, nil
}

// servesDNS says whether s is a Service another DNS can forward to: a
// ClusterIP on port 53 with pods to select (the chart's metrics Service,
// labelled alike, has no port 53).
func servesDNS(s *corev1.Service) bool {
	return len(s.Spec.Selector) > 0 && s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone &&
		slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 53 })
}

// judged is the DNS the checks of the global plugin judge: the chart's
// forwarded CoreDNS in forwarded mode, else the cluster DNS.
func (cl *Cluster) judged() *DNS {
	if cl.Forwarded != nil {
		return cl.Forwarded
	}
	return cl.DNS
}

// judgingDNS is run, a check of the DNS that runs the global plugin, whose
// detail in forwarded mode first names the DNS it judged: the same checks
// judge either DNS. Skipped results are left as they are.
func judgingDNS(run func(context.Context, check, *Cluster, globals) Result) func(context.Context, check, *Cluster, globals) Result {
	return func(ctx context.Context, c check, cl *Cluster, g globals) Result {
		r := run(ctx, c, cl, g)
		if cl.Forwarded != nil && r.Result != Skipped {
			r.Detail = "the chart's forwarded DNS " + serviceName(cl.Forwarded.Service) + ": " + r.Detail
		}
		return r
	}
}

func serviceName(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

// forwardedStanza is the global stanza of a forwarded DNS's Corefile (the
// ConfigMap cm), or what is wrong with it: its clusterset view is what the
// cluster DNS forwards to it, so it must have one, in a zone its server
// block serves.
func forwardedStanza(cm, corefile string, pf *podFiles) (*global.Stanza, string) {
	b, st, unread, err := globalBlock(corefile, pf)
	switch {
	case err != nil && len(unread) > 0:
		return nil, fmt.Sprintf("%s: %v, where it could be read (%s)", cm, err, strings.Join(unread, "; "))
	case err != nil:
		return nil, fmt.Sprintf("%s: %v", cm, err)
	case st.ClustersetZone == "":
		return nil, cm + ": the global stanza has no clusterset option, whose view is what the cluster DNS forwards here"
	case !slices.ContainsFunc(b.Keys, func(key string) bool {
		zone, _, ok := blockKey(key)
		return ok && dns.IsSubDomain(zone, st.ClustersetZone)
	}):
		return nil, fmt.Sprintf("%s: global serves the clusterset view in %s, which its server block (%s) does not serve", cm, st.ClustersetZone, strings.Join(b.Keys, " "))
	}
	return st, ""
}

const forwardedStanzaHint = "the chart renders it (helm upgrade with coredns.forwarded.enabled=true and coredns.forwarded.clusterID=CLUSTERID); by hand, in the server block of the forwarded zone: global cluster.local { clusterset CLUSTERID clusterset.local }"

// forwardedZone is the zone of the forwarded DNS's clusterset view: the
// first Corefile's, by ConfigMap; "" where no stanza has one.
func forwardedZone(cl *Cluster) string {
	found, _, _ := stanzas(cl)
	for _, cm := range slices.Sorted(maps.Keys(found)) {
		if found[cm].ClustersetZone != "" {
			return found[cm].ClustersetZone
		}
	}
	return ""
}

// forwarding is how the cluster DNS sends a zone's names: each of its
// configurations that forwards them to the chart's DNS (right), each that
// does not, saying where they go instead (wrong), with the snippet that
// would (hints), and what could not be read.
type forwarding struct {
	right, wrong, hints, unread []string
}

// forwardsAll says whether every configuration read forwards the zone to
// the chart's DNS, and all could be read.
func (f forwarding) forwardsAll() bool {
	return len(f.right) > 0 && len(f.wrong) == 0 && len(f.unread) == 0
}

// route is where one configuration of the cluster DNS sends a zone's names.
type route struct {
	// by is what answers them: "server block clusterset.local:53" (and
	// the file it is in where imported), "stubDomains clusterset.local";
	// "" where nothing does. exact: by is the zone's own, not an
	// enclosing zone's.
	by    string
	exact bool
	// to are the servers by forwards them to; none where it does not.
	to []string
	// unread are the imports that could not be followed.
	unread []string
}

// judgeForwarding judges whether the cluster DNS sends names in zone to
// the chart's forwarded DNS: each Corefile its pods load, and kube-dns's
// stubDomains where a pod loads none (as read by discoverForwarded).
func judgeForwarding(cl *Cluster, zone string) forwarding {
	var f forwarding
	d, svc := cl.DNS, cl.Forwarded.Service
	if len(d.Pods) == 0 {
		f.wrong = append(f.wrong, "no running pod behind the cluster DNS Service "+serviceName(d.Service)+": nothing forwards "+strings.TrimSuffix(zone, "."))
		f.hints = append(f.hints, "is this cluster's DNS elsewhere? give its Service: --dns-service=NAMESPACE/NAME")
		return f
	}
	ips := slices.DeleteFunc(slices.Clone(svc.Spec.ClusterIPs), func(ip string) bool { return ip == "" })
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	name := strings.TrimSuffix(zone, ".")
	chart := fmt.Sprintf("the chart's DNS %s (%s)", serviceName(svc), strings.Join(ips, " "))
	// judge judges one configuration's route; none says where the names
	// go when nothing of it names the zone.
	judge := func(where string, r route, none string, hint func(route) string) {
		switch {
		case r.by == "":
			f.wrong = append(f.wrong, fmt.Sprintf("%s: %s: not forwarded to %s", where, none, chart))
		case len(r.to) == 0:
			f.wrong = append(f.wrong, fmt.Sprintf("%s: %s answers %s without forwarding it to %s", where, r.by, name, chart))
		case !slices.ContainsFunc(r.to, func(t string) bool { return !toChart(t, ips) }):
			f.right = append(f.right, fmt.Sprintf("%s: %s forwards %s to %s", where, r.by, name, chart))
			return
		default:
			f.wrong = append(f.wrong, fmt.Sprintf("%s: %s forwards %s to %s, not to %s", where, r.by, name, strings.Join(r.to, " "), chart))
		}
		if len(r.unread) > 0 {
			f.wrong[len(f.wrong)-1] += fmt.Sprintf(", where it could be read (%s)", strings.Join(r.unread, "; "))
		}
		f.hints = append(f.hints, hint(r))
	}
	for _, cm := range slices.Sorted(maps.Keys(d.CorefileErrs)) {
		f.unread = append(f.unread, cm+": "+unreadError(d.CorefileErrs[cm]))
	}
	for _, cm := range slices.Sorted(maps.Keys(d.Corefiles)) {
		r, port, err := corefileRoute(d.Corefiles[cm], d.Files[cm], zone)
		if err != nil {
			ns, name, _ := strings.Cut(cm, "/")
			f.wrong = append(f.wrong, fmt.Sprintf("%s: %v", cm, err))
			f.hints = append(f.hints, fmt.Sprintf("CoreDNS reads this Corefile no better: mend it (kubectl -n %s edit configmap %s)", ns, name))
			continue
		}
		judge(cm, r, "no server block on port "+port+" answers "+name, func(r route) string { return serverBlockHint(cm, d.Corefiles[cm], d.Files[cm], r, name, port, ips[0]) })
	}
	if d.KubeDNSErr != nil {
		f.unread = append(f.unread, d.Service.Namespace+"/kube-dns: "+unreadError(d.KubeDNSErr))
	} else if d.KubeDNS != nil {
		where := d.KubeDNS.Namespace + "/kube-dns"
		r, stubs, err := stubDomainsRoute(d.KubeDNS, zone)
		if err != nil {
			f.wrong = append(f.wrong, fmt.Sprintf("%s: %v", where, err))
			f.hints = append(f.hints, stubDomainsHint(where, stubs, r, name, ips[0]))
		} else {
			judge(where, r, "no stub domain holds "+name+", which kube-dns sends upstream", func(r route) string { return stubDomainsHint(where, stubs, r, name, ips[0]) })
		}
	}
	if len(f.right)+len(f.wrong)+len(f.unread) == 0 {
		f.unread = append(f.unread, "the cluster DNS pods load no Corefile from a ConfigMap volume, and none is kube-dns")
	}
	return f
}

// unreadError is why a ConfigMap could not be read, "forbidden" first
// where it was refused.
func unreadError(err error) string {
	if apierrors.IsForbidden(err) {
		return "forbidden: " + errMessage(err)
	}
	return err.Error()
}

// corefileRoute is where a Corefile (read as the pod loads it) sends names
// in zone, as CoreDNS routes a query: to the server block of the most
// specific zone enclosing it on the port of the cluster domain's block
// (53 where none says), whose forward plugin, where its zone encloses the
// name, sends it on. port is that port.
func corefileRoute(corefile string, pf *podFiles, zone string) (r route, port string, err error) {
	blocks, unread, err := parseCorefile(corefile, pf)
	if err != nil {
		return route{}, "", err
	}
	r.unread, port = unread, "53"
	for _, b := range blocks {
		if _, ok := b.Tokens["kubernetes"]; ok {
			if _, p, ok := blockKey(b.Keys[0]); ok {
				port = p
			}
			break
		}
	}
	var best *serverBlock
	bestKey, bestZone := "", ""
	for i := range blocks {
		for _, key := range blocks[i].Keys {
			if z, p, ok := blockKey(key); ok && p == port && dns.IsSubDomain(z, zone) && len(z) > len(bestZone) {
				best, bestKey, bestZone = &blocks[i], key, z
			}
		}
	}
	if best == nil {
		return r, port, nil
	}
	r.by, r.exact = "server block "+bestKey, bestZone == zone
	// The Corefile's own tokens name no file, or the Corefile itself.
	toks := best.Tokens["forward"]
	conf := "/etc/coredns/Corefile" // parseCorefile's, without a pod's files
	if pf != nil {
		conf = pf.Conf
	}
	if len(toks) > 0 && toks[0].File != "" && toks[0].File != conf {
		r.by += " (imported from " + toks[0].File + ")"
	}
	if len(toks) < 3 || !dns.IsSubDomain(fqdn(toks[1].Text), zone) {
		return r, port, nil
	}
	for _, tok := range toks[2:] {
		if tok.Line != toks[0].Line || tok.Text == "{" {
			break
		}
		r.to = append(r.to, tok.Text)
	}
	return r, port, nil
}

// blockKey is the zone and port of a server block's key as CoreDNS reads
// it ([dns://]zone[:port]); ok is false for other transports (tls://,
// https://, grpc://), which queries to port 53 do not reach.
func blockKey(key string) (zone, port string, ok bool) {
	key = strings.TrimPrefix(strings.ToLower(key), "dns://")
	if strings.Contains(key, "://") {
		return "", "", false
	}
	zone, port = key, "53"
	if i := strings.LastIndex(key, ":"); i >= 0 {
		zone, port = key[:i], key[i+1:]
	}
	return fqdn(zone), port, true
}

// fqdn is name in lower case with its final dot, as zones are compared.
func fqdn(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".") + "."
}

// toChart says whether target, a forward plugin's or a stub domain's
// server ([dns://]IP[:port]), is one of ips on port 53.
func toChart(target string, ips []string) bool {
	t := strings.TrimPrefix(strings.ToLower(target), "dns://")
	host, port, err := net.SplitHostPort(t)
	if err != nil {
		host, port = strings.Trim(t, "[]"), "53"
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && port == "53" && slices.ContainsFunc(ips, func(ip string) bool {
		a, err := netip.ParseAddr(ip)
		return err == nil && a == addr
	})
}

// serverBlockHint is the server block that forwards zone (its name, no
// final dot) to ip, and where to put it: in place of the zone's own block
// where r found one, else in the ConfigMap of *.server files the Corefile
// imports (AKS's coredns-custom, which AKS leaves alone), else in the
// Corefile's ConfigMap cm.
func serverBlockHint(cm, corefile string, pf *podFiles, r route, zone, port, ip string) string {
	block := fmt.Sprintf("%s:%s {\n    errors\n    forward . %s {\n        force_tcp\n    }\n}", zone, port, ip)
	ns, name, _ := strings.Cut(cm, "/")
	switch custom := serverImports(corefile, pf); {
	case r.exact:
		return fmt.Sprintf("make %s of %s forward to the chart's DNS:\n%s", r.by, cm, block)
	case custom != "":
		return fmt.Sprintf("add a key globalmirror.server to ConfigMap %s/%s, whose *.server keys the cluster DNS imports (kubectl -n %s edit configmap %s), then restart the DNS pods:\n%s", ns, custom, ns, custom, block)
	default:
		return fmt.Sprintf("add to the Corefile of %s (kubectl -n %s edit configmap %s); the reload plugin applies it:\n%s", cm, ns, name, block)
	}
}

// serverImports is the ConfigMap whose files a Corefile's import of
// *.server names (AKS's coredns-custom), as the pod mounts it; "" for none.
func serverImports(corefile string, pf *podFiles) string {
	if pf == nil {
		return ""
	}
	for _, m := range importLine.FindAllStringSubmatch(corefile, -1) {
		arg := strings.Trim(m[2], `"`)
		if !strings.HasSuffix(arg, ".server") {
			continue
		}
		if !path.IsAbs(arg) {
			arg = path.Join(path.Dir(pf.Conf), arg)
		}
		if at, ok := pf.mountOf(path.Dir(path.Clean(arg))); ok && pf.ConfigMaps[at] != "" {
			return pf.ConfigMaps[at]
		}
	}
	return ""
}

// stubDomainsRoute is where kube-dns sends names in zone by its
// stubDomains (JSON, a list of servers by domain): to the most specific
// domain enclosing it, as dnsmasq matches. stubs are the stubDomains read.
func stubDomainsRoute(cm *corev1.ConfigMap, zone string) (r route, stubs map[string][]string, err error) {
	raw := strings.TrimSpace(cm.Data["stubDomains"])
	if raw == "" {
		return route{}, nil, nil
	}
	if err := json.Unmarshal([]byte(raw), &stubs); err != nil {
		return route{}, nil, fmt.Errorf("stubDomains is not JSON of servers by domain: %v", err)
	}
	bestZone := ""
	for _, domain := range slices.Sorted(maps.Keys(stubs)) {
		if z := fqdn(domain); dns.IsSubDomain(z, zone) && len(z) > len(bestZone) {
			bestZone, r = z, route{by: "stubDomains " + domain, exact: z == zone, to: stubs[domain]}
		}
	}
	return r, stubs, nil
}

// stubDomainsHint is kube-dns's stubDomains as they should be: those read,
// with zone (its name, no final dot) sent to ip in place of the zone's
// own entry.
func stubDomainsHint(where string, stubs map[string][]string, r route, zone, ip string) string {
	want := maps.Clone(stubs)
	if want == nil {
		want = map[string][]string{}
	}
	if r.exact {
		delete(want, strings.TrimPrefix(r.by, "stubDomains "))
	}
	want[zone] = []string{ip}
	b, _ := json.Marshal(want) // sorted by domain
	ns, name, _ := strings.Cut(where, "/")
	return fmt.Sprintf("set stubDomains of ConfigMap %s (kubectl -n %s edit configmap %s) to:\n%s", where, ns, name, b)
}

// checkForwarding judges, in forwarded mode, whether the cluster DNS
// forwards the zone of the chart's DNS's clusterset view to that DNS's
// Service.
func checkForwarding(_ context.Context, c check, cl *Cluster, _ globals) Result {
	switch {
	case cl.DNSErr != nil || cl.DNS == nil:
		return c.skipped("cluster DNS image")
	case cl.ForwardedErr != nil:
		return c.apiFailure("looking for the chart's CoreDNS of a forwarded zone", cl.ForwardedErr, "")
	// Nothing to forward: a finding of none, as drained clusters' "none",
	// whatever the checks of the cluster DNS find of it.
	case cl.Forwarded == nil && servesGlobal(cl.DNS):
		return c.result(OK, "none needed: the cluster DNS serves the global names itself (a global stanza in its Corefile)", "")
	case cl.Forwarded == nil:
		return c.result(OK, "none needed: no chart CoreDNS of a forwarded zone (coredns.forwarded) found", "")
	}
	zone := forwardedZone(cl)
	if zone == "" {
		return c.skipped("global stanza")
	}
	f := judgeForwarding(cl, zone)
	switch {
	case len(f.wrong) > 0:
		return c.result(Error, strings.Join(f.wrong, "; "), strings.Join(f.hints, "\n"))
	case len(f.unread) > 0:
		return c.unread("how the cluster DNS forwards "+strings.TrimSuffix(zone, ".")+": "+strings.Join(f.unread, "; "),
			"check reads the ConfigMaps the cluster DNS pods load (and kube-dns's, for kube-dns's pods): let your user get configmaps in "+cl.DNS.Service.Namespace)
	}
	return c.result(OK, strings.Join(f.right, "; "), "")
}
