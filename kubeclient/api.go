package kubeclient

import (
	"bytes"
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
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

// Client is a REST client of group version gv (at apiPath: "/api" for the
// core group, else "/apis") on rc's configuration, for RESTAPI.
func Client(rc *rest.Config, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(rc)
	c.GroupVersion, c.APIPath = &gv, apiPath
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// RESTAPI is resource (of kind, made by newObj) in namespace ("" for all),
// selected by label selector sel, through c, a Client of the resource's
// group version.
func RESTAPI(c rest.Interface, namespace, resource, kind, sel string, newObj func() runtime.Object) API {
	request := func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
		o.LabelSelector = sel
		return c.Get().Namespace(namespace).Resource(resource).VersionedParams(&o, scheme.ParameterCodec).
			SetHeader("Accept", runtime.ContentTypeProtobuf).Stream(ctx)
	}
	return API{
		Kind: kind,
		New:  newObj,
		Page: request,
		Watch: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			o.Watch = true
			return request(ctx, o)
		},
	}
}

// TypedAPI is the resource of a typed client that cannot stream lists, as
// client-go's fakes cannot: each page it lists and each event it watches is
// encoded as the API server would send it, so that the feed reads them as
// any other.
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
		Watch: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
			if o.SendInitialEvents != nil {
				return nil, apierrors.NewInvalid(schema.GroupKind{Kind: kind}, "",
					field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "a typed client does not stream lists")})
			}
			w, err := watchFn(ctx, o)
			if err != nil {
				return nil, err
			}
			return encodedWatch(ctx, w), nil
		},
	}
}

// encodedWatch is w's events as a watch's body, in frames, until w ends,
// ctx is done or the body is closed.
func encodedWatch(ctx context.Context, w watch.Interface) io.ReadCloser {
	r, pw := io.Pipe()
	stopped := context.AfterFunc(ctx, func() { w.Stop(); pw.CloseWithError(ctx.Err()) })
	go func() {
		info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
		frames := info.StreamSerializer.Framer.NewFrameWriter(pw)
		for ev := range w.ResultChan() {
			raw, err := EncodeProtobuf(ev.Object)
			if err == nil {
				err = info.StreamSerializer.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}}, frames)
			}
			if err != nil {
				w.Stop()
				pw.CloseWithError(err) // the body closed, or an object not to encode
				return
			}
		}
		pw.Close()
	}()
	return watchBody{PipeReader: r, stop: func() { stopped(); w.Stop() }}
}

// watchBody is a watch's body that stops the watch when closed.
type watchBody struct {
	*io.PipeReader
	stop func()
}

func (b watchBody) Close() error {
	b.stop()
	return b.PipeReader.Close()
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
