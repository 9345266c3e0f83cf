package global

import "github.com/coredns/caddy"

// Ready implements the ready plugin's Readiness interface. Ready means
// complete: the feeds have each listed once, the answers of every global
// service they listed are built, and CoreDNS's servers listen, so every
// global that existed when the lists were read (every one written before
// CoreDNS started) is answered from the moment Ready is true. Until then
// queries for global names get SERVFAIL.
//
// The servers are part of it because the ready plugin answers from its own
// OnStartup on, while CoreDNS opens its servers only once every plugin's
// OnStartup has returned (this one's waits for the first sync): an index
// built is not yet a name answered.
func (g *Global) Ready() bool { return g.listening.Load() && g.ctrl.ready() }

// instanceGlobals keys the plugins of one CoreDNS instance (every server
// block's) in its caddy storage, for listening to find them.
type instanceGlobals struct{}

// awaitListening marks g listening once CoreDNS's servers of the instance
// that c sets up listen: caddy's InstanceStartupEvent, which comes after
// they do, at the start and after each reload.
func awaitListening(c *caddy.Controller, g *Global) {
	hookListening()
	gs, _ := c.Get(instanceGlobals{}).([]*Global)
	c.Set(instanceGlobals{}, append(gs, g))
}

// hookListening registers listening as caddy's event hook unless it is
// already. Each setup must see to it: a reload by SIGUSR1 drops every hook
// before the new instance is set up. Caddy's only test for a hook is
// registering it again, which panics.
func hookListening() {
	defer func() { _ = recover() }()
	caddy.RegisterEventHook(pluginName, listening)
}

func listening(event caddy.EventName, info any) error {
	inst, ok := info.(*caddy.Instance)
	if event != caddy.InstanceStartupEvent || !ok {
		return nil
	}
	inst.StorageMu.RLock()
	gs, _ := inst.Storage[instanceGlobals{}].([]*Global)
	inst.StorageMu.RUnlock()
	for _, g := range gs {
		g.listening.Store(true)
	}
	return nil
}
