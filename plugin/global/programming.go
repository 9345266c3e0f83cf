package global

import (
	"time"

	"github.com/globalmirror/globalmirror/source"
)

// The programming latency metric: how long a change takes from the cluster
// to the answers (coredns_global_programming_duration_seconds).

// takePending returns and forgets when a change of k was first delivered.
func (dc *dnsController) takePending(k source.Key) (time.Time, bool) {
	dc.pendingMu.Lock()
	defer dc.pendingMu.Unlock()
	t, ok := dc.pending[k]
	delete(dc.pending, k)
	if len(dc.pending) == 0 && ok {
		// A map never gives back the room a storm or the initial list grew
		// it to; an empty one costs nothing to make again.
		dc.pending = map[source.Key]time.Time{}
	}
	return t, ok
}

// observeProgramming records how long a change took to reach the answers:
// from the newest member slice's last-change-trigger-time when this change
// brought a newer one (the whole path from the pod's change, as kube-proxy
// measures it), otherwise from the feeds' delivery of the change.
// Nothing is observed during the initial sync: old trigger times and the
// initial list are not changes.
func (dc *dnsController) observeProgramming(now time.Time, old, cur *answerSet, delivered time.Time, wasDelivered bool) {
	from := delivered
	if cur != nil && old != nil && cur.trigger != 0 && cur.trigger > old.trigger {
		from = time.Unix(0, cur.trigger)
	} else if !wasDelivered {
		return
	}
	if d := now.Sub(from); d >= 0 {
		programmingDuration.Observe(d.Seconds())
	}
}
