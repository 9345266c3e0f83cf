package run

import "testing"

// TestFreePortIsBelowTheEphemeralRange: the kernel never gives a client's
// socket a port below the ephemeral range, so a server restarting on such a
// port finds it free; and no port is one a node's components bind.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low := min(ephemeralLow(), portCeiling)
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < portFloor || port >= low {
			t.Fatalf("FreePort = %d, want in [%d, %d)", port, portFloor, low)
		}
		if port >= 10248 && port <= 10259 {
			t.Fatalf("FreePort = %d, a port of the kubelet, kube-proxy or the control plane", port)
		}
		if !free(port) {
			t.Fatalf("port %d is not free for TCP and UDP", port)
		}
	}
}
