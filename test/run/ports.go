package run

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// FreePort picks from [portFloor, portCeiling): above the well-known ports
// and the fixed ones of a node's components (kubelet 10248/10250/10255,
// kube-proxy 10249/10256, controller-manager 10257, scheduler 10259), which
// the node test binds after its control plane has taken its ports — an API
// server on 10256 answered kube-proxy's health check with 400 — and below
// the NodePort range (30000-32767).
const (
	portFloor   = 11000
	portCeiling = 30000
)

// FreePort returns a loopback port that is free for both TCP and UDP, as a DNS
// server needs, picked below the kernel's ephemeral range, and reserved for
// this process until it exits. A server that restarts on its port (CoreDNS,
// kube-apiserver) must find it free, and while it is down the kernel must
// not hand the port to a client as its own: the server could not bind it
// again, and a client connected to itself reads its own DNS query back as if
// it were an empty answer.
//
// The reservation (reserve) keeps every other process of the test harness
// from handing out the same port: `go test` runs packages side by side, and
// a port free when it was checked is not bound until the server starts.
// Two CoreDNS processes given one port do not fail: CoreDNS binds every
// listener, its metrics, health and ready servers' too, with SO_REUSEPORT,
// so the kernel shares the port between them and hands each connection to
// one or the other. A DNS server whose TCP port an HTTP server shares
// answers UDP and about half of its TCP connections; the others wait for an
// HTTP request that never comes.
func FreePort() (int, error) {
	high := min(ephemeralLow(), portCeiling)
	if high-portFloor < 1000 {
		return 0, fmt.Errorf("the kernel's ephemeral ports start at %d: FreePort needs 1000 ports between %d and them (net.ipv4.ip_local_port_range)", high, portFloor)
	}
	for range 1000 {
		port := portFloor + rand.IntN(high-portFloor)
		if !free(port) {
			continue
		}
		if ok, err := reserve(port); err != nil || ok {
			return port, err
		}
	}
	return 0, errors.New("no free TCP+UDP port on 127.0.0.1 below the ephemeral range")
}

// reservations are the ports this process handed out. Each is a lock on its
// byte of one file that every process of the harness shares (a POSIX record
// lock, which the kernel releases when the process ends, however it ends).
var reservations struct {
	sync.Mutex
	file  *os.File // never closed: closing any descriptor of the file drops the process's locks
	ports map[int]bool
}

// reservationsFile is the file whose bytes are the ports' locks.
var reservationsFile = filepath.Join(os.TempDir(), "globalmirror-ports.lock")

// reserve reserves port for this process unless it or another process of the
// harness has it already.
func reserve(port int) (bool, error) {
	r := &reservations
	r.Lock()
	defer r.Unlock()
	if r.ports[port] {
		return false, nil
	}
	if r.file == nil {
		f, err := os.OpenFile(reservationsFile, os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			return false, fmt.Errorf("reserving ports: %w", err)
		}
		r.file, r.ports = f, map[int]bool{}
	}
	lock := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: int64(port), Len: 1}
	err := syscall.FcntlFlock(r.file.Fd(), syscall.F_SETLK, &lock)
	switch {
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES):
		return false, nil // another process holds it
	case err != nil:
		return false, fmt.Errorf("reserving port %d: %w", port, err)
	}
	r.ports[port] = true
	return true, nil
}

// SharedWith returns the TCP ports of ports on which a process other than
// pid listens too: a port handed out twice, which CoreDNS does not notice
// (see FreePort).
func SharedWith(pid int, ports ...int) ([]int, error) {
	own, err := socketInodes(pid)
	if err != nil {
		return nil, err
	}
	var shared []int
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || own[f[9]] { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			p, err := strconv.ParseUint(hexPort, 16, 16)
			if err == nil && slices.Contains(ports, int(p)) && !slices.Contains(shared, int(p)) {
				shared = append(shared, int(p))
			}
		}
	}
	return shared, nil
}

// socketInodes are the inodes of pid's sockets.
func socketInodes(pid int) (map[string]bool, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	return inodes, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	low := 32768
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	_, _ = fmt.Sscan(string(b), &low) // low stays when b holds no number
	return low
}

// free reports whether port can be bound on 127.0.0.1 for TCP and UDP.
func free(port int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
