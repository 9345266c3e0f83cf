package global

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/coredns/caddy"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// listeningInstance makes gs the plugins of one CoreDNS instance whose
// servers listen.
func listeningInstance(gs ...*Global) *instance {
	s := &instance{globals: gs}
	for _, g := range gs {
		g.inst = s
	}
	s.listening.Store(true)
	return s
}

// TestReadyOnceListening: a plugin whose index is built is ready only once
// CoreDNS's servers of its own instance listen (caddy's
// InstanceStartupEvent), not another instance's.
func TestReadyOnceListening(t *testing.T) {
	t.Cleanup(func() { serving.Store(nil) })
	h := startHarness(t, defaultConfig(), testWorld()...)
	c := caddy.NewTestController("dns", "global")
	joinInstance(c, h.g)
	if h.g.Ready() {
		t.Fatal("ready, the index built, before CoreDNS's servers listen")
	}
	for _, event := range []caddy.EventName{caddy.InstanceStartupEvent, caddy.ShutdownEvent} {
		caddy.EmitEvent(event, &caddy.Instance{Storage: map[any]any{}})
	}
	caddy.EmitEvent(caddy.ShutdownEvent, &caddy.Instance{Storage: map[any]any{instanceKey{}: c.Get(instanceKey{})}})
	if h.g.Ready() {
		t.Fatal("ready after another instance started, or another event")
	}
	caddy.EmitEvent(caddy.InstanceStartupEvent, &caddy.Instance{Storage: map[any]any{instanceKey{}: c.Get(instanceKey{})}})
	if !h.g.Ready() {
		t.Fatal("not ready, the index built, once its instance's servers listen")
	}
}

// notSynced is a plugin whose index has not synced.
func notSynced(t *testing.T) *Global {
	g, err := newFromFake(defaultConfig(), fake.NewClientset())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestReadyForEveryBlock: the ready plugin asks one `global` of an instance
// (it keeps one plugin per name), which answers for all of them.
func TestReadyForEveryBlock(t *testing.T) {
	built := startHarness(t, defaultConfig(), testWorld()...).g
	unbuilt := notSynced(t)
	listeningInstance(built, unbuilt)
	if built.Ready() || unbuilt.Ready() {
		t.Fatal("ready while another server block's index is not built")
	}
	unbuilt.ctrl.markBuilt()
	if !built.Ready() || !unbuilt.Ready() {
		t.Fatal("not ready, every block's index built")
	}
}

// TestReadyWhileHandingOver: during a reload the new instance is ready while
// the old one answers completely, until it gives up waiting for its own
// indexes; listening, it is ready only when complete.
func TestReadyWhileHandingOver(t *testing.T) {
	old := listeningInstance(startHarness(t, defaultConfig(), testWorld()...).g)
	g := notSynced(t)
	s := &instance{globals: []*Global{g}}
	g.inst = s
	if g.Ready() {
		t.Fatal("ready at the first start, the index not built")
	}
	s.predecessor.Store(old)
	if !g.Ready() {
		t.Fatal("not ready during a reload while the old instance answers completely")
	}
	s.gaveUp.Store(true)
	if g.Ready() {
		t.Fatal("ready after giving up on an index that is not complete")
	}
	s.listening.Store(true)
	s.predecessor.Store(nil)
	if g.Ready() {
		t.Fatal("ready, listening with an index that is not complete")
	}
	g.ctrl.markBuilt()
	if !g.Ready() {
		t.Fatal("not ready, listening and complete")
	}
}

// TestAnIndexIsSharedUntilItsLastHolderLeaves: stanzas asking for the same
// feeds share one index, which stops when the last reference goes; a
// reference an instance took and never started with (a failed reload) is
// given back when another instance starts or the old one goes on.
func TestAnIndexIsSharedUntilItsLastHolderLeaves(t *testing.T) {
	builds := 0
	build := func() (*dnsController, error) {
		builds++
		g, err := newFromFake(defaultConfig(), fake.NewClientset())
		if err != nil {
			return nil, err
		}
		return g.ctrl, nil
	}
	running := func(ix *runningIndex) bool { return ix.ctx.Err() == nil }
	old, reloaded, failed := &instance{}, &instance{}, &instance{}

	a, reused, err := acquireIndex(old, "a", build)
	if err != nil || reused {
		t.Fatalf("first: reused %v, %v", reused, err)
	}
	startedPending(old)
	b, reused, _ := acquireIndex(reloaded, "a", build)
	if !reused || b != a || builds != 1 {
		t.Fatalf("same key: reused %v, same index %v, %d builds", reused, a == b, builds)
	}
	startedPending(reloaded)
	a.release() // the old instance shuts down
	if !running(a) {
		t.Fatal("stopped while the reloaded instance holds it")
	}

	c, _, _ := acquireIndex(failed, "c", build)
	d, _, _ := acquireIndex(failed, "a", build)
	startedPending(reloaded) // the reload to `failed` failed; reloaded goes on
	if running(c) || !running(d) {
		t.Fatalf("after a failed reload: its own index running %v, the shared one running %v", running(c), running(d))
	}
	if _, reused, _ := acquireIndex(old, "c", build); reused {
		t.Fatal("a stopped index was handed out again")
	}
	startedPending(old)
	b.release()
	if running(a) {
		t.Fatal("running after its last holder left")
	}
	indexes.Lock()
	defer indexes.Unlock()
	if _, ok := indexes.byKey["a"]; ok {
		t.Fatal("a stopped index is still registered")
	}
	for _, ix := range indexes.byKey {
		ix.stop()
	}
	clear(indexes.byKey)
}

// TestIndexKeySaysWhichFeeds: what shapes only answers keeps the index; what
// the feeds read, or whom they ask, does not.
func TestIndexKeySaysWhichFeeds(t *testing.T) {
	api := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "a"}
	stanza := func(options string) *config {
		c := caddy.NewTestController("dns", "global cluster.local {\n"+options+"\n}")
		cfg, err := parse(c)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	base := indexKey(stanza("namespaces a b"), api)
	for _, same := range []string{"namespaces b a\nttl 30", "namespaces a b\nfallthrough", "namespaces a b\nhandover_timeout 5s"} {
		if indexKey(stanza(same), api) != base {
			t.Errorf("%q: a new index", same)
		}
	}
	for _, other := range []string{"namespaces a", "namespaces a b\nsuffix -all", "namespaces a b\nlocal_selector none",
		"namespaces a b\nreverse", "namespaces a b\nclusterset east"} {
		if indexKey(stanza(other), api) == base {
			t.Errorf("%q: the same index", other)
		}
	}
	for _, other := range []*rest.Config{{Host: "https://127.0.0.1:6444", BearerToken: "a"}, {Host: api.Host, BearerToken: "b"}, nil} {
		if indexKey(stanza("namespaces a b"), other) == base {
			t.Errorf("%+v: the same index", other)
		}
	}

	// A token read from a file (in-cluster, a kubeconfig's tokenFile) counts
	// by its account: the kubelet rotates a projected token, client-go reads
	// the file again.
	inFile := func(token string) *rest.Config {
		return &rest.Config{Host: api.Host, BearerToken: token, BearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}
	}
	coredns := indexKey(stanza("namespaces a b"), inFile(jwt(t, "system:serviceaccount:kube-system:coredns", 1)))
	if indexKey(stanza("namespaces a b"), inFile(jwt(t, "system:serviceaccount:kube-system:coredns", 2))) != coredns {
		t.Error("a rotated token of the same account: a new index")
	}
	for what, other := range map[string]*rest.Config{
		"another account":         inFile(jwt(t, "system:serviceaccount:kube-system:other", 1)),
		"another token, no file":  {Host: api.Host, BearerToken: jwt(t, "system:serviceaccount:kube-system:coredns", 2)},
		"an opaque token in file": inFile("opaque"),
	} {
		if indexKey(stanza("namespaces a b"), other) == coredns {
			t.Errorf("%s: the same index", what)
		}
	}
}

// jwt is an unsigned token naming subject, issued at iat.
func jwt(t *testing.T, subject string, iat int) string {
	t.Helper()
	claims, err := json.Marshal(map[string]any{"iss": "https://kubernetes.default.svc.cluster.local", "sub": subject, "iat": iat})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + ".c2ln"
}
