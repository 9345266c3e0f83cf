package global

import (
	"context"
	"testing"
	"unsafe"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// kubernetesFrame is a frame as large as what the kubernetes plugin's path
// puts on a query's stack (growStack's measure).
//
//go:noinline
func kubernetesFrame() byte {
	var frame [12 << 10]byte
	return frame[stackIndex]
}

// movedBy reports whether the calling goroutine's stack moved (was grown,
// and so copied) while f ran: a local's address before and after differ.
//
//go:noinline
func movedBy(f func() byte) bool {
	var here byte
	before := uintptr(unsafe.Pointer(&here))
	f()
	return uintptr(unsafe.Pointer(&here)) != before
}

// TestPassedOnQueriesReachTheNextPluginOnAGrownStack guards growStack, on
// which the bench's floor for names not global (0.98× kubernetes alone)
// rests: a query passed on reaches the next plugin on a stack that holds the
// kubernetes plugin's path without growing again. If a Go release made
// growStack's frame vanish (or cost more), its stack would move there.
func TestPassedOnQueriesReachTheNextPluginOnAGrownStack(t *testing.T) {
	h := startHarness(t, configFrom(t, "global"))
	ask := func(handler plugin.Handler) bool {
		moved := make(chan bool, 1)
		next := plugin.HandlerFunc(func(context.Context, dns.ResponseWriter, *dns.Msg) (int, error) {
			moved <- movedBy(kubernetesFrame)
			return dns.RcodeSuccess, nil
		})
		m := new(dns.Msg)
		m.SetQuestion("example.org.", dns.TypeA) // not the plugin's: passed on
		// CoreDNS's UDP server answers each query on a goroutine of its own.
		go func() {
			h.g.Next = next
			if handler == nil {
				handler = next
			}
			_, _ = handler.ServeDNS(context.Background(), dnstest.NewRecorder(&test.ResponseWriter{}), m)
		}()
		return <-moved
	}
	// Without global in front, the next plugin's path grows a new
	// goroutine's stack: the measure can tell.
	if !ask(nil) {
		t.Fatal("a new goroutine's stack held a 12 KiB frame without growing: the measure cannot tell growStack's effect")
	}
	if ask(h.g) {
		t.Error("a query passed on by global reached the next plugin on a stack that had to grow again: growStack no longer grows it")
	}
}
