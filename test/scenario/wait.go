package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/miekg/dns"
)

// AwaitAnswer waits until name/qtype asked of addr over network sums up
// (dnsq.Summary) to want, and fails after timeout with the last answer.
func AwaitAnswer(ctx context.Context, network, addr, name string, qtype uint16, want string, timeout, interval time.Duration) error {
	err := await.Poll(ctx, timeout, interval, func(context.Context) string {
		if got := dnsq.Answer(network, addr, name, qtype); got != want {
			return fmt.Sprintf("%q", got)
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("%s %s over %s, want %q: %w", name, dns.TypeToString[qtype], network, want, err)
	}
	return nil
}

// AwaitRecords waits until name has n A records at addr, over UDP without
// EDNS, and fails after timeout with the last answer.
func AwaitRecords(ctx context.Context, addr, name string, n int, timeout time.Duration) error {
	err := await.Poll(ctx, timeout, 100*time.Millisecond, func(context.Context) string {
		r, err := dnsq.Ask("udp", addr, name, dns.TypeA, 0)
		switch {
		case err != nil:
			return err.Error()
		case len(r.Answer) != n:
			return fmt.Sprintf("%s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		return ""
	})
	if err != nil {
		return errors.Join(fmt.Errorf("%s A from %s: want %d records", name, addr, n), err)
	}
	return nil
}

// AwaitBoth waits until name/qtype answers want over UDP, then over TCP,
// within one timeout, and returns how long the UDP answer took.
func AwaitBoth(ctx context.Context, addr, name string, qtype uint16, want string, timeout, interval time.Duration) (time.Duration, error) {
	start := time.Now()
	var udp time.Duration
	for _, network := range []string{"udp", "tcp"} {
		if err := AwaitAnswer(ctx, network, addr, name, qtype, want, max(0, timeout-time.Since(start)), interval); err != nil {
			return 0, err
		}
		if network == "udp" {
			udp = time.Since(start)
		}
	}
	return udp, nil
}
