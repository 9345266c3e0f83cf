// Command pause is the test node's pod sandbox image, in the role of
// Kubernetes' pause: it holds the pod's namespaces, reaps the zombies of a
// shared PID namespace and exits on SIGINT or SIGTERM. No registry can be
// reached to pull the real one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
