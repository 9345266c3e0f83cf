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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
		_, err = links.Patch(ctx, target.Cluster, types.MergePatchType, patch, opts)
	}
	return out, err
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
	undo := "globalmirror undrain " + target.Cluster
	if target.LinkNamespace != DefaultLinkNamespace {
		undo += " --link-namespace " + target.LinkNamespace
	}
	if target.Service != "" {
		undo = "globalmirror undrain --service " + target.Service
	}
	fmt.Fprintf(w, "Undo: %s\n", undo)
}
