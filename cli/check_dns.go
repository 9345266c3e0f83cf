package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/plugin/global"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
)

// checkDNSImage asks each pod of the judged DNS for the global plugin's
// metrics (through the API server's pod proxy): an image with the plugin
// compiled in exports them, whatever its Corefile.
func checkDNSImage(ctx context.Context, c check, cl *Cluster, _ globals) Result {
	if cl.DNSErr != nil {
		return c.apiFailure("reading the cluster DNS", cl.DNSErr, "is this cluster's DNS elsewhere? give its Service: --dns-service=NAMESPACE/NAME")
	}
	d := cl.judged()
	if len(d.Pods) == 0 {
		if cl.Forwarded != nil {
			return c.result(Error, "no running pod behind its Service",
				fmt.Sprintf("see why the chart's CoreDNS pods do not run: kubectl -n %s describe pods -l %s", d.Service.Namespace, labels.SelectorFromSet(d.Service.Spec.Selector)))
		}
		return c.result(Error, "no running pod behind the cluster DNS Service "+d.Service.Namespace+"/"+d.Service.Name,
			"is this cluster's DNS elsewhere? give its Service: --dns-service=NAMESPACE/NAME")
	}
	bodies, errs := podMetrics(ctx, cl, d.Pods, metricsPort)
	var without, unread []string
	for i, p := range d.Pods {
		body, err := bodies[i], errs[i]
		switch {
		case apierrors.IsForbidden(err):
			unread = append(unread, fmt.Sprintf("%s: forbidden: %s", p.Name, errMessage(err)))
		case err != nil:
			unread = append(unread, fmt.Sprintf("%s: %v", p.Name, err))
		case !strings.Contains(string(body), "coredns_global_"):
			without = append(without, fmt.Sprintf("%s (%s)", p.Name, DNSContainer(&p).Image))
		default:
			if d.metrics == nil {
				d.metrics = map[string]string{}
			}
			d.metrics[p.Name] = string(body)
		}
	}
	if len(without) > 0 {
		hint := "run the globalmirror CoreDNS image as the chart's README patches it in (kubectl -n kube-system patch deployment/coredns: the image, and readiness every 2 s); the controller's Services answer through the stock plugin meanwhile, but not before it has written them, nor while it is down"
		if cl.Forwarded != nil {
			hint = "the chart's CoreDNS runs the globalmirror CoreDNS image (its coredns.image values): give it that image"
		}
		return c.result(Error, "without the global plugin: "+strings.Join(without, ", "), hint)
	}
	if len(unread) > 0 {
		// Not a finding: what the pods run is unknown.
		return c.unread("the metrics of "+strings.Join(unread, "; "),
			"check reads each DNS pod's metrics through the API server: let your user get pods/proxy in "+d.Service.Namespace+", and see that the pods serve metrics (the prometheus plugin)")
	}
	ok := c.result(OK, fmt.Sprintf("%d pods run an image with the global plugin (%s)", len(d.Pods), DNSContainer(&d.Pods[0]).Image), "")
	return versionSkew(ok, "coredns_global_build_info", d.metrics)
}

func metricsPort(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "metrics" {
				return strconv.Itoa(int(port.ContainerPort))
			}
		}
	}
	return "9153"
}

// stanzas are the global stanzas of the judged DNS's Corefiles, by
// ConfigMap, what is wrong with the others, and those that could not be
// read.
func stanzas(cl *Cluster) (found map[string]*global.Stanza, problems, unreadable []string) {
	found = map[string]*global.Stanza{}
	d := cl.judged()
	if d == nil {
		return found, nil, nil
	}
	for _, cm := range slices.Sorted(maps.Keys(d.CorefileErrs)) {
		err := d.CorefileErrs[cm]
		if apierrors.IsForbidden(err) {
			unreadable = append(unreadable, fmt.Sprintf("%s: forbidden: %s", cm, errMessage(err)))
		} else {
			unreadable = append(unreadable, fmt.Sprintf("%s: %v", cm, err))
		}
	}
	stanzaOf := clusterStanza
	if cl.Forwarded != nil {
		stanzaOf = forwardedStanza
	}
	for _, cm := range slices.Sorted(maps.Keys(d.Corefiles)) {
		if st, problem := stanzaOf(cm, d.Corefiles[cm], d.Files[cm]); problem != "" {
			problems = append(problems, problem)
		} else {
			found[cm] = st
		}
	}
	return found, problems, unreadable
}

// clusterStanza is the global stanza of a cluster DNS's Corefile (the
// ConfigMap cm), in the server block of the kubernetes plugin and within
// its zones, or what is wrong with it.
func clusterStanza(cm, corefile string, pf *podFiles) (*global.Stanza, string) {
	b, st, unread, err := clusterBlock(corefile, pf)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("%s: %v", cm, err)
	case st == nil && len(unread) > 0:
		return nil, fmt.Sprintf("%s: no global stanza in the server block of the kubernetes plugin, where it could be read (%s)", cm, strings.Join(unread, "; "))
	case st == nil:
		return nil, cm + ": no global stanza in the server block of the kubernetes plugin"
	}
	served := kubernetesZones(b)
	if outside := zonesOutside(st.Zones, served); len(outside) > 0 {
		return nil, fmt.Sprintf("%s: global answers in %s, which is not the cluster's domain: the kubernetes plugin serves %s",
			cm, strings.Join(outside, " "), strings.Join(served, " "))
	}
	return st, ""
}

const stanzaHint = "add to the server block that answers cluster.local (kubectl -n kube-system edit configmap coredns): global cluster.local { ttl 5 }; the reload plugin applies it"

func checkStanza(_ context.Context, c check, cl *Cluster, _ globals) Result {
	if cl.DNSErr != nil {
		return c.skipped("cluster DNS image")
	}
	d := cl.judged()
	found, problems, unreadable := stanzas(cl)
	if len(problems) > 0 {
		hint := stanzaHint
		if cl.Forwarded != nil {
			hint = forwardedStanzaHint
		}
		return c.result(Error, strings.Join(problems, "; "), hint)
	}
	if len(unreadable) > 0 {
		return c.unread("the Corefile of "+strings.Join(unreadable, "; "),
			"check reads the ConfigMap the DNS pods mount their Corefile from: let your user get configmaps in "+d.Service.Namespace)
	}
	if len(found) == 0 {
		return c.result(Error, "no Corefile found: the DNS pods load none from a ConfigMap volume",
			"check reads the Corefile a DNS pod names with -conf from the ConfigMap volume mounted there, as kubeadm's and the chart's CoreDNS load it; are the pods behind --dns-service CoreDNS?")
	}
	// The prometheus plugin says which plugins each pod's running
	// instance has: a stanza in the ConfigMap that a pod never loaded (no
	// reload plugin, or a Corefile it rejected) is not there at all.
	var unloaded []string
	for _, pod := range slices.Sorted(maps.Keys(d.metrics)) {
		if !strings.Contains(d.metrics[pod], `coredns_plugin_enabled{name="global"`) {
			unloaded = append(unloaded, pod)
		}
	}
	if len(unloaded) > 0 {
		return c.result(Error, "in the Corefile, but not loaded by "+strings.Join(unloaded, ", "),
			"CoreDNS loads an edited Corefile only with the reload plugin, and keeps the old one where it rejects the new: its log says why; restarting the pods loads it")
	}
	var out []string
	for _, cm := range slices.Sorted(maps.Keys(found)) {
		if cl.Forwarded != nil {
			out = append(out, fmt.Sprintf("%s: the clusterset view in %s", cm, found[cm].ClustersetZone))
		} else {
			out = append(out, fmt.Sprintf("%s: zones %s", cm, strings.Join(found[cm].Zones, " ")))
		}
	}
	if len(d.metrics) == 0 {
		return c.unread("whether the pods loaded it: "+strings.Join(out, "; ")+" in the Corefile, but no DNS pod's metrics were read (the cluster DNS image check says why)", "")
	}
	return c.result(OK, strings.Join(out, "; "), "")
}

// checkAgreement compares what the global stanzas and the controller's
// flags say: both halves compute the same global services only so.
func checkAgreement(_ context.Context, c check, cl *Cluster, _ globals) Result {
	found, _, _ := stanzas(cl)
	switch {
	case cl.Controller == nil && len(found) == 0:
		return c.skipped("controller running", "global stanza")
	case cl.Controller == nil:
		return c.skipped("controller running")
	case len(found) == 0:
		return c.skipped("global stanza")
	}
	o := cl.Controller.Options
	sel := func(s string) string {
		p, err := aggregate.ParseLocalSelector(s)
		if err != nil {
			return s
		}
		if p == nil {
			return aggregate.NoLocalSelector
		}
		return p.String()
	}
	var diffs []string
	for _, cm := range slices.Sorted(maps.Keys(found)) {
		st := found[cm]
		if st.Suffix != o.Suffix {
			diffs = append(diffs, fmt.Sprintf("%s: suffix %q, the controller's --suffix %q", cm, st.Suffix, o.Suffix))
		}
		if a, b := slices.Sorted(slices.Values(st.Namespaces)), slices.Sorted(slices.Values(o.Namespaces)); !slices.Equal(a, b) {
			diffs = append(diffs, fmt.Sprintf("%s: namespaces %v, the controller's --namespaces %v (empty: all)", cm, a, b))
		}
		if a, b := sel(st.LocalSelector), sel(o.LocalSelector); a != b {
			diffs = append(diffs, fmt.Sprintf("%s: local_selector %q, the controller's --local-selector %q", cm, a, b))
		}
	}
	if len(diffs) > 0 {
		return c.result(Error, strings.Join(diffs, "; "),
			"give the stanza and the controller the same suffix, namespaces and local selector (the chart sets both from its values)")
	}
	return c.result(OK, fmt.Sprintf("suffix %q, namespaces %v (empty: all), local selector %q", o.Suffix, o.Namespaces, sel(o.LocalSelector)), "")
}

// zonesOutside are those of zones that are none of served.
func zonesOutside(zones, served []string) []string {
	var out []string
	for _, z := range zones {
		if !slices.Contains(served, z) {
			out = append(out, z)
		}
	}
	return out
}
