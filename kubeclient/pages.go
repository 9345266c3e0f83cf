package kubeclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// A list in protobuf is the envelope (a runtime.Unknown) around the list:
// its ListMeta (its version), then its items, each an
// object's message as a watch event carries it, without an envelope.

// pages lists through the list API, as client-go's pager asks but in one
// response (no Limit): the API server serves it from its watch cache at a
// consistent version (1.31 and later), where it serves the pages of a
// limited list from etcd until 1.34. The feed reads the response as it
// comes, one item at a time, so one response costs it no more memory than
// pages. A 410 is the caller's to wait on.
func (f *Feed) pages(ctx context.Context) (string, error) {
	f.Sink.Listing()
	var buf []byte // an item at a time, for the whole list
	rv, err := f.page(ctx, &buf, new(Peeked))
	if err != nil {
		return "", err
	}
	if rv == "" {
		return "", errors.New("a list ended without a version to watch from")
	}
	f.Sink.Listed()
	return rv, nil
}

// page reads one list response and hands its items to the sink.
func (f *Feed) page(ctx context.Context, buf *[]byte, p *Peeked) (rv string, err error) {
	body, err := f.API.Page(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	defer body.Close()
	r := bufio.NewReader(body)
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil || !bytes.Equal(magic[:], protobufMagic) {
		return "", fmt.Errorf("a %s list: %w", f.API.Kind, errNotProtobuf)
	}
	envelope := &fieldReader{r: r, left: -1, buf: buf}
	for {
		_, err := envelope.nextOf(unknownRaw)
		if errors.Is(err, io.EOF) {
			return rv, nil
		}
		if err != nil {
			return "", fmt.Errorf("reading a %s list: %w", f.API.Kind, err)
		}
		list, err := envelope.message()
		if err != nil {
			return "", err
		}
		if rv, err = f.items(list, p); err != nil {
			return "", fmt.Errorf("reading a %s list: %w", f.API.Kind, err)
		}
	}
}

// items hands a list's items to the sink, and returns its ListMeta's
// version.
func (f *Feed) items(list *fieldReader, p *Peeked) (rv string, err error) {
	for {
		num, err := list.nextOf(listItems, listMetadata)
		if errors.Is(err, io.EOF) {
			return rv, nil
		}
		if err != nil {
			return "", err
		}
		b, err := list.bytes()
		if err != nil {
			return "", err
		}
		if num == listMetadata {
			err = eachField(b, func(num protowire.Number, v []byte) error {
				if num == listMetaVersion {
					rv = string(v)
				}
				return nil
			})
		} else if *p, err = peekObject(b, true); err == nil {
			err = f.take(p, func() (runtime.Object, error) { return f.decodeItem(b) })
		}
		if err != nil {
			return "", err
		}
	}
}
