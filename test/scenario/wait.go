package scenario

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// GlobalService says how the global Service name in ns falls short of what
// the controller writes for members with the one port port: headless,
// labelled managed-by globalmirror, with that port, and EndpointSlices whose
// endpoints, each ready with one address, are exactly want (hostname to
// address); "" once it is so. It is a check for await.Poll.
func GlobalService(ctx context.Context, c kubernetes.Interface, ns, name string, port int32, want map[string]string) string {
	svc, err := c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if svc.Labels["app.kubernetes.io/managed-by"] != "globalmirror" || svc.Spec.ClusterIP != corev1.ClusterIPNone ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != port {
		return fmt.Sprintf("%s: labels %v, clusterIP %q, ports %v", name, svc.Labels, svc.Spec.ClusterIP, svc.Spec.Ports)
	}
	list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return err.Error()
	}
	got := map[string]string{}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			if e.Hostname == nil || len(e.Addresses) != 1 || !ready {
				return fmt.Sprintf("%s: endpoint %+v", name, e)
			}
			got[*e.Hostname] = e.Addresses[0]
		}
	}
	if !maps.Equal(got, want) {
		return fmt.Sprintf("%s endpoints %v", name, got)
	}
	return ""
}

// GatewayAlone says how headless mirror `mirror` in ns falls short of what
// Linkerd leaves in it after an update of the exported Service: one slice
// holding one endpoint, its gateway, without a hostname; "" once it is so.
// It is a check for await.Poll.
func GatewayAlone(ctx context.Context, c kubernetes.Interface, ns, mirror string) string {
	list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + mirror})
	if err != nil {
		return err.Error()
	}
	if len(list.Items) != 1 || len(list.Items[0].Endpoints) != 1 || list.Items[0].Endpoints[0].Hostname != nil {
		return fmt.Sprintf("%s's slices are %d, not one of Linkerd's gateway alone", mirror, len(list.Items))
	}
	return ""
}

// AwaitAnswer waits until name/qtype asked of addr over network sums up
// (dnsq.Summary) to want, and fails after timeout with the last answer.
func AwaitAnswer(ctx context.Context, network, addr, name string, qtype uint16, want string, timeout, interval time.Duration) error {
	err := await.Poll(ctx, timeout, interval, func(context.Context) string {
		if got := dnsq.Answer(network, addr, name, qtype); got != want {
			return fmt.Sprintf("%q", got)
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("%s %s over %s, want %q: %w", name, dns.TypeToString[qtype], network, want, err)
	}
	return nil
}

// AwaitRecords waits until name has n A records at addr, over UDP without
// EDNS, and fails after timeout with the last answer.
func AwaitRecords(ctx context.Context, addr, name string, n int, timeout time.Duration) error {
	err := await.Poll(ctx, timeout, 100*time.Millisecond, func(context.Context) string {
		r, err := dnsq.Ask("udp", addr, name, dns.TypeA, 0)
		switch {
		case err != nil:
			return err.Error()
		case len(r.Answer) != n:
			return fmt.Sprintf("%s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		return ""
	})
	if err != nil {
		return errors.Join(fmt.Errorf("%s A from %s: want %d records", name, addr, n), err)
	}
	return nil
}

// AwaitBoth waits until name/qtype answers want over UDP, then over TCP,
// within one timeout, and returns how long the UDP answer took.
func AwaitBoth(ctx context.Context, addr, name string, qtype uint16, want string, timeout, interval time.Duration) (time.Duration, error) {
	start := time.Now()
	var udp time.Duration
	for _, network := range []string{"udp", "tcp"} {
		if err := AwaitAnswer(ctx, network, addr, name, qtype, want, max(0, timeout-time.Since(start)), interval); err != nil {
			return 0, err
		}
		if network == "udp" {
			udp = time.Since(start)
		}
	}
	return udp, nil
}
