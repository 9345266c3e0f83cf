package localkube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// A replicated cluster (Options.Replicated) runs three kube-apiservers on its
// etcd, with one serving certificate, one client CA and one service-account
// key and issuer, so that any of them takes what another issued; its clients
// reach them through one address (front), as a highly available control
// plane's clients reach it through a load balancer. kube-controller-manager
// stays on the first, as a kubeadm node's talks to its own.

// replicas is how many kube-apiservers a replicated cluster runs.
const replicas = 3

// startReplicas starts c's other kube-apiservers beside c.apis, which runs,
// and the address in front of all of them.
func (c *Cluster) startReplicas(nodeAddr netip.Addr, serviceRanges string) error {
	backends := []string{net.JoinHostPort(c.apis.SecureServing.Address, c.apis.SecureServing.Port)}
	issuer := c.apis.SecureServing.URL("https", "/").String()
	for i := 1; i < replicas; i++ {
		name := "kube-apiserver-" + strconv.Itoa(i)
		out, err := logFile(c.dir, name)
		if err != nil {
			return err
		}
		c.closers = append(c.closers, out)
		r := &envtest.APIServer{
			Path:         c.apis.Path,
			CertDir:      filepath.Join(c.dir, "pki-"+strconv.Itoa(i)),
			EtcdURL:      c.apis.EtcdURL,
			StartTimeout: startTimeout,
			StopTimeout:  10 * time.Second,
			Out:          out,
			Err:          out,
		}
		if err := copyDir(c.apis.CertDir, r.CertDir); err != nil {
			return err
		}
		r.SecureServing.CA, r.SecureServing.Authn = c.apis.SecureServing.CA, c.apis.SecureServing.Authn
		if err := c.configureAPIServer(r, nodeAddr, serviceRanges); err != nil {
			return err
		}
		r.Configure().Set("service-account-issuer", issuer)
		if err := r.Start(); err != nil {
			return fmt.Errorf("%s: %w (log: %s)", name, err, filepath.Join(c.dir, name+".log"))
		}
		c.replicas = append(c.replicas, r)
		backends = append(backends, net.JoinHostPort(r.SecureServing.Address, r.SecureServing.Port))
	}
	f, err := startFront(backends)
	if err != nil {
		return err
	}
	c.front = f
	return nil
}

// APIServers is how many kube-apiservers the cluster runs.
func (c *Cluster) APIServers() int { return 1 + len(c.replicas) }

// RestartAPIServerAt restarts the cluster's i-th kube-apiserver (0 is the
// one a cluster that is not replicated has): killed as StopAPIServer kills
// it, started again on its address after pause, and ready, asked itself,
// before it returns. Restarting each in turn is a control plane's rolling
// upgrade.
func (c *Cluster) RestartAPIServerAt(ctx context.Context, i int, pause time.Duration) error {
	apis := c.apis
	if i > 0 {
		apis = c.replicas[i-1]
	}
	if err := stopAPIServer(apis); err != nil {
		return err
	}
	time.Sleep(pause)
	if err := apis.Start(); err != nil {
		return fmt.Errorf("kube-apiserver %d: %w", i, err)
	}
	own := rest.CopyConfig(c.Config)
	own.Host = apis.SecureServing.URL("https", "").String()
	client, err := kubernetes.NewForConfig(own)
	if err != nil {
		return err
	}
	return waitAPIReady(ctx, client)
}

// front is one address in front of a cluster's kube-apiservers: each
// connection it accepts goes to the next of them that accepts it in turn, and
// ends with that one's.
type front struct {
	url      string
	ln       net.Listener
	backends []string
	next     atomic.Uint32

	mu    sync.Mutex
	conns map[net.Conn]bool
	done  sync.WaitGroup
}

func startFront(backends []string) (*front, error) {
	port, err := run.FreePort()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	f := &front{url: "https://" + ln.Addr().String(), ln: ln, backends: backends, conns: map[net.Conn]bool{}}
	f.done.Go(f.serve)
	return f, nil
}

func (f *front) serve() {
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.done.Go(func() { f.relay(conn) })
	}
}

// relay joins conn to the next kube-apiserver that accepts a connection.
func (f *front) relay(conn net.Conn) {
	var up net.Conn
	for range f.backends {
		b := f.backends[int(f.next.Add(1))%len(f.backends)]
		if c, err := net.DialTimeout("tcp", b, time.Second); err == nil {
			up = c
			break
		}
	}
	if up == nil || !f.track(conn, up) {
		conn.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	defer f.untrack(conn, up)
	var wg sync.WaitGroup
	for _, p := range [][2]net.Conn{{up, conn}, {conn, up}} {
		wg.Go(func() {
			_, _ = io.Copy(p[0], p[1])
			// Either side ending ends both: a killed kube-apiserver's
			// connections reach its clients as ended.
			p[0].Close()
			p[1].Close()
		})
	}
	wg.Wait()
}

func (f *front) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		return false // closed
	}
	for _, c := range conns {
		f.conns[c] = true
	}
	return true
}

func (f *front) untrack(conns ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range conns {
		delete(f.conns, c)
	}
}

// close stops accepting and ends every connection.
func (f *front) close() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.done.Wait()
}

// copyDir copies the regular files of dir into a new directory to.
func copyDir(dir, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(to, e.Name()), data, 0o600)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
