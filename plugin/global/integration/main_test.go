// Package integration runs the built CoreDNS (bin/coredns, with the global
// plugin) against real control planes: a source cluster where the mirror
// simulator writes what Linkerd's service mirror writes, and target clusters
// east and west whose StatefulSet-like workloads get real EndpointSlices from
// their kube-controller-managers. Answers are checked with a real DNS client
// over UDP and TCP. The globalmirror controller never runs here: the plugin
// answers on its own.
package integration

import (
	"os"
	"testing"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var env *localkube.Env

func TestMain(m *testing.M) { os.Exit(localkube.Main(m, &env, "source", "east", "west")) }

// corefile serves the global plugin for one namespace of the source cluster,
// with the stock kubernetes plugin behind it for every other name.
var corefile = run.Corefile(`
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
    kubernetes cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
`)

// corefileKubernetesFirst lists kubernetes first: the plugin order is
// CoreDNS's directive order (global right before kubernetes), not the file's.
var corefileKubernetesFirst = run.Corefile(`
    kubernetes cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
    }
`)

// noGlobalService checks that nothing wrote a global Service: the controller
// does not run, the plugin answered on its own.
func noGlobalService(t *testing.T, s *scenario.T, name string) {
	t.Helper()
	source, ns := s.Source, s.NS
	_, err := source.Client.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("service %s/%s: %v; want NotFound (no controller runs in these tests)", ns, name, err)
	}
	sl, err := source.Client.DiscoveryV1().EndpointSlices(ns).List(t.Context(), metav1.ListOptions{
		LabelSelector: aggregate.LabelManagedBy + "=" + aggregate.ManagedBy})
	if err != nil || len(sl.Items) > 0 {
		t.Errorf("managed EndpointSlices in %s: %v %v; want none", ns, len(sl.Items), err)
	}
}
