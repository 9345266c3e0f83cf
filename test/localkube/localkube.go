// Package localkube runs real, named Kubernetes control planes on loopback for
// tests and the demo: etcd and kube-apiserver through controller-runtime's
// envtest, plus a kube-controller-manager beside each API server so that
// Endpoints, EndpointSlices, EndpointSlice mirroring, garbage collection,
// namespace deletion and ServiceAccounts behave as in a real cluster. There are
// no kubelets: every cluster gets one Ready Node object that pods can be bound to.
//
// The binaries come from $GLOBALMIRROR_KUBE_ASSETS, which `make tools` builds.
package localkube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AssetsEnv names the environment variable holding the directory with the etcd,
// kube-apiserver and kube-controller-manager binaries.
const AssetsEnv = "GLOBALMIRROR_KUBE_ASSETS"

// APIServerEnv names the environment variable holding a kube-apiserver to
// run in place of the assets' one: another Kubernetes release, for the
// version matrix (make test-compat). Everything else stays the assets'.
const APIServerEnv = "GLOBALMIRROR_KUBE_APISERVER"

// APIServersEnv names the environment variable listing the kube-apiservers
// of every release the harness built, "v1.33.13=/path/kube-apiserver ...":
// make sets it from KUBE_COMPAT_VERSIONS, for the tests that change
// release (Release).
const APIServersEnv = "GLOBALMIRROR_KUBE_APISERVERS"

// Release is the kube-apiserver of the release with minor version minor
// ("1.33") among $GLOBALMIRROR_KUBE_APISERVERS.
func Release(minor string) (string, error) {
	for _, entry := range strings.Fields(os.Getenv(APIServersEnv)) {
		version, path, _ := strings.Cut(entry, "=")
		if strings.HasPrefix(version, "v"+minor+".") {
			return path, nil
		}
	}
	return "", fmt.Errorf("localkube: no kube-apiserver %s in $%s=%q (make builds them: run the tests through make)", minor, APIServersEnv, os.Getenv(APIServersEnv))
}

// NodeName is the Node every cluster gets, Ready, for pods to be bound to.
const NodeName = "node-1"

// Options configure Start.
type Options struct {
	// Clusters are the names of the clusters to start, each a DNS label.
	Clusters []string
	// Dir holds the kubeconfigs (<Dir>/<name>.kubeconfig), the control plane
	// logs (<Dir>/<name>/*.log) and all state. Empty: a temporary directory
	// that Stop removes. A given Dir keeps its logs after Stop; its state and
	// kubeconfigs are removed.
	Dir string
	// APIServer is the kube-apiserver to run; empty means
	// $GLOBALMIRROR_KUBE_APISERVER, else the assets'.
	APIServer string
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// StopOnSignal stops every cluster and exits the process on SIGINT or
	// SIGTERM. Tests want this: an interrupted `go test` exits before any
	// t.Cleanup runs.
	StopOnSignal bool

	// ServiceCIDRs replaces the clusters' Service ranges (default
	// 10.96.0.0/16 and fd00:10:96::/108), e.g. for a benchmark with more
	// ClusterIP Services than a /16 holds. The first IPv4 range must start
	// at 10.96.0.0 (the kubernetes Service's 10.96.0.1).
	ServiceCIDRs string
	// RealNodes names the clusters that real kubelets join (test/node). Each
	// listens on NodeAddress instead of loopback, advertises it in the
	// `kubernetes` Endpoints and serves a certificate that also names the
	// `kubernetes` Service, as a kubeadm cluster's API server does, so that
	// pods reach it with their in-cluster configuration. Each runs a
	// kube-scheduler, and gets no stand-in Node: the kubelet registers its own.
	RealNodes []string
	// Replicated names the clusters that run three kube-apiservers on their
	// etcd behind one address, as a highly available control plane runs
	// behind its load balancer (replicas.go); Config, Kubeconfig and
	// Client reach them through it.
	Replicated []string
	// NodeAddress is an address of the node's network, which exists only in
	// the network namespace the test made (test/node); required with RealNodes.
	NodeAddress netip.Addr

	// RequestTimeout is the API servers' --request-timeout; zero: theirs
	// (a minute). A test makes it short to show that none of its own
	// requests grows past it.
	RequestTimeout time.Duration
	// Profiling serves the API servers' /debug/pprof: a benchmark collects
	// their garbage through it before each measured phase, so that no phase
	// pays for an earlier one's.
	Profiling bool

	// Controllers are the kube-controller-manager controllers to run
	// instead of the default set: a benchmark's world of hundreds of
	// thousands of objects kept both CPUs busy for many minutes in the
	// garbage collector (its graph) and the EndpointSlice mirroring
	// controller (each Service it syncs scans the namespace's slices).
	Controllers []string
}

// Cluster is one running cluster. Its fields are read-only; copy Config with
// rest.CopyConfig before changing it.
type Cluster struct {
	Name string
	// Config authenticates as a cluster admin (group system:masters).
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig equivalent to Config.
	Kubeconfig string
	Client     kubernetes.Interface
	// EtcdURL is the cluster's own etcd, for faults below the API server
	// (compaction).
	EtcdURL *url.URL
	// AuditLog is the API server's audit log (JSON lines) of a cluster
	// real nodes join: every pod created, with what admission said of it
	// (nodeAuditPolicy). Empty for the others.
	AuditLog string

	dir        string
	realNode   bool          // see Options.RealNodes
	replicated bool          // see Options.Replicated
	reqTimeout time.Duration // see Options.RequestTimeout
	profiling  bool          // see Options.Profiling
	kcmNames   []string      // see Options.Controllers
	apis       *envtest.APIServer
	replicas   []*envtest.APIServer // its other kube-apiservers, replicated
	front      *front               // the address in front of them, replicated
	kcm        *run.Process
	scheduler  *run.Process
	kcmHealthz string
	closers    []io.Closer // log files
}

// Env is a set of running clusters.
type Env struct {
	dir      string
	ownsDir  bool
	log      *slog.Logger
	clusters []*Cluster

	mu      sync.Mutex // guards etcds and closers while clusters start
	etcds   []*envtest.Etcd
	closers []io.Closer // etcd log files

	stopOnce sync.Once
	stopErr  error
}

// Start starts the clusters, concurrently, and returns once every one is ready:
// its API server answers /readyz, its kube-controller-manager is healthy and has
// created the `default` ServiceAccount, and its Node is Ready. On error nothing
// is left running.
func Start(ctx context.Context, opts Options) (env *Env, err error) {
	if err := validateNames(opts.Clusters); err != nil {
		return nil, err
	}
	for _, n := range opts.RealNodes {
		if !slices.Contains(opts.Clusters, n) {
			return nil, fmt.Errorf("localkube: real node for cluster %q, which is not asked for", n)
		}
		if !opts.NodeAddress.Is4() {
			return nil, fmt.Errorf("localkube: a real node's cluster %q needs an IPv4 NodeAddress", n)
		}
	}
	assets, err := findAssets()
	if err != nil {
		return nil, err
	}
	env = &Env{dir: opts.Dir, log: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))}
	if env.dir == "" {
		if env.dir, err = os.MkdirTemp("", "localkube-"); err != nil {
			return nil, err
		}
		env.ownsDir = true
	} else if env.dir, err = filepath.Abs(env.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(env.dir, 0o755); err != nil {
		return nil, err
	}
	register(env, opts.StopOnSignal)
	defer func() {
		if err != nil {
			err = errors.Join(err, env.Stop())
			env = nil
		}
	}()

	started := time.Now()
	bins, err := newBinaries(assets, cmp.Or(opts.APIServer, os.Getenv(APIServerEnv)), filepath.Join(env.dir, "bin"))
	if err != nil {
		return env, err
	}
	env.clusters = make([]*Cluster, len(opts.Clusters))
	for i, name := range opts.Clusters {
		env.clusters[i] = &Cluster{Name: name, dir: filepath.Join(env.dir, name), realNode: slices.Contains(opts.RealNodes, name),
			replicated: slices.Contains(opts.Replicated, name), kcmNames: opts.Controllers, reqTimeout: opts.RequestTimeout, profiling: opts.Profiling}
		if err := os.MkdirAll(env.clusters[i].dir, 0o755); err != nil {
			return env, err
		}
	}

	// One etcd per cluster: the API servers' bootstrap writes go to
	// separate processes instead of queueing in one shared through
	// --etcd-prefix, which starts slower.
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range env.clusters {
		g.Go(func() error {
			etcd, err := env.startEtcd(bins, filepath.Join(c.dir, "etcd"))
			if err != nil {
				return fmt.Errorf("cluster %s: %w", c.Name, err)
			}
			if err := env.startCluster(gctx, bins, c, etcd, opts.NodeAddress, cmp.Or(opts.ServiceCIDRs, serviceCIDRs)); err != nil {
				return fmt.Errorf("cluster %s: %w", c.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return env, err
	}
	env.log.Info("clusters ready", "clusters", opts.Clusters, "elapsed", time.Since(started).Round(time.Millisecond))
	return env, nil
}

// Cluster returns the named cluster, or nil if there is none.
func (e *Env) Cluster(name string) *Cluster {
	if i := slices.IndexFunc(e.clusters, func(c *Cluster) bool { return c.Name == name }); i >= 0 {
		return e.clusters[i]
	}
	return nil
}

// Clusters returns the clusters in the order they were asked for.
func (e *Env) Clusters() []*Cluster { return slices.Clone(e.clusters) }

// Dir is the directory holding kubeconfigs, logs and state.
func (e *Env) Dir() string { return e.dir }

// Stop stops every process and removes the state; it is safe to call more than
// once and from several goroutines.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		unregister(e)
		errs := make([]error, len(e.clusters))
		var wg sync.WaitGroup
		for i, c := range e.clusters {
			wg.Go(func() {
				if err := c.stop(); err != nil {
					errs[i] = fmt.Errorf("cluster %s: %w", c.Name, err)
				}
			})
		}
		wg.Wait()
		for _, etcd := range e.etcds {
			if err := etcd.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("etcd: %w", err))
			}
		}
		for _, c := range e.closers {
			_ = c.Close()
		}
		errs = append(errs, e.removeState())
		e.stopErr = errors.Join(errs...)
		e.log.Info("clusters stopped", "err", e.stopErr)
	})
	return e.stopErr
}

// removeState deletes everything but the logs of a caller-given Dir, or the
// whole temporary Dir.
func (e *Env) removeState() error {
	if e.ownsDir {
		return os.RemoveAll(e.dir)
	}
	errs := []error{os.RemoveAll(filepath.Join(e.dir, "bin"))}
	for _, c := range e.clusters {
		errs = append(errs,
			os.RemoveAll(filepath.Join(c.dir, "etcd")),
			os.RemoveAll(filepath.Join(c.dir, "pki")),
			os.Remove(filepath.Join(e.dir, c.Name+".kubeconfig")))
	}
	return errors.Join(slices.DeleteFunc(errs, func(err error) bool { return err == nil || errors.Is(err, os.ErrNotExist) })...)
}

func (c *Cluster) stop() error {
	var errs []error
	if c.scheduler != nil {
		errs = append(errs, c.scheduler.StopWithin(10*time.Second))
	}
	if c.kcm != nil {
		errs = append(errs, c.kcm.StopWithin(10*time.Second))
	}
	if c.apis != nil {
		errs = append(errs, c.apis.Stop())
	}
	for _, r := range c.replicas {
		errs = append(errs, r.Stop())
	}
	if c.front != nil {
		c.front.close()
	}
	for _, f := range c.closers {
		_ = f.Close()
	}
	return errors.Join(errs...)
}

func validateNames(names []string) error {
	if len(names) == 0 {
		return errors.New("localkube: no clusters asked for")
	}
	for i, n := range names {
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return fmt.Errorf("localkube: cluster name %q: %v", n, errs)
		}
		if slices.Index(names, n) < i {
			return fmt.Errorf("localkube: cluster %q asked for twice", n)
		}
	}
	return nil
}

// findAssets fails, never skips, when the control plane binaries are missing:
// a test that cannot start its clusters has not passed.
func findAssets() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		return "", fmt.Errorf("localkube: $%s is not set; run `make tools` (and run tests through make, which sets it)", AssetsEnv)
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("localkube: %s missing in %s=%s; run `make tools`: %w", bin, AssetsEnv, dir, err)
		}
	}
	return dir, nil
}

// logFile opens <cluster dir>/<component>.log for a child's output.
func logFile(dir, component string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, component+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}
