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

// A list's page in protobuf is the envelope (a runtime.Unknown) around the
// list: its ListMeta (version, continue token), then its items, each an
// object's message as a watch event carries it, without an envelope.

// pages lists in one response, or in pages of PageSize all at the first
// page's version, each read from the response as it comes, one item at a
// time. Where that version is gone before the last page (410 on the
// continue token), it lists once more in one response, as client-go's pager
// does: a list of its own, so that what the first pages delivered and is
// gone since is dropped at its end. A 410 on that list too is the caller's
// to wait on.
func (f *Feed) pages(ctx context.Context) (string, error) {
	opts := metav1.ListOptions{Limit: f.PageSize}
	f.Sink.Listing()
	var buf []byte   // an item at a time, for the whole list
	p := new(Peeked) // one for the whole list, as in stream
	for {
		rv, cont, err := f.page(ctx, opts, &buf, p)
		if isExpired(err) && opts.Continue != "" && opts.Limit != 0 {
			opts.Limit, opts.Continue = 0, ""
			f.Sink.Listing()
			continue
		}
		if err != nil {
			return "", err
		}
		if cont == "" {
			if rv == "" {
				return "", errors.New("a list ended without a version to watch from")
			}
			f.Sink.Listed()
			return rv, nil
		}
		opts.Continue = cont
	}
}

// page reads one page and hands its items to the sink.
func (f *Feed) page(ctx context.Context, opts metav1.ListOptions, buf *[]byte, p *Peeked) (rv, cont string, err error) {
	body, err := f.API.Page(ctx, opts)
	if err != nil {
		return "", "", err
	}
	defer body.Close()
	r := bufio.NewReader(body)
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil || !bytes.Equal(magic[:], protobufMagic) {
		return "", "", fmt.Errorf("a %s list: %w", f.API.Kind, errNotProtobuf)
	}
	envelope := &fieldReader{r: r, left: -1, buf: buf}
	for {
		_, err := envelope.nextOf(unknownRaw)
		if errors.Is(err, io.EOF) {
			return rv, cont, nil
		}
		if err != nil {
			return "", "", fmt.Errorf("reading a %s list: %w", f.API.Kind, err)
		}
		list, err := envelope.message()
		if err != nil {
			return "", "", err
		}
		if rv, cont, err = f.items(list, p); err != nil {
			return "", "", fmt.Errorf("reading a %s list: %w", f.API.Kind, err)
		}
	}
}

// items hands a list's items to the sink, and returns its ListMeta's
// version and continue token.
func (f *Feed) items(list *fieldReader, p *Peeked) (rv, cont string, err error) {
	for {
		num, err := list.nextOf(listItems, listMetadata)
		if errors.Is(err, io.EOF) {
			return rv, cont, nil
		}
		if err != nil {
			return "", "", err
		}
		b, err := list.bytes()
		if err != nil {
			return "", "", err
		}
		if num == listMetadata {
			err = eachField(b, func(num protowire.Number, v []byte) error {
				switch num {
				case listMetaVersion:
					rv = string(v)
				case listMetaContinue:
					cont = string(v)
				}
				return nil
			})
		} else if *p, err = peekObject(b, true); err == nil {
			err = f.take(p, func() (runtime.Object, error) { return f.decodeItem(b) })
		}
		if err != nil {
			return "", "", err
		}
	}
}
