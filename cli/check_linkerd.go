package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/globalmirror/globalmirror/aggregate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// checkMirrors looks for Linkerd's headless mirrors, and for service
// mirrors that do not mirror headless services (-enable-headless-services
// is off by default).
func checkMirrors(ctx context.Context, c check, cl *Cluster, _ globals) Result {
	svcs, err := cl.Client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: aggregate.LabelMirroredService + "=true"})
	if err != nil {
		return c.apiFailure("listing Linkerd's mirrors", err, "")
	}
	var watched []string // empty: every namespace
	if cl.Controller != nil {
		watched = cl.Controller.Options.Namespaces
	}
	byCluster, unwatched := map[string]int{}, map[string]int{}
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP == corev1.ClusterIPNone && s.Labels[aggregate.LabelHeadlessMirrorName] == "" {
			byCluster[s.Labels[aggregate.LabelClusterName]]++
			if len(watched) > 0 && !slices.Contains(watched, s.Namespace) {
				unwatched[s.Namespace]++
			}
		}
	}
	mirrors, err := cl.Client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: "component in (linkerd-service-mirror, controller)," + aggregate.LabelClusterName})
	if err != nil {
		return c.apiFailure("listing Linkerd's service mirrors", err, "")
	}
	var off []string
	for _, d := range mirrors.Items {
		if !mirrorsHeadless(d.Spec.Template.Spec.Containers) {
			off = append(off, fmt.Sprintf("%s/%s (cluster %s)", d.Namespace, d.Name, d.Labels[aggregate.LabelClusterName]))
		}
	}
	if len(off) > 0 {
		return c.result(Error, "service mirrors without -enable-headless-services: "+strings.Join(off, ", "),
			"link with headless mirroring: linkerd multicluster link --set enableHeadlessServices=true (or the multicluster chart's controllers[].enableHeadlessServices)")
	}
	if len(byCluster) == 0 {
		return c.result(Error, "no headless mirror in any namespace",
			"export a headless service in a linked cluster (label mirror.linkerd.io/exported=true), linked with headless mirroring (enableHeadlessServices=true)")
	}
	var per []string
	for _, cluster := range slices.Sorted(maps.Keys(byCluster)) {
		per = append(per, fmt.Sprintf("%s: %d", cluster, byCluster[cluster]))
	}
	detail := "headless mirrors by cluster: " + strings.Join(per, ", ")
	if len(unwatched) > 0 {
		var outside []string
		for _, ns := range slices.Sorted(maps.Keys(unwatched)) {
			outside = append(outside, fmt.Sprintf("%s: %d", ns, unwatched[ns]))
		}
		return c.result(Warning, detail+"; in namespaces the controller does not watch, so without a global: "+strings.Join(outside, ", "),
			"where they should have one, add those namespaces to the controller's --namespaces and to the global stanza's namespaces")
	}
	return c.result(OK, detail, "")
}

func mirrorsHeadless(containers []corev1.Container) bool {
	for _, c := range containers {
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			if a == "-enable-headless-services" || a == "--enable-headless-services" || strings.HasSuffix(a, "enable-headless-services=true") {
				return true
			}
		}
	}
	return false
}
