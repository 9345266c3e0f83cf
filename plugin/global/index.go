package global

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// A running index (the feeds, source's index of what they delivered, and the
// answer sets built from it: a dnsController) belongs to the process, not to
// the CoreDNS instance that started it: every
// `global` whose stanza asks for the same feeds shares one, in any server
// block and across reloads. A reload (the reload plugin, SIGUSR1) that leaves
// a stanza's feeds as they were so asks nothing of the API server and answers
// completely from its first query; the index stops when the last instance
// holding it has shut down, so its memory is doubled only while a changed
// stanza's new index is built beside the old.

// runningIndex is one running dnsController and the references held on it.
type runningIndex struct {
	key   string
	ctrl  *dnsController
	refs  int // under indexes' lock
	start sync.Once
	stop  context.CancelFunc
	ctx   context.Context
}

var indexes = struct {
	sync.Mutex
	byKey map[string]*runningIndex
	// pending are the references instances took while they were set up,
	// until their servers listen: a reload that fails after them discards
	// its instance without shutting it down, so they are given back when the
	// old instance goes on (its OnRestartFailed) or another one starts.
	pending []pendingRef
}{byKey: map[string]*runningIndex{}}

type pendingRef struct {
	owner *instance
	ix    *runningIndex
}

// acquireIndex returns a reference for owner to the index of key, running
// already (reused) or made now by build and not yet started.
func acquireIndex(owner *instance, key string, build func() (*dnsController, error)) (ix *runningIndex, reused bool, err error) {
	indexes.Lock()
	defer indexes.Unlock()
	if ix = indexes.byKey[key]; ix == nil {
		ctrl, err := build()
		if err != nil {
			return nil, false, err
		}
		ctx, stop := context.WithCancel(withLogger(context.Background()))
		ix = &runningIndex{key: key, ctrl: ctrl, ctx: ctx, stop: stop}
		indexes.byKey[key] = ix
		indexesGauge.Inc()
	} else {
		reused = true
	}
	ix.refs++
	indexReferencesGauge.Inc()
	indexes.pending = append(indexes.pending, pendingRef{owner, ix})
	return ix, reused, nil
}

// run starts the index's feeds and loop, once however many hold it.
func (ix *runningIndex) run() {
	ix.start.Do(func() { ix.ctrl.start(ix.ctx) })
}

// release gives a reference back; the last one stops the index.
func (ix *runningIndex) release() {
	indexes.Lock()
	defer indexes.Unlock()
	ix.releaseLocked()
}

func (ix *runningIndex) releaseLocked() {
	indexReferencesGauge.Dec()
	if ix.refs--; ix.refs > 0 {
		return
	}
	ix.stop()
	if indexes.byKey[ix.key] == ix {
		delete(indexes.byKey, ix.key)
		indexesGauge.Dec()
	}
}

// startedPending: owner listens, and will give its references back when it
// shuts down; those of any other instance still pending are of one that
// never started (a failed reload), and are given back now. A nil owner
// gives back every pending reference.
func startedPending(owner *instance) {
	indexes.Lock()
	defer indexes.Unlock()
	for _, p := range indexes.pending {
		if p.owner != owner {
			p.ix.releaseLocked()
		}
	}
	indexes.pending = nil
}

// indexKey says which feeds a stanza asks for, and so which stanzas share
// an index: the API server and the credentials it is reached with, and what
// the index holds (namespaces, suffix, local selector, views). The zones,
// TTL and fallthrough only shape answers, and may change without a new index.
// A token read from a file counts by its account, not its text: a rotated
// token keeps the index, another account's builds a new one.
func indexKey(cfg *config, api *rest.Config) string {
	namespaces := slices.Sorted(slices.Values(cfg.namespaces))
	opts := cfg.controllerOptions()
	id := struct {
		Host, APIPath                string
		Username, Password           string
		BearerToken, BearerTokenFile string
		Impersonate                  rest.ImpersonationConfig
		TLS                          rest.TLSClientConfig
		AuthProvider, ExecProvider   any
		Namespaces                   []string
		Suffix, LocalSelector        string
		PTRZone, ClusterID           string
		Clusterset                   bool
	}{
		Namespaces: namespaces, Suffix: cfg.suffix, LocalSelector: "none",
		PTRZone: opts.ptrZone, Clusterset: opts.clusterset, ClusterID: opts.clusterID,
	}
	if cfg.localSelector != nil {
		id.LocalSelector = "selector " + cfg.localSelector.String()
	}
	if api != nil {
		id.Host, id.APIPath = api.Host, api.APIPath
		id.Username, id.Password = api.Username, api.Password
		id.BearerToken, id.BearerTokenFile = api.BearerToken, api.BearerTokenFile
		if api.BearerTokenFile != "" {
			// client-go reads the file again as it runs: the kubelet
			// replaces a projected token about every 48 minutes, and a
			// token of the same account reaches the same feeds.
			id.BearerToken = tokenAccount(api.BearerToken)
		}
		id.Impersonate, id.TLS = api.Impersonate, api.TLSClientConfig
		id.TLS.NextProtos = nil // set by kubeclient, not by the kubeconfig
		id.AuthProvider, id.ExecProvider = api.AuthProvider, api.ExecProvider
	}
	b, err := json.Marshal(id)
	if err != nil {
		panic("global: index key: " + err.Error()) // plain data: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// tokenAccount is whom a bearer token names: a JWT's issuer and subject (a
// service account's token names its account there), read, not verified
// (the API server verifies it); the token itself where it is no JWT.
func tokenAccount(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return token
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return token
	}
	var claims struct {
		Issuer  string `json:"iss"`
		Subject string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Subject == "" {
		return token
	}
	return "account " + claims.Issuer + " " + claims.Subject
}
