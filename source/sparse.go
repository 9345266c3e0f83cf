package source

import (
	"strings"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	"google.golang.org/protobuf/encoding/protowire"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Field numbers of k8s.io/api/discovery/v1's generated.proto that an
// endpoint mirror's slice is read by.
const (
	sliceEndpoints     = 2 // EndpointSlice
	endpointConditions = 2 // Endpoint
	conditionsReady    = 1 // EndpointConditions
)

// Sparse implements kubeclient.SparseSink: an endpoint mirror's slice (one
// per mirrored pod, most of a large world's objects) as far as upsert reads
// it, which is what mirrorSlice keeps: its namespace, name and version, the
// labels naming its headless mirror and its endpoint mirror, and each
// endpoint's ready condition, where decoding it whole would allocate its
// managed fields, timestamps and every label besides. Any other slice is
// decoded whole.
func (k *sliceSink) Sparse(p *kubeclient.Peeked) runtime.Object {
	hm, _ := p.Label(aggregate.LabelHeadlessMirrorName)
	if hm == "" {
		return nil
	}
	lbl := map[string]string{aggregate.LabelHeadlessMirrorName: strings.Clone(hm)}
	if svc, ok := p.Label(discoveryv1.LabelServiceName); ok {
		lbl[discoveryv1.LabelServiceName] = strings.Clone(svc)
	}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{
		Namespace: strings.Clone(p.Namespace), Name: strings.Clone(p.Name), ResourceVersion: strings.Clone(p.ResourceVersion), Labels: lbl,
	}}
	err := kubeclient.EachField(p.Message(), func(num protowire.Number, b []byte, _ uint64, isBytes bool) error {
		if num != sliceEndpoints || !isBytes {
			return nil
		}
		var e discoveryv1.Endpoint
		err := kubeclient.EachField(b, func(num protowire.Number, b []byte, _ uint64, isBytes bool) error {
			if num != endpointConditions || !isBytes {
				return nil
			}
			return kubeclient.EachField(b, func(num protowire.Number, _ []byte, v uint64, isBytes bool) error {
				if num == conditionsReady && !isBytes {
					e.Conditions.Ready = new(v != 0)
				}
				return nil
			})
		})
		sl.Endpoints = append(sl.Endpoints, e)
		return err
	})
	if err != nil {
		return nil
	}
	return sl
}
