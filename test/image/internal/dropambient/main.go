// Command dropambient clears its ambient capabilities and executes its
// arguments: the capabilities a container's process starts with under
// Kubernetes (containerd, CRI-O), which put the added capabilities in the
// bounding, permitted and effective sets but never in the ambient set. podman
// also makes them ambient for a non-root user, so that any program keeps them
// across execve; a non-root program then keeps them under Kubernetes only
// through its own file capabilities. The image test runs CoreDNS through this
// to prove that its image's file capability, not podman, lets it bind port 53.
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// From linux/prctl.h.
const (
	prCapAmbient         = 47
	prCapAmbientClearAll = 4
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dropambient PROGRAM [ARG...]")
		os.Exit(2)
	}
	// Capability sets belong to a thread: clear them on the one that executes.
	runtime.LockOSThread()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "dropambient: prctl(PR_CAP_AMBIENT_CLEAR_ALL):", errno)
		os.Exit(1)
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "dropambient: exec %s: %v\n", os.Args[1], err)
	os.Exit(1)
}
