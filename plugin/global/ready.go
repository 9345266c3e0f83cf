package global

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"
)

// Ready implements the ready plugin's Readiness interface, for every
// `global` of the instance at once: the ready plugin keeps one plugin per
// name, so with `global` in two server blocks it asks only one of them.
//
// Ready means complete: every index of the instance has listed once and
// built the answers of every global service it listed, and the instance's
// servers listen, so every global that existed when the lists were read is
// answered from the moment Ready is true. The servers are part of it because
// the ready plugin answers from its own OnStartup on, while CoreDNS opens its
// servers only once every plugin's OnStartup has returned (this one's waits
// for the first sync): an index built is not yet a name answered.
//
// During a reload the old instance answers until the new one's servers take
// its sockets over, which they do only once the new indexes are complete or
// handover_timeout has passed: until then the new instance is ready if the old
// one answers completely, so that a Corefile edit never takes a pod out of
// its Service.
func (g *Global) Ready() bool { return g.inst != nil && g.inst.ready() }

// instance is what the `global` plugins of one CoreDNS instance (every
// server block's) share.
type instance struct {
	globals   []*Global
	listening atomic.Bool
	// predecessor is the instance that answers while this one is set up by
	// a reload; nil at the first start, and once this one listens.
	predecessor atomic.Pointer[instance]
	// gaveUp: this instance stopped waiting for an index that was not complete
	// in time, and takes over from its predecessor with it.
	gaveUp atomic.Bool
	// began is when the first of its plugins started, which every wait of
	// the instance's start is measured from.
	beganOnce sync.Once
	began     time.Time
}

// serving is the instance whose servers were the last to start listening.
var serving atomic.Pointer[instance]

func (s *instance) complete() bool {
	for _, g := range s.globals {
		if !g.ctrl.ready() {
			return false
		}
	}
	return true
}

func (s *instance) ready() bool {
	if s.listening.Load() {
		return s.complete()
	}
	return s.handingOver()
}

// handingOver: the instance's servers do not listen yet, and the one it
// takes over from answers every global.
func (s *instance) handingOver() bool {
	if s.listening.Load() {
		return false
	}
	p := s.predecessor.Load()
	return p != nil && !s.gaveUp.Load() && p.complete()
}

// deadline is when a start that may wait for at most limit stops waiting.
func (s *instance) deadline(limit time.Duration) time.Time {
	s.beganOnce.Do(func() { s.began = time.Now() })
	return s.began.Add(limit)
}

// instanceKey keys the instance in its caddy storage, for listening to find it.
type instanceKey struct{}

// joinInstance makes g one of the plugins of the instance that c sets up,
// marked listening once CoreDNS's servers of that instance listen: caddy's
// InstanceStartupEvent, which comes after they do, at the start and after
// each reload.
func joinInstance(c *caddy.Controller, g *Global) {
	hookListening()
	s, _ := c.Get(instanceKey{}).(*instance)
	if s == nil {
		s = &instance{}
		s.predecessor.Store(serving.Load())
		c.Set(instanceKey{}, s)
	}
	s.globals = append(s.globals, g)
	g.inst = s
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
	s, _ := inst.Storage[instanceKey{}].(*instance)
	inst.StorageMu.RUnlock()
	if s != nil {
		s.listening.Store(true)
		s.predecessor.Store(nil)
	}
	serving.Store(s) // nil: an instance without global
	startedPending(s)
	return nil
}
