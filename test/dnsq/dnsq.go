// Package dnsq asks a DNS server questions for the tests and the demo, and
// sums an answer up in one line that tests can compare.
package dnsq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Ask sends one question to addr over network ("udp" or "tcp"). bufsize > 0
// adds an EDNS0 record advertising that buffer size.
func Ask(network, addr, name string, qtype, bufsize uint16) (*dns.Msg, error) {
	m := new(dns.Msg).SetQuestion(name, qtype)
	if bufsize > 0 {
		m.SetEdns0(bufsize, false)
	}
	return Exchange(context.Background(), &dns.Client{Net: network, Timeout: 2 * time.Second}, m, addr)
}

// ErrNotAResponse is a reply that is the query itself. While nothing listens
// on a loopback port, a client whose socket the kernel gave that same port
// as its own (the port is in the ephemeral range) is connected to itself and
// reads its own query back, with its ID, rcode NOERROR and no answer:
// miekg/dns takes it for the reply.
var ErrNotAResponse = errors.New("the reply is the query itself (QR not set): nothing listens on the port and the client's socket is connected to itself")

// Exchange is c.ExchangeContext that refuses a reply that is not a
// response (ErrNotAResponse).
func Exchange(ctx context.Context, c *dns.Client, m *dns.Msg, addr string) (*dns.Msg, error) {
	r, _, err := c.ExchangeContext(ctx, m, addr)
	if err == nil && !r.Response {
		return nil, ErrNotAResponse
	}
	return r, err
}

// Summary is an answer in one line: the rcode, " TC" when truncated, the
// sorted answer data ("192.0.2.1", "5432 db-0.db-global.ns.svc.cluster.local."
// for SRV, the target for PTR, other types by name), and " +soa" when the answer is authoritative with
// the zone's SOA alone in the authority section, as negative answers are.
// For example "NOERROR 192.0.2.1,198.51.100.3" or "NXDOMAIN +soa".
func Summary(m *dns.Msg, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	var data []string
	for _, rr := range m.Answer {
		switch x := rr.(type) {
		case *dns.A:
			data = append(data, x.A.String())
		case *dns.AAAA:
			data = append(data, x.AAAA.String())
		case *dns.SRV:
			data = append(data, fmt.Sprintf("%d %s", x.Port, strings.ToLower(x.Target)))
		case *dns.PTR:
			data = append(data, strings.ToLower(x.Ptr))
		default:
			data = append(data, dns.TypeToString[rr.Header().Rrtype])
		}
	}
	slices.Sort(data)
	out := dns.RcodeToString[m.Rcode]
	if m.Truncated {
		out += " TC"
	}
	if len(data) > 0 {
		out += " " + strings.Join(data, ",")
	}
	if m.Authoritative && len(m.Ns) == 1 && m.Ns[0].Header().Rrtype == dns.TypeSOA {
		out += " +soa"
	}
	return out
}

// Answer asks addr one question over network, without EDNS, and sums the
// answer up (see Summary).
func Answer(network, addr, name string, qtype uint16) string {
	return Summary(Ask(network, addr, name, qtype, 0))
}

// NoError is the Summary of a positive answer with these records' data, in
// any order: NoError("192.0.2.2", "192.0.2.1") is "NOERROR 192.0.2.1,192.0.2.2".
func NoError(data ...string) string {
	data = slices.Clone(data)
	slices.Sort(data)
	return "NOERROR " + strings.Join(data, ",")
}
