package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/source"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// DefaultLinkNamespace is where Linkerd's multicluster extension keeps its
// Links unless installed elsewhere.
const DefaultLinkNamespace = "linkerd-multicluster"

// FieldManager names the command's writes in the objects' managed fields.
const FieldManager = "globalmirror-cli"

// DrainTarget is what a drain annotates: the Link to a cluster, or a local
// member service (the local cluster has no Link).
type DrainTarget struct {
	Cluster       string
	LinkNamespace string
	// Service, namespace/name, is a local member service to drain instead.
	Service string
	// Exported drains every local member service instead (DrainExported).
	Exported bool
}

// Drained is what a drain or undrain wrote.
type Drained struct {
	// Object is what was annotated: "Link linkerd-multicluster/east".
	Object string `json:"object"`
	Level  string `json:"level"` // "" undrained
	// Was is the level before ("" not drained).
	Was string `json:"was"`
	// As is the user the API server says wrote it.
	As string `json:"as"`
	// Written is false where the object already said so.
	Written bool `json:"written"`
	// TargetClusterName is a Link's spec.targetClusterName, the cluster
	// name Linkerd labels that Link's mirrors with, where it could be read.
	TargetClusterName string `json:"targetClusterName,omitempty"`
	// Mirrors is how many headless mirrors here carry the drained cluster's
	// name; -1 where they could not be counted.
	Mirrors int `json:"mirrors"`
}

// Drain sets the drain annotation of target to level (NotDrained removes
// it), with the user's own rights and nothing else: a merge patch of that
// one annotation.
func Drain(ctx context.Context, client kubernetes.Interface, cfg *rest.Config, target DrainTarget, level aggregate.Drain) (*Drained, error) {
	patch := DrainPatch(level)
	out := &Drained{Level: level.String(), As: whoAmI(ctx, client)}
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	if target.Service != "" {
		ns, name, _ := strings.Cut(target.Service, "/")
		out.Object = "Service " + target.Service
		svc, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Labels[aggregate.LabelMirroredService] == "true" || aggregate.WrittenByGlobalmirror(svc.Labels) {
			return nil, fmt.Errorf("%s is not a local member service (headless, neither Linkerd's mirror nor globalmirror's): drain a linked cluster by its name instead", out.Object)
		}
		out.Was = svc.Annotations[aggregate.AnnotationDrain]
		if out.Written = out.Was != out.Level; out.Written {
			_, err = client.CoreV1().Services(ns).Patch(ctx, name, types.MergePatchType, patch, opts)
		}
		return out, err
	}

	version, err := source.LinkVersion(client.Discovery())
	if err != nil {
		return nil, fmt.Errorf("finding Linkerd's Link resource: %w", err)
	}
	if version == "" {
		return nil, fmt.Errorf("the API server serves no %s: is Linkerd's multicluster extension installed?", source.LinkGroup)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	links := meta.Resource(schema.GroupVersionResource{Group: source.LinkGroup, Version: version, Resource: source.LinkResource}).Namespace(target.LinkNamespace)
	out.Object = "Link " + target.LinkNamespace + "/" + target.Cluster
	link, err := links.Get(ctx, target.Cluster, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("no %s: %s", out.Object, linkedClusters(ctx, links))
	}
	if err != nil {
		return nil, err
	}
	out.Was = link.Annotations[aggregate.AnnotationDrain]
	if out.Written = out.Was != out.Level; out.Written {
		if _, err = links.Patch(ctx, target.Cluster, types.MergePatchType, patch, opts); err != nil {
			return out, err
		}
	}
	out.TargetClusterName = linkTarget(ctx, cfg, version, target)
	out.Mirrors = headlessMirrors(ctx, client, target.Cluster)
	return out, nil
}

// linkTarget is the Link's spec.targetClusterName, "" where it cannot be read.
func linkTarget(ctx context.Context, cfg *rest.Config, version string, target DrainTarget) string {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return ""
	}
	link, err := dyn.Resource(schema.GroupVersionResource{Group: source.LinkGroup, Version: version, Resource: source.LinkResource}).
		Namespace(target.LinkNamespace).Get(ctx, target.Cluster, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	name, _, _ := unstructured.NestedString(link.Object, "spec", "targetClusterName")
	return name
}

// headlessMirrors counts the headless mirrors here of cluster (up to 100),
// -1 where they cannot be listed.
func headlessMirrors(ctx context.Context, client kubernetes.Interface, cluster string) int {
	sel := labels.Set{aggregate.LabelMirroredService: "true", aggregate.LabelClusterName: cluster}.String() + ",!" + aggregate.LabelHeadlessMirrorName
	list, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 100})
	if err != nil {
		return -1
	}
	n := 0
	for _, svc := range list.Items {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			n++
		}
	}
	return n
}

// DrainExported drains (or with NotDrained undrains) every local member
// service of the cluster client reaches: each headless Service with
// Linkerd's export label, neither Linkerd's mirror nor globalmirror's. It
// takes this cluster's pods out here, and Linkerd, which copies every
// annotation of an exported Service onto its mirrors, takes them out in
// every cluster that links this one: a maintenance written once, from the
// cluster under it.
func DrainExported(ctx context.Context, client kubernetes.Interface, cfg *rest.Config, level aggregate.Drain) ([]*Drained, error) {
	list, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: aggregate.DefaultLocalSelector})
	if err != nil {
		return nil, err
	}
	var out []*Drained
	for _, svc := range list.Items {
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Labels[aggregate.LabelMirroredService] == "true" || aggregate.WrittenByGlobalmirror(svc.Labels) {
			continue
		}
		d, err := Drain(ctx, client, cfg, DrainTarget{Service: svc.Namespace + "/" + svc.Name}, level)
		if err != nil {
			return out, fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("this cluster exports no headless service (label %s): nothing to drain", aggregate.LabelExported)
	}
	return out, nil
}

// DrainPatch is the merge patch that sets the drain annotation to level, or
// removes it (NotDrained): all a drain writes.
func DrainPatch(level aggregate.Drain) []byte {
	value := any(nil) // null removes it
	if level != aggregate.NotDrained {
		value = level.String()
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{aggregate.AnnotationDrain: value}}}) // maps of strings: no error
	return patch
}

// linkedClusters names the Links of a namespace, for an error that names
// the wrong one.
func linkedClusters(ctx context.Context, links metadata.ResourceInterface) string {
	list, err := links.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "the Links there could not be listed: " + err.Error()
	}
	var names []string
	for _, l := range list.Items {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "there is no Link there (--link-namespace names where Linkerd's multicluster extension is installed)"
	}
	return "the clusters linked there are " + strings.Join(names, ", ")
}

// whoAmI is the user the API server takes the command's credentials for,
// or "you" where it will not say.
func whoAmI(ctx context.Context, client kubernetes.Interface) string {
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || r.Status.UserInfo.Username == "" {
		return "you"
	}
	return r.Status.UserInfo.Username
}

// Write says what d wrote and what it does.
func (d *Drained) Write(w interface{ Write([]byte) (int, error) }, target DrainTarget) {
	who := target.Cluster + "'s pods"
	if target.Service != "" {
		who = "the local pods of " + target.Service
	}
	switch {
	case !d.Written && d.Level == "":
		fmt.Fprintf(w, "%s is not drained: nothing written.\n", d.Object)
		return
	case !d.Written:
		fmt.Fprintf(w, "%s is drained (%s) already: nothing written.\n", d.Object, d.Level)
		return
	case d.Level == "":
		fmt.Fprintf(w, "%s: %s removed, as %s with your own rights; nothing else was changed.\n", d.Object, aggregate.AnnotationDrain, d.As)
		fmt.Fprintf(w, "%s answer every name again: the global plugin at once, the controller's slices after it.\n", who)
		return
	}
	fmt.Fprintf(w, "%s: %s=%s, as %s with your own rights; nothing else was changed.\n", d.Object, aggregate.AnnotationDrain, d.Level, d.As)
	if d.Level == aggregate.DrainSharedValue {
		fmt.Fprintf(w, "At once %s leave every shared name the global plugin answers (each global's own name, its SRV records, the clusterset and native names), their own per-pod names answering; the controller then writes them not ready in the global EndpointSlices.\n", who)
	} else {
		fmt.Fprintf(w, "At once %s leave every name, as if unlinked; nothing is deleted.\n", who)
	}
	if target.Service == "" {
		switch {
		case d.TargetClusterName != "" && d.TargetClusterName != target.Cluster:
			fmt.Fprintf(w, "Warning: Link %s names its cluster %q (spec.targetClusterName): Linkerd labels that Link's mirrors %s, and globalmirror drains the cluster a Link is named after, so this drain reaches none of them.\n",
				target.Cluster, d.TargetClusterName, d.TargetClusterName)
		case d.Mirrors == 0:
			fmt.Fprintf(w, "Warning: no headless mirror of cluster %s here: this drain changes no answer (yet).\n", target.Cluster)
		}
	}
	undo := "globalmirror undrain " + target.Cluster
	if target.LinkNamespace != DefaultLinkNamespace {
		undo += " --link-namespace " + target.LinkNamespace
	}
	if target.Service != "" {
		undo = "globalmirror undrain --service " + target.Service
	}
	if target.Exported {
		return // one undo for all: the command's
	}
	fmt.Fprintf(w, "Undo: %s\n", undo)
}
