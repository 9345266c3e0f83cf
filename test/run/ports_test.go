package run

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

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

// portsChild, set in a child's environment, makes TestMain hand out that
// many ports, print them, and hold them until its standard input ends.
const portsChild = "GLOBALMIRROR_TEST_FREE_PORTS"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(portsChild)); err == nil {
		for range n {
			p, err := FreePort()
			if err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			fmt.Println(p)
		}
		fmt.Println("done")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFreePortNeverGivesTwoProcessesOnePort: `go test` runs packages side by
// side, each handing out ports that stay unbound until a server starts. No
// port may be handed out twice while the process that has it lives: nothing
// binds these, so without the reservation hundreds of picks from 19,000
// ports repeat some (about 17 expected).
func TestFreePortNeverGivesTwoProcessesOnePort(t *testing.T) {
	const procs, each = 4, 400
	var mu sync.Mutex
	owner := map[int]int{}
	var stdins []io.Closer
	var wg sync.WaitGroup
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), portsChild+"="+strconv.Itoa(each))
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stdins = append(stdins, in)
		t.Cleanup(func() { _ = cmd.Wait() })
		wg.Go(func() {
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				line := lines.Text()
				if line == "done" {
					return
				}
				p, err := strconv.Atoi(line)
				if err != nil {
					t.Errorf("child %d: %s", i, line)
					return
				}
				mu.Lock()
				if o, taken := owner[p]; taken {
					t.Errorf("port %d handed out to child %d and to child %d", p, o, i)
				}
				owner[p] = i
				mu.Unlock()
			}
			t.Errorf("child %d ended before handing out its ports: %v", i, lines.Err())
		})
	}
	wg.Wait() // every child holds its ports until its stdin closes
	for _, in := range stdins {
		in.Close()
	}
	if len(owner) != procs*each && !t.Failed() {
		t.Errorf("%d ports handed out, want %d", len(owner), procs*each)
	}
}

// TestACoreDNSOnAPortAnotherListensOnFailsToStart: CoreDNS binds with
// SO_REUSEPORT, so a second CoreDNS whose metrics server is given the first
// one's DNS port starts without complaint and takes about half of its TCP
// connections. StartCoreDNS refuses it.
func TestACoreDNSOnAPortAnotherListensOnFailsToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs CoreDNS")
	}
	corefile := Corefile("    whoami\n")
	first, err := StartCoreDNS(t.Context(), CoreDNSOptions{Corefile: corefile, Dir: t.TempDir(), WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop()
	second, err := StartCoreDNS(t.Context(), CoreDNSOptions{Corefile: corefile, Dir: t.TempDir(),
		Ports: map[string]int{"METRICS_PORT": first.Ports["DNS_PORT"]}})
	if err == nil {
		second.Stop()
		t.Fatalf("a CoreDNS whose metrics share port %d with another's DNS started", first.Ports["DNS_PORT"])
	}
	if want := fmt.Sprintf("[%d]", first.Ports["DNS_PORT"]); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the shared port %s", err, want)
	}
	// The first one still has its port to itself: every TCP query answered.
	for range 20 {
		m := new(dns.Msg).SetQuestion("example.org.", dns.TypeA)
		if _, _, err := (&dns.Client{Net: "tcp"}).Exchange(m, first.Addr); err != nil {
			t.Fatalf("TCP query after the second CoreDNS was refused: %v", err)
		}
	}
}
