package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/globalmirror/globalmirror/test/run"
)

// podman runs containers the way this project's machines can: with runc
// (crun rejects their hybrid cgroups) and explicit rlimits (runc cannot apply
// podman's defaults there), on the host's network, so that every test packet
// stays on loopback.
type podman struct {
	bin    string
	dir    string // container logs
	prefix string // of the container names, unique to this test process
	n      atomic.Int32
}

var baseRunFlags = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--network", "host", "--pull", "never"}

func newPodman(t *testing.T) *podman {
	t.Helper()
	bin, err := exec.LookPath("podman")
	if err != nil {
		t.Fatalf("podman is not installed: `make test` installs it and runc (make image-deps) and builds the images: %v", err)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("runc is not installed (make image-deps): %v", err)
	}
	return &podman{bin: bin, dir: t.TempDir(), prefix: fmt.Sprintf("globalmirror-imagetest-%d", os.Getpid())}
}

func (p *podman) command(args ...string) *exec.Cmd {
	return exec.Command(p.bin, append([]string{"--runtime", "runc"}, args...)...)
}

// output runs podman and returns its stdout; stderr is in the error.
func (p *podman) output(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := p.command(args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func (p *podman) mustOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.output(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requireImage fails the test when the image is not in podman's storage.
func (p *podman) requireImage(t *testing.T, ref string) {
	t.Helper()
	if _, err := p.output("image", "exists", ref); err != nil {
		t.Fatalf("image %s is not in podman's storage: run `make image CONTAINER_ENGINE=podman` (make test does)", ref)
	}
}

// name returns a unique container name; the container is removed when the
// test ends, whatever became of it.
func (p *podman) name(t *testing.T, role string) string {
	name := fmt.Sprintf("%s-%d-%s", p.prefix, p.n.Add(1), role)
	t.Cleanup(func() { _, _ = p.output("rm", "--force", "--time", "0", "--ignore", name) })
	return name
}

// run starts `podman run --rm` in the foreground with flags, the image and
// its arguments. The container's output goes to the process's log. Should
// this test process die, podman gets SIGTERM and passes it on to the
// container, which then ends and is removed.
func (p *podman) run(t *testing.T, role string, flags []string, image string, args ...string) *run.Process {
	t.Helper()
	name := p.name(t, role)
	all := append([]string{"--runtime", "runc", "run", "--rm", "--name", name}, baseRunFlags...)
	all = append(append(append(all, flags...), image), args...)
	proc, err := run.StartWithDeathSignal(p.bin, all, nil, filepath.Join(p.dir, name+".log"), syscall.SIGTERM)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("podman %s", strings.Join(all, " "))
	t.Cleanup(proc.Stop)
	proc.Name = name
	return proc
}

// file is a regular file of an image's filesystem.
type file struct {
	SHA256 string
	Mode   int64
	UID    int
	// Xattrs are its extended attributes (security.capability), raw.
	Xattrs map[string]string
}

// extract reads the regular files at paths (relative to /) from the
// image's filesystem, through `podman export` of a container that is never
// started, and writes each file's content to dir under its base name,
// executable (mode 0755).
func (p *podman) extract(t *testing.T, ref, dir string, paths ...string) map[string]file {
	t.Helper()
	name := p.name(t, "export")
	p.mustOutput(t, "create", "--pull", "never", "--name", name, ref)
	cmd := p.command("export", name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got := map[string]file{}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("podman export %s: %v", ref, err)
		}
		path := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || !slices.Contains(paths, path) {
			continue
		}
		sum := sha256.New()
		dst, err := os.OpenFile(filepath.Join(dir, filepath.Base(path)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.MultiWriter(sum, dst), tr); err != nil {
			t.Fatal(err)
		}
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
		f := file{SHA256: hex.EncodeToString(sum.Sum(nil)), Mode: h.Mode, UID: h.Uid, Xattrs: map[string]string{}}
		for k, v := range h.PAXRecords {
			if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				f.Xattrs[name] = v
			}
		}
		got[path] = f
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("podman export %s: %v\n%s", ref, err, stderr.String())
	}
	return got
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// fileCaps decodes a security.capability extended attribute (struct
// vfs_cap_data, revision 2 or 3): the permitted set and the effective flag.
func fileCaps(xattr string) (permitted uint64, effective bool, err error) {
	b := []byte(xattr)
	if len(b) < 20 {
		return 0, false, fmt.Errorf("security.capability of %d bytes", len(b))
	}
	magic := binary.LittleEndian.Uint32(b[0:4])
	if rev := magic &^ 1; rev != 0x02000000 && rev != 0x03000000 {
		return 0, false, fmt.Errorf("security.capability revision %#x", rev)
	}
	permitted = uint64(binary.LittleEndian.Uint32(b[4:8])) | uint64(binary.LittleEndian.Uint32(b[12:16]))<<32
	return permitted, magic&1 == 1, nil
}
