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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
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
	// Cluster is the cluster a Link drains: its spec.targetClusterName (its
	// name where that is absent), the name Linkerd labels its mirrors with.
	Cluster string `json:"cluster,omitempty"`
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

	links, err := linkClient(client, cfg, target.LinkNamespace)
	if err != nil {
		return nil, err
	}
	link, err := FindLink(ctx, links, target.Cluster)
	if err != nil {
		return nil, fmt.Errorf("%w (in namespace %s)", err, target.LinkNamespace)
	}
	out.Object = "Link " + target.LinkNamespace + "/" + link.GetName()
	out.Cluster = source.LinkCluster(link)
	out.Was = link.GetAnnotations()[aggregate.AnnotationDrain]
	if out.Written = out.Was != out.Level; out.Written {
		if _, err = links.Patch(ctx, link.GetName(), types.MergePatchType, patch, opts); err != nil {
			return out, err
		}
	}
	out.Mirrors = headlessMirrors(ctx, client, out.Cluster)
	return out, nil
}

// linkClient is the Links of namespace, at the version the API server
// prefers.
func linkClient(client kubernetes.Interface, cfg *rest.Config, namespace string) (dynamic.ResourceInterface, error) {
	version, err := source.LinkVersion(client.Discovery())
	if err != nil {
		return nil, fmt.Errorf("finding Linkerd's Link resource: %w", err)
	}
	if version == "" {
		return nil, fmt.Errorf("the API server serves no %s: is Linkerd's multicluster extension installed?", source.LinkGroup)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return dyn.Resource(schema.GroupVersionResource{Group: source.LinkGroup, Version: version, Resource: source.LinkResource}).Namespace(namespace), nil
}

// FindLink is the Link to cluster, as both halves match them: the one whose
// spec.targetClusterName is cluster (its name where the field is absent),
// or else the one named cluster, whose mirrors carry its target's name.
func FindLink(ctx context.Context, links dynamic.ResourceInterface, cluster string) (*unstructured.Unstructured, error) {
	list, err := links.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Linkerd's Links: %w", err)
	}
	items := list.Items
	slices.SortFunc(items, func(a, b unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	for i := range items {
		if source.LinkCluster(&items[i]) == cluster {
			return &items[i], nil
		}
	}
	for i := range items {
		if items[i].GetName() == cluster {
			return &items[i], nil
		}
	}
	var linked []string
	for i := range items {
		l := &items[i]
		if c := source.LinkCluster(l); c != l.GetName() {
			linked = append(linked, c+" (Link "+l.GetName()+")")
		} else {
			linked = append(linked, c)
		}
	}
	if len(linked) == 0 {
		return nil, fmt.Errorf("no Link to cluster %s: there is no Link there (--link-namespace names where Linkerd's multicluster extension is installed)", cluster)
	}
	return nil, fmt.Errorf("no Link to cluster %s: the clusters linked there are %s", cluster, strings.Join(linked, ", "))
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
	for _, svc := range exportedServices(list.Items) {
		d, err := Drain(ctx, client, cfg, DrainTarget{Service: svc}, level)
		if err != nil {
			return out, fmt.Errorf("service %s: %w", svc, err)
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
		if d.Cluster != target.Cluster {
			fmt.Fprintf(w, "%s is to cluster %s (its spec.targetClusterName), the name Linkerd labels its mirrors with: those are drained.\n", d.Object, d.Cluster)
		}
		switch {
		case d.Mirrors == 0:
			fmt.Fprintf(w, "Warning: no headless mirror of cluster %s here: this drain changes no answer (yet).\n", d.Cluster)
		case d.Mirrors < 0:
			fmt.Fprintf(w, "Warning: the headless mirrors of cluster %s here could not be listed with your rights: whether this drain changes an answer is not known.\n", d.Cluster)
		}
	}
	if target.Exported {
		return // one undo for all: the command's
	}
	fmt.Fprintf(w, "Undo: %s\n", target.Undo())
}

// Undo is the command that undoes a drain of target.
func (target DrainTarget) Undo() string {
	switch {
	case target.Exported:
		return "globalmirror undrain --exported"
	case target.Service != "":
		return "globalmirror undrain --service " + target.Service
	}
	undo := "globalmirror undrain " + target.Cluster
	if target.LinkNamespace != DefaultLinkNamespace && target.LinkNamespace != "" {
		undo += " --link-namespace " + target.LinkNamespace
	}
	return undo
}
