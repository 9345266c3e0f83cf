// Package integration runs source's feeds and index against a real API
// server: lists that stream (sendInitialEvents) and lists in pages must build
// the same index, and the watch that follows either must keep it.
package integration

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/source"
	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/fixture"
	"github.com/globalmirror/globalmirror/test/localkube"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

var env *localkube.Env

func TestMain(m *testing.M) { os.Exit(localkube.Main(m, &env, "source")) }

const ns = "index"

// create creates fixture objects (Services, EndpointSlices) in their
// namespaces.
func create(t *testing.T, c kubernetes.Interface, objs ...any) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Service:
			o.UID, o.ResourceVersion = "", ""
			_, err = c.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *discoveryv1.EndpointSlice:
			o.UID, o.ResourceVersion = "", ""
			_, err = c.DiscoveryV1().EndpointSlices(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// startSource starts a Source on the shared cluster, its feeds counted into
// fs; paged: through an API server that does not stream lists.
func startSource(t *testing.T, c kubernetes.Interface, fs *feeds, paged bool) *source.Source {
	t.Helper()
	sel, _ := labels.Parse(aggregate.DefaultLocalSelector)
	// API: the feeds' own clients, which leave watched objects encoded
	// until the index says it does not hold them.
	cfg := env.Cluster("source").Config
	if paged {
		cfg = refusingStreamedLists(cfg)
	}
	src, err := source.New(source.Config{Client: c, API: cfg, Namespaces: []string{ns}, LocalSelector: sel, Counters: fs.counters})
	if err != nil {
		t.Fatal(err)
	}
	src.Start(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if !src.WaitForSync(ctx) {
		t.Fatal("did not sync")
	}
	return src
}

func TestListsThatStreamAndListsInPagesBuildTheSameIndex(t *testing.T) {
	if env == nil {
		t.Skip("needs a control plane (not -short)")
	}
	c := env.Cluster("source").Client
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	peer := fixture.Port{Name: "peer", Port: 7000, Protocol: corev1.ProtocolTCP}
	local := fixture.LocalService(ns, "db", peer)
	mirror := fixture.HeadlessMirror(ns, "db", "east", peer)
	create(t, c, local, mirror,
		fixture.Slice(local, "db-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer), fixture.Ready("db-0", "10.0.0.1")),
		fixture.Slice(mirror, "db-east-1", discoveryv1.AddressTypeIPv4, fixture.SlicePorts(peer),
			fixture.Ready("db-0", "10.1.0.1"), fixture.Ready("db-1", "10.1.0.2"), fixture.NotReady("db-2", "10.1.0.3")))
	_, up := fixture.EndpointMirror(ns, "db-0-east", "east", mirror.Name, true)
	_, down := fixture.EndpointMirror(ns, "db-1-east", "east", mirror.Name, false)
	create(t, c, up, down)
	// More than a page (500) of Services nothing reads, so that the paged
	// list takes pages.
	for i := range 510 {
		create(t, c, fixture.Service(ns, fmt.Sprintf("other-%d", i), map[string]string{"app": "other"}, corev1.ClusterIPNone))
	}

	streamedFeeds, pagedFeeds := &feeds{}, &feeds{}
	streamed, paged := startSource(t, c, streamedFeeds, false), startSource(t, c, pagedFeeds, true)
	// Lists stream where the API server offers it: a watch of its own that
	// asks for a streamed list says whether it does.
	path := []kubeclient.Path{kubeclient.Paged}
	if streams, err := localkube.StreamsListsAsReleased(t.Context(), c); err != nil {
		t.Fatal(err)
	} else if streams {
		path = []kubeclient.Path{kubeclient.Streamed}
	}
	if got := streamedFeeds.paths(); !slices.Equal(got, path) {
		t.Errorf("the feeds' lists took %v, want %v", got, path)
	}
	if got := pagedFeeds.paths(); !slices.Equal(got, []kubeclient.Path{kubeclient.Paged}) {
		t.Errorf("lists from an API server that does not stream them took %v", got)
	}
	ready := func(src *source.Source) map[string]bool {
		out := map[string]bool{}
		for _, e := range aggregate.Aggregate(src.Input(source.Key{Namespace: ns, Base: "db"})).Endpoints {
			out[e.Hostname] = e.Ready
		}
		return out
	}
	// db-1-east's gateway is down: its endpoint mirror says not ready.
	want := map[string]bool{"db-0": true, "db-0-east": true, "db-1-east": false, "db-2-east": false}
	for name, src := range map[string]*source.Source{"streamed": streamed, "paged": paged} {
		if got := ready(src); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: endpoints %v, want %v", name, got, want)
		}
		if svc := src.Service(ns, "other-0"); svc != nil {
			t.Errorf("%s: holds a Service nothing reads", name)
		}
	}

	// The watch after either list keeps the index: the gateway comes back.
	down.Endpoints[0].Conditions.Ready = new(true)
	cur, err := c.DiscoveryV1().EndpointSlices(ns).Get(t.Context(), down.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Endpoints = down.Endpoints
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Update(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want["db-1-east"] = true
	for name, src := range map[string]*source.Source{"streamed": streamed, "paged": paged} {
		if err := await.Poll(t.Context(), 10*time.Second, 20*time.Millisecond, func(context.Context) string {
			if got := ready(src); !reflect.DeepEqual(got, want) {
				return fmt.Sprintf("%s: endpoints %v, want %v", name, got, want)
			}
			return ""
		}); err != nil {
			t.Error(err)
		}
	}
}
