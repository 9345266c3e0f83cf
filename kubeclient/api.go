package kubeclient

import (
	"bytes"
	"context"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// ListFunc and WatchFunc are a typed client's List and Watch for one
// namespace, with the feed's list options already applied.
type (
	ListFunc  func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	WatchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
)

// API is one resource of the API server as a Feed reads it: the pages of
// its lists and its streamed lists, as the API server encodes them in
// protobuf, and its watches.
type API struct {
	// Kind is the resource's kind ("Service"); New makes an empty object of
	// it, which decodes a list's item (a generated protobuf message).
	Kind string
	New  func() runtime.Object
	// Page reads one page of a list: the response's body.
	Page func(context.Context, metav1.ListOptions) (io.ReadCloser, error)
	// Stream opens a streamed list (a watch sending the objects first):
	// the response's body, in frames. Nil: the feed lists through Page only.
	Stream func(context.Context, metav1.ListOptions) (io.ReadCloser, error)
	// Watch watches from a version, for the events after a list.
	Watch WatchFunc
}

// RESTAPI is resource (of kind, made by newObj) in namespace ("" for all),
// selected by label selector sel, through c: a client of the resource's
// group version, an EncodedClient so that the watches after each list leave
// objects encoded until the sink says they are not current.
func RESTAPI(c rest.Interface, namespace, resource, kind, sel string, newObj func() runtime.Object) API {
	request := func(ctx context.Context, o metav1.ListOptions) *rest.Request {
		o.LabelSelector = sel
		return c.Get().Namespace(namespace).Resource(resource).VersionedParams(&o, scheme.ParameterCodec).
			SetHeader("Accept", runtime.ContentTypeProtobuf)
	}
	return API{
		Kind: kind,
		New:  newObj,
		Page: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			return request(ctx, o).Stream(ctx)
		},
		Stream: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			o.Watch = true
			return request(ctx, o).Stream(ctx)
		},
		Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch, o.LabelSelector = true, sel
			return c.Get().Namespace(namespace).Resource(resource).VersionedParams(&o, scheme.ParameterCodec).Watch(ctx)
		},
	}
}

// TypedAPI is the resource of a typed client that cannot stream lists, as
// client-go's fakes cannot: each page it lists is encoded as the API server
// would send it, so that the feed reads it as any other.
func TypedAPI(kind string, newObj func() runtime.Object, list ListFunc, watchFn WatchFunc) API {
	return API{
		Kind: kind,
		New:  newObj,
		Page: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			l, err := list(ctx, o)
			if err != nil {
				return nil, err
			}
			b, err := EncodeProtobuf(l)
			if err != nil {
				return nil, fmt.Errorf("encoding a %s list: %w", kind, err)
			}
			return io.NopCloser(bytes.NewReader(b)), nil
		},
		Watch: watchFn,
	}
}

// EncodeProtobuf encodes obj as the API server sends it in protobuf: in its
// envelope, at its group version in client-go's scheme (TypedAPI's pages,
// and tests' API servers).
func EncodeProtobuf(obj runtime.Object) ([]byte, error) {
	kinds, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		return nil, err
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		return nil, fmt.Errorf("no protobuf serializer")
	}
	return runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, kinds[0].GroupVersion()), obj)
}
