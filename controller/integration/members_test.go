package integration

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/workload"
)

var exported = map[string]string{workload.ExportedLabel: "true"}

// Addresses never repeat across clusters: each has its own documentation prefix.
var (
	sourceV4 = netip.MustParsePrefix("192.0.2.0/24")
	eastV4   = netip.MustParsePrefix("198.51.100.0/24")
	westV4   = netip.MustParsePrefix("203.0.113.0/24")
)

// dbEverywhere creates workload `name` with n replicas, exported, in source,
// east and west. "db" takes the lower half of each cluster's prefix, any
// other name the upper half.
func (s *world) dbEverywhere(name string, n int) (src, east, west *workload.Workload) {
	s.t.Helper()
	half := func(p netip.Prefix) netip.Prefix {
		if name == "db" {
			return netip.PrefixFrom(p.Addr(), 25)
		}
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(append(p.Addr().AsSlice()[:3:3], 128))), 25)
	}
	create := func(c *localkube.Cluster, prefix netip.Prefix) *workload.Workload {
		w, err := workload.Create(s.t.Context(), c.Client, s.NS, name, n, workload.Options{Labels: exported, IPv4: prefix})
		if err != nil {
			s.t.Fatal(err)
		}
		return w
	}
	return create(s.Source, half(sourceV4)), create(s.east, half(eastV4)), create(s.west, half(westV4))
}

// nine is the full db-global of three 3-replica members, all ready unless
// listed in notReady as "db-1" (local) or "db-1-east".
func nine(src, east, west *workload.Workload, notReady ...string) []expect {
	var out []expect
	for i := range 3 {
		out = append(out,
			local(src, i, !slices.Contains(notReady, src.Name+"-"+itoa(i))),
			remote(east, i, "east", !slices.Contains(notReady, east.Name+"-"+itoa(i)+"-east")),
			remote(west, i, "west", !slices.Contains(notReady, west.Name+"-"+itoa(i)+"-west")))
	}
	return out
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestFollowsMembers(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	src, east, west := s.dbEverywhere("db", 3)
	c := s.startController()

	s.expectGlobal("db-global", "db", dbPorts, 1, nine(src, east, west)...)

	// A target scales up by one: one slice write. Then further, and down.
	written := s.writes(c)
	must(t, east.Scale(ctx, 4))
	s.expectGlobal("db-global", "db", dbPorts, 1, append(nine(src, east, west), remote(east, 3, "east", true))...)
	s.expectWrites(c, written, 1)
	must(t, east.Scale(ctx, 5))
	s.expectGlobal("db-global", "db", dbPorts, 1, append(nine(src, east, west), remote(east, 3, "east", true), remote(east, 4, "east", true))...)
	must(t, east.Scale(ctx, 3))
	s.expectGlobal("db-global", "db", dbPorts, 1, nine(src, east, west)...)

	// A local pod turns not ready: written not ready, in one write. A remote
	// one: Linkerd drops it from the mirror, so it leaves the global.
	written = s.writes(c)
	must(t, src.SetReady(ctx, "db-1", false))
	s.expectGlobal("db-global", "db", dbPorts, 1, nine(src, east, west, "db-1")...)
	s.expectWrites(c, written, 1)
	must(t, west.SetReady(ctx, "db-2", false))
	s.expectGlobal("db-global", "db", dbPorts, 1, slices.Delete(nine(src, east, west, "db-1"), 8, 9)...)
	must(t, src.SetReady(ctx, "db-1", true))
	must(t, west.SetReady(ctx, "db-2", true))
	s.expectGlobal("db-global", "db", dbPorts, 1, nine(src, east, west)...)

	// East's gateway fails its probes: its endpoints stay, not ready.
	must(t, s.Sim.SetGatewayAlive("east", false))
	s.expectGlobal("db-global", "db", dbPorts, 1, nine(src, east, west, "db-0-east", "db-1-east", "db-2-east")...)
	must(t, s.Sim.SetGatewayAlive("east", true))
	s.expectGlobal("db-global", "db", dbPorts, 1, nine(src, east, west)...)
}

func TestUnlinkAndLastMirror(t *testing.T) {
	s := newWorld(t)
	ctx := t.Context()
	src, east, west := s.dbEverywhere("db", 2)
	s.startController()
	both := []expect{local(src, 0, true), local(src, 1, true),
		remote(east, 0, "east", true), remote(east, 1, "east", true),
		remote(west, 0, "west", true), remote(west, 1, "west", true)}
	s.expectGlobal("db-global", "db", dbPorts, 1, both...)

	must(t, s.Sim.Unlink(ctx, "west"))
	s.expectGlobal("db-global", "db", dbPorts, 1, both[:4]...)

	// The last headless mirror goes: so does the global, though a local
	// service remains.
	must(t, s.Sim.Unlink(ctx, "east"))
	s.expectNoGlobal("db-global")

	// Linked again, it comes back.
	s.Link(s.east)
	s.expectGlobal("db-global", "db", dbPorts, 1, both[:4]...)

	// The mirrored service is deleted in the target: the global goes too.
	must(t, east.Delete(ctx))
	s.expectNoGlobal("db-global")
	_ = west
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
