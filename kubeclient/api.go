package kubeclient

import (
	"context"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Resource is one resource a Feed reads, named once: its API resource
// ("services", which also names its feeds in logs and labels their
// counters), its kind, its group version, and an empty object of its kind
// (a generated protobuf message, which decodes an item).
type Resource struct {
	Name    string
	Kind    string
	Version schema.GroupVersion
	New     func() runtime.Object
}

// API is one resource of the API server as a Feed reads it: the bodies of
// its lists and of its watches, as the API server encodes them in protobuf.
type API struct {
	// Kind is the resource's kind ("Service"); New makes an empty object of
	// it, which decodes a list's item (a generated protobuf message).
	Kind string
	New  func() runtime.Object
	// Page reads one page of a list: the response's body.
	Page func(context.Context, metav1.ListOptions) (io.ReadCloser, error)
	// Watch opens a watch, from a version or as a streamed list (the
	// objects first: sendInitialEvents), and returns the response's body,
	// in frames. An API server that does not stream lists refuses the
	// latter (422).
	Watch func(context.Context, metav1.ListOptions) (io.ReadCloser, error)
}

// Client is a REST client of r's group version on rc's configuration, for
// RESTAPI.
func Client(rc *rest.Config, r Resource) (*rest.RESTClient, error) {
	c := rest.CopyConfig(rc)
	gv := r.Version
	c.GroupVersion, c.APIPath = &gv, "/apis"
	if gv.Group == "" {
		c.APIPath = "/api" // the core group
	}
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// RESTAPI is resource r in namespace ("" for all), selected by label
// selector sel, through c, a Client of r.
func RESTAPI(c rest.Interface, r Resource, namespace, sel string) API {
	request := func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
		o.LabelSelector = sel
		return c.Get().Namespace(namespace).Resource(r.Name).VersionedParams(&o, scheme.ParameterCodec).
			SetHeader("Accept", runtime.ContentTypeProtobuf).Stream(ctx)
	}
	return API{
		Kind: r.Kind,
		New:  r.New,
		Page: request,
		Watch: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			o.Watch = true
			return request(ctx, o)
		},
	}
}
