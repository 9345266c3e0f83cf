package run

import (
	"net"
	"strconv"
	"testing"
)

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
		for _, network := range []string{"tcp", "udp"} {
			var l interface{ Close() error }
			if network == "tcp" {
				l, err = net.Listen(network, "127.0.0.1:"+strconv.Itoa(port))
			} else {
				l, err = net.ListenPacket(network, "127.0.0.1:"+strconv.Itoa(port))
			}
			if err != nil {
				t.Fatalf("port %d is not free for %s: %v", port, network, err)
			}
			l.Close()
		}
	}
}
