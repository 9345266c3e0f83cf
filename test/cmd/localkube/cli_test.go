package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/workload"
)

// TestCommands runs the built `localkube up` and `mirrorsim` as the demo does:
// their ready lines, the admin API, and a clean stop on SIGTERM.
func TestCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	ctx := t.Context()
	dir := t.TempDir()

	localkube, line := startCommand(t, "localkube", "up", "--clusters", "source,east", "--dir", dir)
	want := "localkube: ready source=" + dir + "/source.kubeconfig east=" + dir + "/east.kubeconfig"
	if line != want {
		t.Fatalf("localkube printed %q, want %q", line, want)
	}
	source, apiHost := clientFor(t, dir+"/source.kubeconfig")
	east, _ := clientFor(t, dir+"/east.kubeconfig")

	mirrorsim, line := startCommand(t, "mirrorsim", "--source", dir+"/source.kubeconfig",
		"--target", "east="+dir+"/east.kubeconfig", "--kube-api-qps", "100", "--kube-api-burst", "200")
	admin, ok := strings.CutPrefix(line, "mirrorsim: ready admin=")
	admin, links, _ := strings.Cut(admin, " ")
	if !ok || links != "links=east" {
		t.Fatalf("mirrorsim printed %q", line)
	}

	if _, err := workload.Create(ctx, east, "shop", "db", 2, workload.Options{
		Labels: map[string]string{workload.ExportedLabel: "true"}, IPv4: netip.MustParsePrefix("198.51.100.0/24"),
	}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		eps, err := source.CoreV1().Endpoints("shop").Get(ctx, "db-east", metav1.GetOptions{})
		return err == nil && len(eps.Subsets) == 1 && len(eps.Subsets[0].Addresses) == 2, nil
	}); err != nil {
		t.Fatalf("waiting for db-east with 2 hostnames: %v", err)
	}
	// The admin API answers at the ready line's address (what it calls:
	// TestAdminHandler; what those calls do: test/mirrorsim's TestMirrorsim).
	put(t, admin+"/links/east/gateway?alive=false", http.MethodPut)
	put(t, admin+"/links/east", http.MethodDelete)

	stopCommand(t, mirrorsim)
	stopCommand(t, localkube)
	if conn, err := net.DialTimeout("tcp", apiHost, time.Second); err == nil {
		conn.Close()
		t.Errorf("source API server %s still listening after localkube stopped", apiHost)
	}
	for _, gone := range []string{"source.kubeconfig", "east/etcd", "east/pki"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s left after stop: %v", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "east", "kube-controller-manager.log")); err != nil {
		t.Errorf("logs not kept: %v", err)
	}
}

// startCommand starts the project's binary name (`make build`) so that it
// dies with the test, and returns it with the first line it prints.
func startCommand(t *testing.T, name string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	path, err := run.Bin(name)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})
	_ = out.(*os.File).SetReadDeadline(time.Now().Add(2 * time.Minute))
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s printed no line within 2 minutes: %v", name, err)
	}
	return cmd, strings.TrimSuffix(line, "\n")
}

func stopCommand(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	kill := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	if err := cmd.Wait(); !kill.Stop() {
		t.Errorf("%s did not stop within 30s of SIGTERM; killed", filepath.Base(cmd.Path))
	} else if err != nil {
		t.Errorf("%s: %v", filepath.Base(cmd.Path), err)
	}
}

// clientFor is a client of kubeconfig's cluster, and its API server's
// host:port.
func clientFor(t *testing.T, kubeconfig string) (kubernetes.Interface, string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.WarningHandler = rest.NoWarnings{} // v1 Endpoints are what Linkerd uses
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg), u.Host
}

func put(t *testing.T, url, method string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s", method, url, resp.Status)
	}
}
