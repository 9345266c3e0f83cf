package image

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/helmtest"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// platforms are those `make image` builds each image for, into one manifest
// list under the image's name: the chart's default images, whose README
// names these.
var platforms = []string{"linux/amd64", "linux/arm64"}

// elfMachine is the machine a platform's binaries must be compiled for.
var elfMachine = map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}

// qemuUser is the qemu-user binary (Debian's qemu-user-static, which `make
// image-deps` installs) that runs a platform's binaries on another machine.
var qemuUser = map[string]string{"linux/amd64": "qemu-x86_64-static", "linux/arm64": "qemu-aarch64-static"}

// checkPlatforms checks that the image c runs is a manifest list of exactly
// platforms, each member's config naming its platform (and the same user,
// numeric so that runAsNonRoot can check it, and entrypoint), its /binary a
// static ELF executable for that machine, owned by root and not writable by
// its user, with the file capabilities caps (none: no security.capability at
// all; CoreDNS's must survive the COPY --from into the final stage), and that
// the list's name resolves to this machine's member, which is what podman
// runs, inspects and saves under that name, and whose /binary is byte for
// byte the one `make build` put in bin/ and the tests ran (the same compiler
// and flags). It extracts each member's binary to dir/binary/<arch>/binary
// and returns those paths by platform.
func checkPlatforms(t *testing.T, pm *podman, c container, binary string, caps uint64, dir string) map[string]string {
	t.Helper()
	built, err := run.Bin(binary)
	if err != nil {
		t.Fatal(err)
	}
	builtSum := sha256File(t, built)
	// Checked first: `manifest inspect` of a name not in local storage asks
	// the registry.
	if _, err := pm.output("manifest", "exists", c.Image); err != nil {
		t.Fatalf("%s is not a manifest list in podman's storage (make image makes one per image): %v", c.Image, err)
	}
	var list struct {
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
				Variant      string `json:"variant"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal([]byte(pm.mustOutput(t, "manifest", "inspect", c.Image)), &list); err != nil {
		t.Fatalf("manifest inspect %s: %v", c.Image, err)
	}
	var got []string
	for _, m := range list.Manifests {
		p := m.Platform
		got = append(got, strings.TrimSuffix(p.OS+"/"+p.Architecture+"/"+p.Variant, "/"))
	}
	sort.Strings(got)
	if !slices.Equal(got, platforms) {
		t.Fatalf("%s lists the platforms %q, want exactly %q", c.Image, got, platforms)
	}
	repo := c.Image
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	resolved := strings.TrimSpace(pm.mustOutput(t, "image", "inspect", "--format", "{{.Id}}", c.Image))

	bins := map[string]string{}
	for _, m := range list.Manifests {
		platform := m.Platform.OS + "/" + m.Platform.Architecture
		ref := repo + "@" + m.Digest
		var inspected []struct {
			ID           string `json:"Id"`
			OS           string `json:"Os"`
			Architecture string
			Config       struct {
				User       string
				Entrypoint []string
			}
		}
		out := pm.mustOutput(t, "image", "inspect", ref)
		if err := json.Unmarshal([]byte(out), &inspected); err != nil || len(inspected) != 1 {
			t.Fatalf("image inspect %s: %v: %s", ref, err, out)
		}
		cfg := inspected[0]
		if got := cfg.OS + "/" + cfg.Architecture; got != platform {
			t.Errorf("%s: the list's %s member's config says %s", c.Image, platform, got)
		}
		if cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/" + binary}) {
			t.Errorf("%s (%s): user %q, entrypoint %q; want 65532:65532, [/%s]", c.Image, platform, cfg.Config.User, cfg.Config.Entrypoint, binary)
		}
		host := platform == "linux/"+runtime.GOARCH
		if host != (cfg.ID == resolved) {
			t.Errorf("%s resolves to image %.12s; its %s member is %.12s (want: this machine's member, linux/%s)", c.Image, resolved, platform, cfg.ID, runtime.GOARCH)
		}

		d := filepath.Join(dir, binary, m.Platform.Architecture)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		f, ok := pm.extract(t, ref, d, binary)[binary]
		if !ok {
			t.Errorf("%s (%s) has no /%s", c.Image, platform, binary)
			continue
		}
		path := filepath.Join(d, binary)
		if err := checkStaticELF(path, elfMachine[platform]); err != nil {
			t.Errorf("%s (%s): /%s: %v", c.Image, platform, binary, err)
		}
		if host && f.SHA256 != builtSum {
			t.Errorf("%s: /%s differs from %s (sha256 %s, want %s): not the binary the tests ran", c.Image, binary, built, f.SHA256, builtSum)
		}
		if f.UID != 0 || f.Mode&0o022 != 0 {
			t.Errorf("%s (%s): /%s owned by %d, mode %o: its user could replace it", c.Image, platform, binary, f.UID, f.Mode)
		}
		raw, has := f.Xattrs["security.capability"]
		switch {
		case caps == 0 && has:
			t.Errorf("%s (%s): /%s has a file capability", c.Image, platform, binary)
		case caps != 0:
			permitted, effective, err := fileCaps(raw)
			if err != nil || permitted != caps || !effective {
				t.Errorf("%s (%s): /%s file capability: permitted %#x, effective %v, err %v; want %#x, effective",
					c.Image, platform, binary, permitted, effective, err, caps)
			}
		}
		bins[platform] = path
	}
	return bins
}

// checkStaticELF says why path is not a 64-bit, statically linked ELF
// executable for machine, or returns nil.
func checkStaticELF(path string, machine elf.Machine) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != machine || f.Type != elf.ET_EXEC {
		return fmt.Errorf("%v %v %v, want ELFCLASS64 %v ET_EXEC", f.Class, f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("dynamically linked (%v)", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		return fmt.Errorf("imports libraries %q (%v)", libs, err)
	}
	return nil
}

// checkEmulated runs each platform's binaries, extracted from the lists
// (bins), outside containers on this machine: its own platform's natively,
// the others' under qemu-user (no binfmt handler: qemu is the command). For
// each, the controller, after db-global's Service and slices are deleted,
// writes them again with exactly the wanted endpoints, and CoreDNS, with the
// chart's Corefile (listening on loopback only), answers db-global and each
// pod's name over UDP and TCP.
func checkEmulated(t *testing.T, ctrl, dnsc container, bins map[string]map[string]string,
	repo, version, kubeconfig string, cluster *localkube.Cluster, want map[string]string) {
	host := "linux/" + runtime.GOARCH
	dir := t.TempDir()
	// This machine's own platform first.
	for _, platform := range append([]string{host}, slices.DeleteFunc(slices.Clone(platforms), func(p string) bool { return p == host })...) {
		arch := strings.TrimPrefix(platform, "linux/")
		launch := func(bin, name string, args, env []string) *run.Process {
			t.Helper()
			exe := bin
			if platform != host {
				q, err := exec.LookPath(qemuUser[platform])
				if err != nil {
					t.Fatalf("%s is not installed (make image-deps installs qemu-user-static): %v", qemuUser[platform], err)
				}
				exe, args = q, append([]string{bin}, args...)
			}
			p, err := run.Start(exe, args, env, filepath.Join(dir, name+".log"))
			if err != nil {
				t.Fatal(err)
			}
			p.Name = name
			t.Cleanup(p.Stop)
			t.Logf("%s: %s %s", platform, exe, strings.Join(args, " "))
			return p
		}
		deleteGlobal(t, cluster)
		port := freePort(t)
		args := append(replaceArg(t, ctrl.Args, "--metrics-addr=", "127.0.0.1:"+strconv.Itoa(port)), "--kubeconfig="+kubeconfig)
		p := launch(bins["globalmirror-controller"][platform], "controller-"+arch, args, envOf(ctrl.Flags))
		waitHTTP(t, p, probeURL(t, ctrl.Spec.ReadinessProbe, platform+" controller readiness", port))
		expectGlobalService(t, cluster, want, p)
		// Stopped, it gives up the Lease, so the next one leads at once.
		if err := p.StopWithin(30 * time.Second); err != nil {
			t.Error(err)
		}

		dnsPort, health, ready, metrics := freePort(t), freePort(t), freePort(t), freePort(t)
		c := translate(t, render(t, repo, version, dnsPort, health, ready, metrics, kubeconfig), helmtest.Namespace, helmtest.CoreDNS, "coredns", filepath.Join(dir, "coredns-"+arch))
		server := "127.0.0.1:" + strconv.Itoa(dnsPort)
		p = launch(bins["coredns"][platform], "coredns-"+arch, hostArgs(t, c), envOf(c.Flags))
		waitHTTP(t, p, probeURL(t, c.Spec.ReadinessProbe, platform+" coredns readiness", ready))
		expectAnswers(t, server, want, p)
		p.Stop()
	}
}

// deleteGlobal deletes db-global's Service and EndpointSlices and waits until
// they are gone, so that only a controller started next can write them.
func deleteGlobal(t *testing.T, c *localkube.Cluster) {
	t.Helper()
	ctx := t.Context()
	eps := c.Client.DiscoveryV1().EndpointSlices(ns)
	selector := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db-global"}
	if err := c.Client.CoreV1().Services(ns).Delete(ctx, "db-global", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := eps.DeleteCollection(ctx, metav1.DeleteOptions{}, selector); err != nil {
		t.Fatal(err)
	}
	err := await.Poll(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) string {
		_, err := c.Client.CoreV1().Services(ns).Get(ctx, "db-global", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Sprintf("Service db-global: %v", err)
		}
		list, err := eps.List(ctx, selector)
		if err != nil || len(list.Items) > 0 {
			return fmt.Sprintf("%d EndpointSlices of db-global (%v)", len(list.Items), err)
		}
		return ""
	})
	if err != nil {
		t.Fatalf("db-global not deleted: %v", err)
	}
}

// envOf is the environment a container's flags set (--env NAME=VALUE).
func envOf(flags []string) []string {
	var env []string
	for i := 0; i+1 < len(flags); i++ {
		if flags[i] == "--env" {
			env = append(env, flags[i+1])
		}
	}
	return env
}

// hostArgs are the container's arguments for a process on this machine: paths
// under a volume's mount point become paths under its host directory.
func hostArgs(t *testing.T, c container) []string {
	t.Helper()
	args := slices.Clone(c.Args)
	for i := 0; i+1 < len(c.Flags); i++ {
		if c.Flags[i] != "--volume" {
			continue
		}
		parts := strings.Split(c.Flags[i+1], ":")
		if len(parts) < 2 {
			t.Fatalf("volume %q", c.Flags[i+1])
		}
		hostDir, mount := parts[0], parts[1]
		for j, a := range args {
			if a == mount || strings.HasPrefix(a, mount+"/") {
				args[j] = hostDir + strings.TrimPrefix(a, mount)
			}
		}
	}
	return args
}
