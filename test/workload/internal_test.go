package workload

import (
	"net/netip"
	"slices"
	"testing"
)

func TestPodIPs(t *testing.T) {
	w := &Workload{Name: "db", opts: Options{
		IPv4: netip.MustParsePrefix("203.0.113.0/30"),
		IPv6: netip.MustParsePrefix("2001:db8:3::/64"),
	}}
	got, err := w.PodIPs(1)
	if want := []string{"203.0.113.2", "2001:db8:3::2"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("PodIPs(1) = %v, %v; want %v", got, err, want)
	}
	if got, err := w.PodIPs(3); err == nil {
		t.Errorf("PodIPs(3) = %v, want an error: 203.0.113.4 is outside /30", got)
	}
}

func TestOrdinal(t *testing.T) {
	for pod, want := range map[string]int{"db-0": 0, "db-12": 12, "db-01": -1, "db-x": -1, "dbx-1": -1, "db--1": -1, "db-0-east": -1} {
		got, ok := ordinal("db", pod)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("ordinal(db, %s) = %d, want %d", pod, got, want)
		}
	}
}
