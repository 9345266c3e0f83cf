package localkube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// StopAPIServer kills the cluster's kube-apiserver, as in an outage or a
// crash: etcd and kube-controller-manager keep running, clients see
// connection errors. (A graceful stop takes longer than envtest waits while
// watches are open.) StartAPIServer brings it back.
// A replicated cluster's kube-apiservers are all killed.
func (c *Cluster) StopAPIServer() error {
	var errs []error
	for _, apis := range c.apiServers() {
		errs = append(errs, stopAPIServer(apis))
	}
	return errors.Join(errs...)
}

// apiServers are c's kube-apiservers: the first, then its replicas.
func (c *Cluster) apiServers() []*envtest.APIServer {
	return append([]*envtest.APIServer{c.apis}, c.replicas...)
}

// stopAPIServer kills apis's process and waits until envtest knows.
func stopAPIServer(apis *envtest.APIServer) error {
	pid, err := apiServerPID(apis)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill kube-apiserver %d: %w", pid, err)
	}
	// envtest's Stop signals the process group unless its own Wait has
	// already marked the process exited; until then the signal fails with
	// ESRCH, so retry until envtest has noticed the death.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := apis.Stop()
		if !errors.Is(err, syscall.ESRCH) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver %d: envtest did not notice its death: %w", pid, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartAPIServer starts the kube-apiservers stopped by StopAPIServer again,
// on the same addresses, with the same certificates and the same etcd, so
// Config, Kubeconfig and Client stay valid, and waits until they are ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	for _, apis := range c.apiServers() {
		if err := apis.Start(); err != nil {
			return fmt.Errorf("kube-apiserver: %w (logs: %s)", err, filepath.Join(c.dir, "kube-apiserver*.log"))
		}
	}
	if err := waitAPIReady(ctx, c.Client); err != nil {
		return fmt.Errorf("kube-apiserver /readyz: %w", err)
	}
	return nil
}

// StartAPIServerFrom starts a kube-apiserver stopped by StopAPIServer again
// as StartAPIServer does, from another binary: a control plane upgraded in
// place (or rolled back).
func (c *Cluster) StartAPIServerFrom(ctx context.Context, bin string) error {
	wrapper, err := dyingWithUs(bin, filepath.Dir(c.apis.Path), fmt.Sprintf("kube-apiserver-%d", time.Now().UnixNano()))
	if err != nil {
		return err
	}
	c.apis.Path = wrapper
	return c.StartAPIServer(ctx)
}

// CompactEtcd compacts the cluster's etcd to its head, a write of its own
// first: every version a watch could resume from is gone, and once the API
// server restarts (its watch cache no longer holding them either), every
// watch resumed from one gets 410 Gone and its client lists again.
// It returns the revision compacted to.
func (c *Cluster) CompactEtcd(ctx context.Context) (int64, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.EtcdURL.String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	put, err := cli.Put(ctx, "/localkube/compaction", time.Now().String())
	if err != nil {
		return 0, err
	}
	_, err = cli.Compact(ctx, put.Header.Revision, clientv3.WithCompactPhysical())
	return put.Header.Revision, err
}

// apiServerPID finds the kube-apiserver apis, the one process whose
// command line carries its certificate directory.
func apiServerPID(apis *envtest.APIServer) (int, error) {
	want := []byte("--cert-dir=" + apis.CertDir + "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, want) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && bytes.Contains(stat, []byte(") Z ")) {
			continue // a zombie
		}
		return pid, nil
	}
	return 0, fmt.Errorf("no kube-apiserver process with --cert-dir=%s", apis.CertDir)
}
