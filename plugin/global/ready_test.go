package global

import (
	"testing"

	"github.com/coredns/caddy"
)

// TestReadyOnceListening: a plugin whose index is built is ready only once
// CoreDNS's servers of its own instance listen (caddy's
// InstanceStartupEvent), not another instance's.
func TestReadyOnceListening(t *testing.T) {
	h := startHarness(t, defaultConfig(), testWorld()...)
	c := caddy.NewTestController("dns", "global")
	awaitListening(c, h.g)
	if h.g.Ready() {
		t.Fatal("ready, the index built, before CoreDNS's servers listen")
	}
	for _, event := range []caddy.EventName{caddy.InstanceStartupEvent, caddy.ShutdownEvent} {
		caddy.EmitEvent(event, &caddy.Instance{Storage: map[any]any{}})
	}
	caddy.EmitEvent(caddy.ShutdownEvent, &caddy.Instance{Storage: map[any]any{instanceGlobals{}: c.Get(instanceGlobals{})}})
	if h.g.Ready() {
		t.Fatal("ready after another instance started, or another event")
	}
	caddy.EmitEvent(caddy.InstanceStartupEvent, &caddy.Instance{Storage: map[any]any{instanceGlobals{}: c.Get(instanceGlobals{})}})
	if !h.g.Ready() {
		t.Fatal("not ready, the index built, once its instance's servers listen")
	}
}
