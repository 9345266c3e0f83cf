package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/bench"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// corefileProxied is corefileGlobalOnly through the test's proxy of the
// API server (apiProxy).
var corefileProxied = run.Corefile(`
    global cluster.local {
        kubeconfig {$PROXY_KUBECONFIG}
        namespaces {$NS}
    }
`)

// TestReadyMeansComplete: a CoreDNS whose global plugin reports ready
// answers, that moment, every global written before its lists were read
// (the last one written just before it started, or while the API server
// held its lists), whichever way they came (streamed or paged), and however
// long they took: while the API server holds its lists past the plugin's
// startup timeout, /ready is not 200 and global names get SERVFAIL, never a
// partial answer.
func TestReadyMeansComplete(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := scenario.New(t, env.Cluster("source"))
	source, ctx := s.Source, t.Context()

	// Linkerd's full shape of one linked cluster: per base a headless
	// mirror and its slice, and an endpoint mirror (a Service and its
	// slice) per pod; thousands of every feed's objects.
	const n = 1000
	began := time.Now()
	w := eastWorld(t, s, n, true)
	t.Logf("wrote %d bases of Linkerd's shape (%d mirrored services) in %v", n, n*(1+bench.Pods), time.Since(began).Round(time.Millisecond))
	bases := n
	// addBase writes one more base, its headless mirror's slice last: the
	// object without which its global has no address.
	addBase := func() int {
		i := bases
		if err := w.LoadEndpointMirrors(ctx, source.Client, i, i+1, 1); err != nil {
			t.Fatal(err)
		}
		if err := w.Load(ctx, source.Client, i, i+1, 1); err != nil {
			t.Fatal(err)
		}
		bases++
		return i
	}
	answer := func(i int) string { return globalAnswer(w, i) }

	// complete checks a CoreDNS the moment it reported ready: base last,
	// written just before it started, over UDP and TCP; as many globals as
	// exist; each of them.
	complete := func(what string, c *run.CoreDNS, last int) {
		t.Helper()
		name := s.FQDN(bench.Global(last))
		for _, net := range []string{"udp", "tcp"} {
			if got, want := dnsq.Answer(net, c.Addr, name, dns.TypeA), answer(last); got != want {
				t.Errorf("%s: ready, and %s over %s answers %q, want %q", what, name, net, got, want)
			}
		}
		if got, err := run.MetricSum(c.MetricsURL, "coredns_global_globals"); err != nil || got != float64(bases) {
			t.Errorf("%s: ready, answering for %v globals (%v), want %d", what, got, err, bases)
		}
		wrong := 0
		for i := range bases {
			name := s.FQDN(bench.Global(i))
			if got, want := dnsq.Answer("udp", c.Addr, name, dns.TypeA), answer(i); got != want {
				if wrong++; wrong == 1 {
					t.Errorf("%s: ready, and %s answers %q, want %q", what, name, got, want)
				}
			}
		}
		if wrong > 1 {
			t.Errorf("%s: %d of %d globals answered wrong", what, wrong, bases)
		}
	}
	// lists checks which path the lists of c took, by its lists counter.
	lists := func(what string, c *run.CoreDNS, path, not string) {
		t.Helper()
		m, err := run.Scrape(c.MetricsURL)
		if err != nil {
			t.Fatal(err)
		}
		for _, resource := range []string{"services", "endpointslices"} {
			r := `resource="` + resource + `"`
			if got, other := m.Sum("coredns_global_lists_total", r, `path="`+path+`"`), m.Sum("coredns_global_lists_total", r, `path="`+not+`"`); got == 0 || other != 0 {
				t.Errorf("%s: %s listed %v times %s, %v times %s; want %s only", what, resource, got, path, other, not, path)
			}
		}
	}
	start := func(corefile string, env ...string) *run.CoreDNS {
		t.Helper()
		c, err := s.RunCoreDNS(ctx, run.CoreDNSOptions{Corefile: corefile, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	client := &http.Client{Timeout: time.Second}
	ready := func(c *run.CoreDNS) bool {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", c.Ports["READY_PORT"]))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	awaitReady := func(what string, c *run.CoreDNS) {
		t.Helper()
		s.Eventually(what+": /ready 200", func(context.Context) string {
			if !ready(c) {
				return "not ready"
			}
			return ""
		})
	}

	// Streamed where the API server offers it; paged through a proxy that
	// refuses streamed lists, as Kubernetes 1.31 and 1.33 do.
	direct, directNot := "paged", "streamed"
	if streams, err := localkube.StreamsListsAsReleased(ctx, source.Client); err != nil {
		t.Fatal(err)
	} else if streams {
		direct, directNot = directNot, direct
	}
	paged := startAPIProxy(t, source, true)
	for _, v := range []struct {
		what, path, not, corefile string
		env                       []string
	}{
		{what: "direct", path: direct, not: directNot, corefile: corefileGlobalOnly},
		{what: "paged", path: "paged", not: "streamed", corefile: corefileProxied, env: []string{"PROXY_KUBECONFIG=" + paged.kubeconfig}},
	} {
		last := addBase()
		c := start(v.corefile, v.env...)
		awaitReady(v.what, c)
		complete(v.what, c, last)
		lists(v.what, c, v.path, v.not)
		c.Stop()
	}
	// The list API's lists ask for one response, which the API server
	// serves from its watch cache; its pages it would serve from etcd.
	if paged.lists.Load() == 0 || paged.limited.Load() != 0 {
		t.Errorf("paged: %d lists, %d of them asking for pages (a limit); want every list in one response", paged.lists.Load(), paged.limited.Load())
	}

	// A slow API server: every list held past the plugin's startup timeout,
	// until the test lets it through. CoreDNS starts serving; /ready waits.
	slow := startAPIProxy(t, source, false)
	slow.hold()
	c := start(corefileProxied, "PROXY_KUBECONFIG="+slow.kubeconfig)
	const gaveUp = "starting server before the first sync"
	s.Eventually("slow: CoreDNS serves before the first sync", func(context.Context) string {
		if ready(c) {
			t.Fatalf("slow: ready while the API server holds every list")
		}
		if !strings.Contains(c.Log(1<<20), gaveUp) {
			return "CoreDNS has not logged " + gaveUp
		}
		if got := dnsq.Answer("udp", c.Addr, s.FQDN(bench.Global(0)), dns.TypeA); got != "SERVFAIL +soa" {
			return fmt.Sprintf("%s: %q, want SERVFAIL once the servers listen", bench.Global(0), got)
		}
		return ""
	})
	// A global written now exists by the time the held lists are answered.
	last := addBase()
	s.Quiet("slow: while the API server holds every list", 2*time.Second, func(context.Context) string {
		if ready(c) {
			return "ready"
		}
		for _, net := range []string{"udp", "tcp"} {
			if got := dnsq.Answer(net, c.Addr, s.FQDN(bench.Global(0)), dns.TypeA); got != "SERVFAIL +soa" {
				return fmt.Sprintf("%s over %s: %q, want SERVFAIL", bench.Global(0), net, got)
			}
		}
		return ""
	})
	if slow.lists.Load() == 0 {
		t.Fatalf("slow: CoreDNS sent no list to the API server")
	}
	slow.release()
	awaitReady("slow", c)
	complete("slow", c, last)
	c.Stop()
}

// TestReadyAfterReload: a CoreDNS reloaded, by the reload plugin and by
// SIGUSR1, is ready again, its new global plugin answering (its TTL says
// which instance answers).
func TestReadyAfterReload(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := scenario.New(t, env.Cluster("source"))
	east := env.Cluster("east")
	s.Workload(east, "db", 1, "198.51.100.0/24")
	s.Link(east)
	corefile := func(ttl int) string {
		return run.Corefile(fmt.Sprintf(`
    reload 2s 1s
    global cluster.local {
        kubeconfig {$SOURCE_KUBECONFIG}
        namespaces {$NS}
        ttl %d
    }
`, ttl))
	}
	c := s.StartCoreDNS(corefile(5))
	global := s.FQDN("db-global")
	want := dnsq.NoError(s.ClusterIP("db-0-east"))
	s.AnswerBoth(c.Addr, global, dns.TypeA, want)
	path := filepath.Join(filepath.Dir(c.LogPath), "Corefile")
	// The reload plugin first: a reload by SIGUSR1 drops every caddy event
	// hook, and the reload plugin registers its own only once per process.
	for i, reload := range []func() error{
		func() error { return nil }, // the reload plugin reads the Corefile again within 3 s
		func() error { return syscall.Kill(c.PID(), syscall.SIGUSR1) },
	} {
		ttl := 6 + i
		if err := os.WriteFile(path, []byte(corefile(ttl)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := reload(); err != nil {
			t.Fatal(err)
		}
		s.Eventually(fmt.Sprintf("reload %d", i+1), func(context.Context) string {
			if n := strings.Count(c.Log(1<<20), "Reloading complete"); n <= i {
				return fmt.Sprintf("%d reloads complete", n)
			}
			return ""
		})
		s.Eventually(fmt.Sprintf("reload %d: ready", i+1), func(context.Context) string {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", c.Ports["READY_PORT"]))
			if err != nil {
				return err.Error()
			}
			resp.Body.Close()
			return map[bool]string{true: "", false: resp.Status}[resp.StatusCode == http.StatusOK]
		})
		for _, net := range []string{"udp", "tcp"} {
			r, err := dnsq.Ask(net, c.Addr, global, dns.TypeA, 0)
			if got := dnsq.Summary(r, err); got != want || r.Answer[0].Header().Ttl != uint32(ttl) {
				t.Fatalf("reload %d: ready, and %s over %s answers %q (TTL %v), want %q with TTL %d", i+1, global, net, got, r, want, ttl)
			}
		}
	}
}

// apiProxy stands between CoreDNS and a cluster's API server, which it
// reaches as the cluster's admin: an API server that does not stream lists
// (noStreams: it refuses them, 422, as Kubernetes 1.31 and 1.33 do), or one
// slow to list (hold: every list waits until release). Watches pass.
type apiProxy struct {
	kubeconfig string
	// tokenFile is the kubeconfig's tokenFile: a service account's token,
	// which the proxy does not send on (it authenticates as the cluster's
	// admin), so that a test may rotate it (rotateToken).
	tokenFile string
	noStreams bool
	// lists counts the lists asked for; limited, those asking for pages;
	// watches, the watches (streamed lists included) of Services and
	// EndpointSlices open now.
	lists, limited, watches atomic.Int64

	mu      sync.Mutex
	holding chan struct{} // closed by release; nil: lists pass
}

func startAPIProxy(t *testing.T, c *localkube.Cluster, noStreams bool) *apiProxy {
	t.Helper()
	target, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{noStreams: noStreams}
	// Every request, a watch included, ends once the proxy stops:
	// httptest's Close waits for the requests in flight, and a CoreDNS that
	// still runs opens a new watch as soon as its connection is closed, which
	// the API server would hold open for up to an hour.
	stopped, stop := context.WithCancel(context.Background())
	forward := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Del("Authorization")
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(stopped, cancel)()
		r = r.WithContext(ctx)
		q := r.URL.Query()
		watch := q.Get("watch") == "true"
		streamed := localkube.IsStreamedList(r)
		if (watch || streamed) && (strings.HasSuffix(r.URL.Path, "/services") || strings.HasSuffix(r.URL.Path, "/endpointslices")) {
			p.watches.Add(1)
			defer p.watches.Add(-1)
		}
		if streamed && p.noStreams {
			localkube.RefuseStreamedList(w)
			return
		}
		if streamed || !watch {
			p.lists.Add(1)
			if l := q.Get("limit"); l != "" && l != "0" {
				p.limited.Add(1)
			}
			p.mu.Lock()
			held := p.holding
			p.mu.Unlock()
			if held != nil {
				select {
				case <-held:
				case <-r.Context().Done():
					return
				}
			}
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		stop()
		srv.CloseClientConnections()
		srv.Close()
	})
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: srv.URL}
	p.tokenFile = filepath.Join(t.TempDir(), "token")
	p.rotateToken(t, 1)
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{TokenFile: p.tokenFile}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	p.kubeconfig = filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return p
}

// rotateToken writes the token file anew, as the kubelet replaces a
// projected service-account token: a token of the same account, issued at
// iat.
func (p *apiProxy) rotateToken(t *testing.T, iat int) {
	t.Helper()
	claims, err := json.Marshal(map[string]any{"iss": "https://kubernetes.default.svc.cluster.local",
		"sub": "system:serviceaccount:kube-system:coredns", "iat": iat, "exp": iat + 3600})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	if err := os.WriteFile(p.tokenFile, []byte(enc([]byte(`{"alg":"RS256"}`))+"."+enc(claims)+".c2ln"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// hold makes every list from now on wait until release.
func (p *apiProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = make(chan struct{})
}

// release lets every list held, and every list after, through.
func (p *apiProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.holding)
	p.holding = nil
}
