package workload_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/workload"
)

// TestWorkload checks what the real kube-controller-manager makes of the
// simulated pods: Endpoints and EndpointSlices with hostnames, following
// scale, readiness and deletion.
func TestWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx := context.Background()
	c := localkube.StartT(t, "one").Cluster("one")

	w, err := workload.Create(ctx, c.Client, "ns1", "db", 3, workload.Options{
		Labels: map[string]string{workload.ExportedLabel: "true"},
		IPv4:   netip.MustParsePrefix("198.51.100.0/24"),
		IPv6:   netip.MustParsePrefix("2001:db8:1::/64"),
	})
	if err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c.Client, "ns1", "db", "db-0=198.51.100.1 db-1=198.51.100.2 db-2=198.51.100.3", "")
	waitSlices(t, c.Client, "ns1", "db", "db-0=198.51.100.1 db-1=198.51.100.2 db-2=198.51.100.3 | db-0=2001:db8:1::1 db-1=2001:db8:1::2 db-2=2001:db8:1::3")

	svc, err := c.Client.CoreV1().Services("ns1").Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Labels[workload.ExportedLabel] != "true" || svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Ports[0].Name != "db" {
		t.Errorf("service: labels %v clusterIP %q ports %v", svc.Labels, svc.Spec.ClusterIP, svc.Spec.Ports)
	}

	if err := w.Scale(ctx, 4); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c.Client, "ns1", "db", "db-0=198.51.100.1 db-1=198.51.100.2 db-2=198.51.100.3 db-3=198.51.100.4", "")

	if err := w.SetReady(ctx, "db-1", false); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c.Client, "ns1", "db", "db-0=198.51.100.1 db-2=198.51.100.3 db-3=198.51.100.4", "db-1=198.51.100.2")

	if err := w.Scale(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c.Client, "ns1", "db", "db-0=198.51.100.1", "")
	if err := w.SetReady(ctx, "db-0", false); err != nil {
		t.Fatal(err)
	}
	if err := w.SetReady(ctx, "db-0", true); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c.Client, "ns1", "db", "db-0=198.51.100.1", "")

	if err := w.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	poll(t, "endpoints deleted", func(ctx context.Context) (string, error) {
		_, err := c.Client.CoreV1().Endpoints("ns1").Get(ctx, "db", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "endpoints still there", err
	})
}

// waitEndpoints waits for the Endpoints' ready and not-ready addresses, each
// given as sorted "hostname=ip" words.
func waitEndpoints(t *testing.T, client kubernetes.Interface, ns, name, ready, notReady string) {
	t.Helper()
	poll(t, fmt.Sprintf("endpoints %s/%s", ns, name), func(ctx context.Context) (string, error) {
		ep, err := client.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error(), nil
		}
		var r, n []string
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				r = append(r, a.Hostname+"="+a.IP)
			}
			for _, a := range s.NotReadyAddresses {
				n = append(n, a.Hostname+"="+a.IP)
			}
		}
		slices.Sort(r)
		slices.Sort(n)
		got := fmt.Sprintf("ready %q notReady %q", strings.Join(r, " "), strings.Join(n, " "))
		if want := fmt.Sprintf("ready %q notReady %q", ready, notReady); got != want {
			return got + ", want " + want, nil
		}
		return "", nil
	})
}

// waitSlices waits for the ready endpoints of the Service's slices: per
// address type, sorted "hostname=ip" words; types separated by " | ".
func waitSlices(t *testing.T, client kubernetes.Interface, ns, name, want string) {
	t.Helper()
	poll(t, fmt.Sprintf("endpointslices of %s/%s", ns, name), func(ctx context.Context) (string, error) {
		list, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return err.Error(), nil
		}
		byType := map[discoveryv1.AddressType][]string{}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready && e.Hostname != nil {
					byType[s.AddressType] = append(byType[s.AddressType], *e.Hostname+"="+e.Addresses[0])
				}
			}
		}
		var parts []string
		for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
			slices.Sort(byType[at])
			parts = append(parts, strings.Join(byType[at], " "))
		}
		if got := strings.Join(parts, " | "); got != want {
			return fmt.Sprintf("%q, want %q", got, want), nil
		}
		return "", nil
	})
}

// poll calls check until it reports no difference, failing the test after 60 s.
func poll(t *testing.T, what string, check func(context.Context) (string, error)) {
	t.Helper()
	var diff string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		diff, err = check(ctx)
		return diff == "" && err == nil, err
	})
	if err != nil {
		t.Fatalf("%s: %v: %s", what, err, diff)
	}
}
