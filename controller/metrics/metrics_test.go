package metrics

import (
	"slices"
	"testing"
)

// The controller exports its feeds' series as the plugin does, under its own
// prefix: full lists and current objects (held_objects_total) by resource, and when the index last
// heard from the API server.
func TestTheFeedsSeriesAreThePlugins(t *testing.T) {
	m := New()
	m.Feeds.Counters("services")
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"globalmirror_lists_total", "globalmirror_held_objects_total", "globalmirror_api_heard_timestamp_seconds", "globalmirror_build_info"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s among %v", want, names)
		}
	}
}
