package node

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary runs three times over, told apart by stageEnv: on the host
// (no value), as the init process of the namespaces it made ("init"), and as
// the test proper inside them ("test").
const (
	stageEnv  = "GLOBALMIRROR_NODE_STAGE"
	cgroupEnv = "GLOBALMIRROR_NODE_CGROUP"
	weightEnv = "GLOBALMIRROR_NODE_CPU_WEIGHT"
	// cgroupPrefix names the cgroup roots of test nodes in every hierarchy.
	cgroupPrefix = "globalmirror-node-"
	// CPUShares weighs the node's pods, together, against each thread
	// of the control planes and the harness (the scheduler weighs the root
	// cgroup's threads one by one): as on a node of their own, the
	// pods get the CPU first, the API servers' list bursts do not starve them.
	CPUShares = 8 * 1024
	// CPUWeight is CPUShares in cgroup v2's cpu.weight, where a root
	// thread at nice 0 weighs 100 (1024 in v1).
	CPUWeight = CPUShares * 100 / 1024
)

// Main runs a test package whose tests use a Node: call it from TestMain as
// os.Exit(node.Main(m)). The tests run inside new network, mount, PID, UTS
// and IPC namespaces, so that the node's addresses, bridges, iptables rules,
// mounts and processes exist only there and end with the tests, whatever way
// they end: the kernel kills every process of a PID namespace when its init
// exits, and a network namespace goes with its last process. The only trace
// outside, the node's cgroups (a cgroup root of its own in each hierarchy),
// is removed here afterwards. Under -short nothing is entered and the tests
// are expected to skip.
func Main(m *testing.M) int {
	flag.Parse() // testing.Short needs the flags before m.Run parses them
	switch os.Getenv(stageEnv) {
	case "":
		if testing.Short() {
			return m.Run()
		}
		return host()
	case "init":
		return initNamespaces()
	case "test":
		return m.Run()
	}
	fmt.Fprintf(os.Stderr, "node: unknown %s=%q\n", stageEnv, os.Getenv(stageEnv))
	return 2
}

// InNamespace reports whether this process is the test proper, inside the
// namespaces Main made.
func InNamespace() bool { return os.Getenv(stageEnv) == "test" }

// host makes the node's cgroup roots, runs the test binary again as the init
// of new namespaces, passes signals on, and removes the cgroups when it ends.
func host() int {
	if err := removeStaleCgroups(); err != nil {
		fmt.Fprintf(os.Stderr, "node: stale cgroups of an earlier run: %v\n", err)
	}
	root := cgroupPrefix + strconv.Itoa(os.Getpid())
	weighed, err := makeCgroupRoot(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "node: cgroup root: %v\n", err)
		_ = removeCgroupRoot(root, time.Second)
		return 1
	}
	fmt.Fprintf(os.Stderr, "node: cgroup root %s: %s\n", root, weighed)
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), stageEnv+"=init", cgroupEnv+"="+root, weightEnv+"="+weighed)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
		Pdeathsig:  syscall.SIGKILL,
	}
	code := 1
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "node: entering new namespaces: %v\n", err)
	} else {
		stop := forwardSignals(cmd.Process.Pid)
		err := cmd.Wait()
		stop()
		code = exitCode(cmd.ProcessState, err)
	}
	// Every process of the namespaces is gone with their init; the kernel
	// lets go of their cgroups a moment later.
	if err := removeCgroupRoot(root, 30*time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "node: removing cgroup root %s: %v\n", root, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// initNamespaces is PID 1 of the new namespaces: it lays out the mounts and
// the network, runs the test proper as its child, reaps every orphan (the
// containerd shims' children end up here) and exits with the test's status.
func initNamespaces() int {
	if err := setupMounts(); err != nil {
		fmt.Fprintf(os.Stderr, "node: mounts: %v\n", err)
		return 1
	}
	if err := setupNetwork(); err != nil {
		fmt.Fprintf(os.Stderr, "node: network: %v\n", err)
		return 1
	}
	if err := unix.Sethostname([]byte(Name)); err != nil {
		fmt.Fprintf(os.Stderr, "node: hostname: %v\n", err)
		return 1
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), stageEnv+"=test")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "node: starting the tests: %v\n", err)
		return 1
	}
	stop := forwardSignals(cmd.Process.Pid)
	defer stop()
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "node: wait: %v\n", err)
			return 1
		}
		if pid != cmd.Process.Pid {
			continue // an orphan, reaped
		}
		switch {
		case status.Exited():
			return status.ExitStatus()
		case status.Signaled():
			fmt.Fprintf(os.Stderr, "node: the tests were killed by %v\n", status.Signal())
			return 128 + int(status.Signal())
		}
	}
}

// forwardSignals passes interrupts on to pid until stop is called.
func forwardSignals(pid int) (stop func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = syscall.Kill(pid, s.(syscall.Signal))
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		fmt.Fprintf(os.Stderr, "node: the namespaces' init was killed by %v (%v)\n", ws.Signal(), err)
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// kernelDefaults are the values kubelet wants of host-wide kernel settings
// (its setupKernelTunables), which no namespace scopes. Each is shown to the
// kubelet, inside the mount namespace, as a file bound over its /proc/sys
// entry, so that the kubelet finds what it wants and the host keeps its own.
var kernelDefaults = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// setupMounts makes every mount of the namespace private (nothing mounted
// here reaches the host), mounts the PID namespace's own /proc and a tmpfs on
// /run, which holds all of the node's state (StateDir), and lays an overlay
// on /var whose writes go to that tmpfs: the kubelet and CNI write to fixed
// paths there (/var/lib/kubelet/device-plugins, /var/log/containers,
// /var/lib/cni), which the host must not get.
func setupMounts() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		return fmt.Errorf("/run: %w", err)
	}
	dir := "/run/globalmirror-namespace"
	upper, work := filepath.Join(dir, "var", "upper"), filepath.Join(dir, "var", "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("overlay", "/var", "overlay", 0, "lowerdir=/var,upperdir="+upper+",workdir="+work); err != nil {
		return fmt.Errorf("overlay on /var: %w", err)
	}
	// Names are looked up in the namespace's own files: the host's resolver
	// is out of its reach, and no query should try to leave.
	for path, content := range map[string]string{
		"/etc/hosts":       "127.0.0.1 localhost\n::1 localhost\n" + NodeIP + " " + Name + "\n",
		"/etc/resolv.conf": "nameserver 127.0.0.1\n",
	} {
		file := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(file, path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %w", path, err)
		}
	}
	for key, value := range kernelDefaults {
		file := filepath.Join(dir, strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(file, "/proc/sys/"+key, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %w", key, err)
		}
	}
	return nil
}

// setupNetwork brings up the namespace's loopback and the node's uplink: a
// veth pair whose far end has no address and leads nowhere, carrying the node
// address and a default route (kubelet and kube-proxy want one; a packet
// that takes it is dropped inside the namespace). Forwarding and bridge
// netfilter are what pod and Service traffic needs; both are the namespace's
// own settings.
func setupNetwork() error {
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", uplink, "type", "veth", "peer", "name", uplink + "-peer"},
		{"addr", "add", NodeIP + "/24", "dev", uplink},
		{"link", "set", uplink, "up"},
		{"link", "set", uplink + "-peer", "up"},
		{"route", "add", "default", "via", defaultGateway, "dev", uplink, "onlink"},
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	for key, value := range map[string]string{
		"net/ipv4/ip_forward":                 "1",
		"net/bridge/bridge-nf-call-iptables":  "1",
		"net/bridge/bridge-nf-call-ip6tables": "1",
	} {
		if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", key, err)
		}
	}
	return nil
}

// cgroupMounts lists the mount points of the host's cgroup hierarchies (v1
// and, on a hybrid host, the unified one).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ... mount-point ... - fstype source options
		pre, post, ok := strings.Cut(s.Text(), " - ")
		fields, fs := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(fs) < 1 {
			continue
		}
		if fs[0] == "cgroup" || fs[0] == "cgroup2" {
			mounts = append(mounts, fields[4])
		}
	}
	slices.Sort(mounts)
	return slices.Compact(mounts), s.Err()
}

// makeCgroupRoot creates root in every hierarchy, as kind's entrypoint does
// for its /kubelet root: the kubelet refuses a cgroup root that does not
// exist. A new v1 cpuset starts with no CPUs; it gets its parent's. It says
// how the root was weighed (weighNode), or why it was not: the node still
// runs, slower under a busy control plane, and a failing test says so.
func makeCgroupRoot(root string) (weighed string, err error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return "", err
	}
	if len(mounts) == 0 {
		return "", errors.New("no cgroup hierarchy is mounted")
	}
	var weights []string
	for _, m := range mounts {
		dir := filepath.Join(m, root)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		if w, err := weighNode(m, dir); err != nil {
			weights = append(weights, "not weighed: "+err.Error())
		} else if w != "" {
			weights = append(weights, w)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(m, f))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return "", fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
			}
		}
	}
	if len(weights) == 0 {
		return "not weighed: no hierarchy has the cpu controller", nil
	}
	return strings.Join(weights, "; "), nil
}

// Weighed says how the node's cgroup root was weighed against the control
// planes' threads (CPUShares, CPUWeight), or why it was not.
func Weighed() string { return os.Getenv(weightEnv) }

// weighNode gives the node's cgroup root dir, in the hierarchy mounted at
// m, its weight if that hierarchy has the cpu controller: CPUShares in v1's
// cpu.shares; CPUWeight in v2's cpu.weight, where the controller must first
// be enabled for the root's children, as the kubelet does along its own
// path. It says what it wrote, if anything.
func weighNode(m, dir string) (string, error) {
	write := func(f, v string) (string, error) {
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		return f + " " + v, nil
	}
	shares := filepath.Join(dir, "cpu.shares")
	if _, err := os.Stat(shares); err == nil {
		return write(shares, strconv.Itoa(CPUShares))
	}
	controllers, err := os.ReadFile(filepath.Join(m, "cgroup.controllers"))
	if err != nil || !slices.Contains(strings.Fields(string(controllers)), "cpu") {
		return "", nil // v1 without cpu, or v2 with cpu bound to v1
	}
	if _, err := write(filepath.Join(m, "cgroup.subtree_control"), "+cpu"); err != nil {
		return "", err
	}
	return write(filepath.Join(dir, "cpu.weight"), strconv.Itoa(CPUWeight))
}

// removeCgroupRoot removes root and everything under it from every
// hierarchy, deepest first, retrying for up to patience while the kernel
// still counts exiting processes in them.
func removeCgroupRoot(root string, patience time.Duration) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(patience)
	for {
		var errs []error
		for _, m := range mounts {
			errs = append(errs, removeTree(filepath.Join(m, root)))
		}
		err := errors.Join(errs...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killCgroupRoot kills every process in the cgroups of root, in the first
// hierarchy (each process is in every one).
func killCgroupRoot(root string) {
	mounts, err := cgroupMounts()
	if err != nil || len(mounts) == 0 || root == "" {
		return
	}
	_ = filepath.WalkDir(filepath.Join(mounts[0], root), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		procs, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(procs)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		return nil
	})
}

// removeTree rmdirs a cgroup and its descendants (cgroup directories hold
// only the kernel's files, which go with them).
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}

// removeStaleCgroups removes the cgroup roots of test nodes whose test binary
// is gone (one killed before it could clean up).
func removeStaleCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		entries, _ := os.ReadDir(m)
		for _, e := range entries {
			pid, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
			if !ok || !e.IsDir() {
				continue
			}
			if n, err := strconv.Atoi(pid); err == nil && syscall.Kill(n, 0) == nil {
				continue // its test still runs
			}
			errs = append(errs, removeTree(filepath.Join(m, e.Name())))
		}
	}
	return errors.Join(errs...)
}
