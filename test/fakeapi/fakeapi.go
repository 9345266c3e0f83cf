// Package fakeapi serves a feed from client-go's fake clientset, for unit
// tests: each page it lists and each event it watches is encoded as an API
// server sends it, so that the feed reads them as it reads an API server's.
// The fakes cannot stream lists: a streamed list is refused (422), as an
// API server that does not stream refuses it.
package fakeapi

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/globalmirror/globalmirror/kubeclient"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// For is the APIs of client's resources, as source.Config.APIs takes them.
func For(client kubernetes.Interface) func(r kubeclient.Resource, namespace, sel string) (kubeclient.API, error) {
	return func(r kubeclient.Resource, namespace, sel string) (kubeclient.API, error) {
		selector, err := labels.Parse(sel)
		if err != nil {
			return kubeclient.API{}, err
		}
		var list func(context.Context, metav1.ListOptions) (runtime.Object, error)
		var watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)
		switch r.Name {
		case "services":
			api := client.CoreV1().Services(namespace)
			list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, o) }
			watchFn = api.Watch
		case "endpointslices":
			api := client.DiscoveryV1().EndpointSlices(namespace)
			list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, o) }
			watchFn = api.Watch
		default:
			return kubeclient.API{}, fmt.Errorf("fakeapi: no %s", r.Name)
		}
		return kubeclient.API{
			Kind: r.Kind,
			New:  r.New,
			Page: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
				o.LabelSelector = sel
				l, err := list(ctx, o)
				if err != nil {
					return nil, err
				}
				b, err := Encode(l)
				if err != nil {
					return nil, fmt.Errorf("encoding a %s list: %w", r.Kind, err)
				}
				return io.NopCloser(bytes.NewReader(b)), nil
			},
			Watch: func(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
				if o.SendInitialEvents != nil {
					return nil, apierrors.NewInvalid(schema.GroupKind{Kind: r.Kind}, "",
						field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "client-go's fakes do not stream lists")})
				}
				o.LabelSelector = sel
				w, err := watchFn(ctx, o)
				if err != nil {
					return nil, err
				}
				// The fakes select what they list, not what they watch; an
				// API server selects both.
				return encoded(ctx, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
					m, err := meta.Accessor(ev.Object)
					return ev, ev.Type == watch.Bookmark || ev.Type == watch.Error || err != nil || selector.Matches(labels.Set(m.GetLabels()))
				})), nil
			},
		}, nil
	}
}

// encoded is w's events as a watch's body, in frames, until w ends, ctx is
// done or the body is closed.
func encoded(ctx context.Context, w watch.Interface) io.ReadCloser {
	r, pw := io.Pipe()
	stopped := context.AfterFunc(ctx, func() { w.Stop(); pw.CloseWithError(ctx.Err()) })
	go func() {
		info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
		frames := info.StreamSerializer.Framer.NewFrameWriter(pw)
		for ev := range w.ResultChan() {
			raw, err := Encode(ev.Object)
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
	return body{PipeReader: r, stop: func() { stopped(); w.Stop() }}
}

// body is a watch's body that stops the watch when closed.
type body struct {
	*io.PipeReader
	stop func()
}

func (b body) Close() error {
	b.stop()
	return b.PipeReader.Close()
}

// Encode encodes obj as the API server sends it in protobuf: in its
// envelope, at its group version in client-go's scheme.
func Encode(obj runtime.Object) ([]byte, error) {
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
