package mirrorsim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Linkerd's Link, as `linkerd multicluster install` defines it and `linkerd
// multicluster link` writes one for each linked cluster, named after it, in
// the extension's namespace. With Options.Links the simulator installs the
// definition in the source cluster and keeps a Link for each cluster it
// links, deleting it on unlink, so that what reads Links (globalmirror's
// drains) meets them as with Linkerd.
var (
	LinkResource  = schema.GroupVersionResource{Group: "multicluster.linkerd.io", Version: "v1alpha3", Resource: "links"}
	LinkNamespace = "linkerd-multicluster"
)

// linkVersions are the versions Linkerd's Link CRD serves (edge-26.8.3,
// multicluster/charts/linkerd-multicluster/templates/link-crd.yaml),
// v1alpha3 stored. Their schemas are left open here: globalmirror reads a
// Link's metadata only.
var linkVersions = []string{"v1alpha1", "v1alpha2", "v1alpha3"}

// InstallLinkCRD installs Linkerd's Link CRD and its namespace, and waits
// until Links are served.
func InstallLinkCRD(ctx context.Context, cfg *rest.Config) error {
	client, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: LinkResource.Resource + "." + LinkResource.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: LinkResource.Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "links", Singular: "link", Kind: "Link", ListKind: "LinkList"},
		},
	}
	open := true
	for _, v := range linkVersions {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v, Served: true, Storage: v == LinkResource.Version,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", XPreserveUnknownFields: &open}},
		})
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("mirrorsim: installing the Link CRD: %w", err)
	}
	core, err := newClient(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LinkNamespace}}
	if _, err := core.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// links is the source cluster's Links.
func (s *Simulator) linkClient() dynamic.ResourceInterface {
	return s.dynamic.Resource(LinkResource).Namespace(LinkNamespace)
}

// writeLink writes the Link to cluster name, as `linkerd multicluster link`
// does (a part of its spec).
func (s *Simulator) writeLink(ctx context.Context, name string) error {
	link := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": LinkResource.GroupVersion().String(),
		"kind":       "Link",
		"metadata":   map[string]any{"name": name, "namespace": LinkNamespace},
		"spec": map[string]any{
			"targetClusterName":   name,
			"targetClusterDomain": s.opts.ClusterDomain,
			"gatewayAddress":      s.opts.GatewayIP.String(),
			"gatewayPort":         fmt.Sprint(s.opts.GatewayPort),
			"selector":            map[string]any{"matchLabels": map[string]any{LabelExported: "true"}},
		},
	}}
	_, err := s.linkClient().Create(ctx, link, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return nil // a simulator restarted: Linkerd's Link outlives its controller
	}
	return err
}

// deleteLink deletes the Link to cluster name.
func (s *Simulator) deleteLink(ctx context.Context, name string) error {
	err := s.linkClient().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
