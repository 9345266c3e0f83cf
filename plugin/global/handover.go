package global

import (
	"sync"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/kubernetes"
)

// The stock kubernetes plugin that runs right after `global` lists again on
// every reload, and reports Ready only once it has. During a handover the
// new instance's /ready would then be 503 for as long as that takes,
// although the old instance still answers every name: the kubelet takes the
// pod out of its Service, and where every pod reloads the same edit at
// about the same time, the Service is left with no endpoint at all. So in
// each server block where `global` runs, the kubernetes plugin after it
// reports Ready, as `global` does, while the instance it takes over from
// answers completely. Its servers take over once its startup_timeout has
// passed or it has synced: the chart sets startup_timeout as long as
// handover_timeout, so that the old instance answers until then.

func init() { caddy.RegisterParsingCallback("dns", "kubernetes", wrapKubernetes) }

// kubernetesHandover is the kubernetes plugin, ready also while its
// instance hands over. Every other method is the plugin's own, so other
// plugins find it as they find the kubernetes plugin (by name, and by the
// interfaces they assert).
type kubernetesHandover struct {
	*kubernetes.Kubernetes
	inst *instance
}

// Ready implements the ready plugin's Readiness interface.
func (k *kubernetesHandover) Ready() bool { return k.Kubernetes.Ready() || k.inst.handingOver() }

// afterGlobal are the server blocks where `global`'s setup added its
// handler, with how many plugins the block had then, until the kubernetes
// directive has been set up in every block.
var afterGlobal = struct {
	sync.Mutex
	blocks []blockAfterGlobal
}{}

type blockAfterGlobal struct {
	cfg     *dnsserver.Config
	plugins int
	inst    *instance
}

// noteBlock records the block c sets up, right after `global` added itself.
func noteBlock(c *caddy.Controller, inst *instance) {
	cfg := dnsserver.GetConfig(c)
	afterGlobal.Lock()
	defer afterGlobal.Unlock()
	afterGlobal.blocks = append(afterGlobal.blocks, blockAfterGlobal{cfg, len(cfg.Plugin), inst})
}

// wrapKubernetes runs once the kubernetes directive is set up in every
// server block: where the next plugin a block added after `global` is
// kubernetes (it comes right after global in the directive order, so if the
// block has it, it added one), that plugin's handler is wrapped.
func wrapKubernetes(caddy.Context) error {
	afterGlobal.Lock()
	blocks := afterGlobal.blocks
	afterGlobal.blocks = nil
	afterGlobal.Unlock()
	for _, b := range blocks {
		if len(b.cfg.Plugin) != b.plugins+1 {
			continue // no kubernetes in this block
		}
		add, inst := b.cfg.Plugin[b.plugins], b.inst
		b.cfg.Plugin[b.plugins] = func(next plugin.Handler) plugin.Handler {
			h := add(next)
			if k, ok := h.(*kubernetes.Kubernetes); ok {
				return &kubernetesHandover{Kubernetes: k, inst: inst}
			}
			return h
		}
	}
	return nil
}
