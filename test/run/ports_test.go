package run

import "testing"

// TestFreePortIsBelowTheEphemeralRange: the kernel never gives a client's
// socket a port below the ephemeral range, so a server restarting on such a
// port finds it free.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < portFloor || port >= low {
			t.Fatalf("FreePort = %d, want in [%d, %d)", port, portFloor, low)
		}
		if !free(port) {
			t.Fatalf("port %d is not free for TCP and UDP", port)
		}
	}
}
