package source

import (
	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	"google.golang.org/protobuf/encoding/protowire"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Field numbers of k8s.io/api/discovery/v1's generated.proto that an
// endpoint mirror's slice is read by.
const (
	sliceEndpoints     = 2 // EndpointSlice
	endpointConditions = 2 // Endpoint
	conditionsReady    = 1 // EndpointConditions
)

// UpsertSparse implements kubeclient.SparseSink: an endpoint mirror's slice
// (one per mirrored pod, most of a large world's objects) is stored from its
// message as upsert stores it decoded, in a mirrorSlice: its name's and its
// endpoint mirror's hashes, its version and its readiness, filed under the
// headless mirror its label names. Decoding it whole would allocate its
// managed fields, timestamps and every label, all dropped at once. Any other
// slice, or one whose endpoints cannot be read, is left to the feed.
func (k *sliceSink) UpsertSparse(p *kubeclient.Peeked) bool {
	hm, _ := p.Label(aggregate.LabelHeadlessMirrorName)
	if hm == "" {
		return false
	}
	ready, err := sparseReady(p.Message())
	if err != nil {
		return false
	}
	service, _ := p.Label(discoveryv1.LabelServiceName)
	s := k.s
	s.write(func() []Key {
		// p's strings are borrowed: the namespace is stored interned, and
		// entryFor copies the headless mirror's name where it stores it.
		return k.upsertMirror(s.intern.copyOf(p.Namespace), p.Name, hm, s.hash.of(service), ready, kubeclient.ParseVersion(p.ResourceVersion))
	})
	return true
}

// sparseReady is mirrorReady of the EndpointSlice whose message msg is: if
// any endpoint is ready, an unset condition counting as ready
// (aggregate.EndpointReady).
func sparseReady(msg []byte) (bool, error) {
	someReady := false
	err := kubeclient.EachField(msg, func(num protowire.Number, b []byte, _ uint64, isBytes bool) error {
		if num != sliceEndpoints || !isBytes {
			return nil
		}
		ready := true
		err := kubeclient.EachField(b, func(num protowire.Number, b []byte, _ uint64, isBytes bool) error {
			if num != endpointConditions || !isBytes {
				return nil
			}
			return kubeclient.EachField(b, func(num protowire.Number, _ []byte, v uint64, isBytes bool) error {
				if num == conditionsReady && !isBytes {
					ready = v != 0
				}
				return nil
			})
		})
		someReady = someReady || ready
		return err
	})
	return someReady, err
}
