package global

// Ready implements the ready plugin's Readiness interface: true once the
// informers have synced and the answers of every global service they listed
// are built. Until then queries for global names get SERVFAIL.
func (g *Global) Ready() bool { return g.ctrl.ready() }
