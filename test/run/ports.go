package run

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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
// server needs, picked below the kernel's ephemeral range. A server that
// restarts on its port (CoreDNS, kube-apiserver) must find it free, and while
// it is down the kernel must not hand the port to a client as its own: the
// server could not bind it again, and a client connected to itself reads its
// own DNS query back as if it were an empty answer.
func FreePort() (int, error) {
	high := min(ephemeralLow(), portCeiling)
	if high-portFloor < 1000 {
		return anyFreePort()
	}
	for range 100 {
		port := portFloor + rand.IntN(high-portFloor)
		if free(port) {
			return port, nil
		}
	}
	return 0, errors.New("no free TCP+UDP port on 127.0.0.1 below the ephemeral range")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
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

// anyFreePort lets the kernel pick, for a machine whose ephemeral range
// leaves no room below it.
func anyFreePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if free(port) {
			return port, nil
		}
	}
	return 0, errors.New("no free TCP+UDP port on 127.0.0.1")
}
