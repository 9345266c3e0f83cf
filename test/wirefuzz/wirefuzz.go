// Package wirefuzz sends random and malformed DNS messages to a server over
// UDP and TCP for a bounded time and checks that every reply is well formed:
// it unpacks, answers the question's ID, and carries the response bit. It
// knows nothing of the server; pair it with a check that the server process
// is still alive and still answers a real question afterwards.
package wirefuzz

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Options say what to send.
type Options struct {
	// Addr is the server's host:port, for UDP and TCP.
	Addr string
	// Zone is the zone the names are made around, e.g. "cluster.local.".
	Zone string
	// Names are names the server knows (their labels are mutated too).
	Names []string
	// Seed makes a run repeatable.
	Seed uint64
	// Duration bounds the run.
	Duration time.Duration
	// Timeout is how long to wait for one reply; default 300 ms.
	Timeout time.Duration
}

// Report is what a run saw.
type Report struct {
	Sent, Replies, NoReply int
	// Malformed are replies that failed a check, with why (at most 20 kept).
	Malformed []string
	// MalformedCount counts them all.
	MalformedCount int
	ByKind         map[string]int // messages sent by kind of mutation
}

func (r Report) String() string {
	return fmt.Sprintf("%d sent, %d replies, %d without a reply, %d malformed replies", r.Sent, r.Replies, r.NoReply, r.MalformedCount)
}

// Run sends messages until the duration is over or ctx ends.
func Run(ctx context.Context, o Options) (Report, error) {
	o.Timeout = cmp.Or(o.Timeout, 300*time.Millisecond)
	r := rand.New(rand.NewPCG(o.Seed, 1645))
	rep := Report{ByKind: map[string]int{}}
	deadline := time.Now().Add(o.Duration)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		kind, wire, q := message(r, o)
		rep.ByKind[kind]++
		network := "udp"
		if r.IntN(3) == 0 {
			network = "tcp"
		}
		reply, err := exchange(network, o.Addr, wire, o.Timeout, r)
		rep.Sent++
		switch {
		case errors.Is(err, errNoReply):
			rep.NoReply++
			continue
		case err != nil:
			return rep, fmt.Errorf("%s: %w", network, err)
		}
		rep.Replies++
		if why := check(reply, q); why != "" {
			rep.MalformedCount++
			if len(rep.Malformed) < 20 {
				rep.Malformed = append(rep.Malformed, fmt.Sprintf("%s %s (%s): %s", network, kind, describe(q), why))
			}
		}
	}
	return rep, nil
}

var errNoReply = errors.New("no reply")

// exchange sends wire and reads one reply; a server that drops the message
// or closes the connection is no error (errNoReply), one that cannot be
// reached at all is.
func exchange(network, addr string, wire []byte, timeout time.Duration, r *rand.Rand) ([]byte, error) {
	conn, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if network == "udp" {
		if _, err := conn.Write(wire); err != nil {
			return nil, errNoReply
		}
		buf := make([]byte, 65535)
		n, err := conn.Read(buf)
		if err != nil {
			return nil, errNoReply
		}
		return buf[:n], nil
	}
	// TCP: a length prefix, now and then a lying one or the message in pieces.
	length := len(wire)
	if r.IntN(20) == 0 {
		length = r.IntN(65536)
	}
	frame := binary.BigEndian.AppendUint16(nil, uint16(length)) // #nosec G115 -- at most 65535
	frame = append(frame, wire...)
	if r.IntN(10) == 0 && len(frame) > 2 {
		cut := 1 + r.IntN(len(frame)-1)
		_, _ = conn.Write(frame[:cut])
		time.Sleep(time.Millisecond)
		frame = frame[cut:]
	}
	if _, err := conn.Write(frame); err != nil {
		return nil, errNoReply
	}
	var lenBuf [2]byte
	if _, err := io.ReadFull(conn, lenBuf[:]); err != nil {
		return nil, errNoReply
	}
	reply := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
	if _, err := io.ReadFull(conn, reply); err != nil {
		return nil, fmt.Errorf("a reply shorter than its length prefix: %w", err)
	}
	return reply, nil
}

// check says what is wrong with a reply to q (nil: a message that did not
// parse), or "".
func check(wire []byte, q *dns.Msg) string {
	m := new(dns.Msg)
	if err := m.Unpack(wire); err != nil {
		return "does not unpack: " + err.Error()
	}
	if !m.Response {
		return "no response bit"
	}
	if q != nil && m.Id != q.Id {
		return fmt.Sprintf("id %d answers query id %d", m.Id, q.Id)
	}
	if q != nil && len(m.Question) > 0 && len(q.Question) > 0 && !strings.EqualFold(m.Question[0].Name, q.Question[0].Name) {
		return fmt.Sprintf("question %q answers %q", m.Question[0].Name, q.Question[0].Name)
	}
	return ""
}

func describe(q *dns.Msg) string {
	if q == nil || len(q.Question) == 0 {
		return "unparsable or no question"
	}
	return q.Question[0].Name + " " + dns.TypeToString[q.Question[0].Qtype]
}

// message makes one message: its kind, its bytes and, when it parses, the
// message itself.
func message(r *rand.Rand, o Options) (string, []byte, *dns.Msg) {
	switch r.IntN(10) {
	case 0:
		b := make([]byte, r.IntN(600))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return "random bytes", b, parse(b)
	case 1:
		// A valid query cut short.
		_, wire, _ := valid(r, o)
		cut := r.IntN(len(wire) + 1)
		return "truncated", wire[:cut], parse(wire[:cut])
	case 2:
		// A valid query with bytes flipped.
		_, wire, _ := valid(r, o)
		for range 1 + r.IntN(4) {
			wire[r.IntN(len(wire))] ^= byte(1 + r.IntN(255))
		}
		return "bit flips", wire, parse(wire)
	case 3:
		return "compression loop", compressionLoop(r), nil
	default:
		return valid(r, o)
	}
}

func parse(b []byte) *dns.Msg {
	m := new(dns.Msg)
	if m.Unpack(b) != nil {
		return nil
	}
	return m
}

// valid makes a well-formed but odd query: names around the zone and the
// known names, odd flags, opcodes, classes, types, counts and EDNS.
func valid(r *rand.Rand, o Options) (string, []byte, *dns.Msg) {
	m := new(dns.Msg)
	m.Id = uint16(r.Uint32()) // #nosec G115 -- any 16 bits
	kind := "query"
	name := randomName(r, o)
	qtype := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeTXT, dns.TypeANY, dns.TypeAXFR,
		dns.TypeIXFR, dns.TypeSOA, dns.TypeNS, dns.TypeCNAME, dns.TypeHTTPS, 0, 65535, uint16(r.Uint32())}[r.IntN(15)] // #nosec G115
	m.SetQuestion(name, qtype)
	switch r.IntN(12) {
	case 0:
		m.Question[0].Qclass = []uint16{dns.ClassCHAOS, dns.ClassANY, dns.ClassNONE, 0, 65535}[r.IntN(5)]
		kind = "odd class"
	case 1:
		m.Opcode = []int{dns.OpcodeIQuery, dns.OpcodeStatus, dns.OpcodeNotify, dns.OpcodeUpdate, 15}[r.IntN(5)]
		kind = "odd opcode"
	case 2:
		m.Question = append(m.Question, dns.Question{Name: randomName(r, o), Qtype: dns.TypeA, Qclass: dns.ClassINET})
		kind = "two questions"
	case 3:
		m.Question = nil
		kind = "no question"
	case 4:
		m.Response, m.Truncated, m.Authoritative = r.IntN(2) == 0, r.IntN(2) == 0, true
		m.Rcode = r.IntN(16)
		kind = "odd flags"
	case 5:
		m.SetEdns0([]uint16{0, 1, 511, 512, 1232, 4096, 65535}[r.IntN(7)], r.IntN(2) == 0)
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: uint16(r.IntN(65536)), Data: make([]byte, r.IntN(300))}) // #nosec G115
		if r.IntN(3) == 0 {
			opt.SetVersion(uint8(1 + r.IntN(255))) // #nosec G115 -- a byte
		}
		kind = "odd EDNS"
	case 6:
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.IPv4(192, 0, 2, 1)}}
		kind = "query with answers"
	}
	wire, err := m.Pack()
	if err != nil {
		return "unpackable query", []byte{}, nil
	}
	// As the server reads it: names come back escaped.
	return kind, wire, parse(wire)
}

// randomName is a name near the zone: a known name, mutated or not, or one
// made of odd labels (escapes, underscores, case, long labels, many labels).
func randomName(r *rand.Rand, o Options) string {
	if len(o.Names) > 0 && r.IntN(2) == 0 {
		n := o.Names[r.IntN(len(o.Names))]
		switch r.IntN(4) {
		case 0:
			return strings.ToUpper(n)
		case 1:
			return randomLabel(r) + "." + n
		}
		return n
	}
	var labels []string
	for range r.IntN(7) {
		labels = append(labels, randomLabel(r))
	}
	name := strings.Join(append(labels, o.Zone), ".")
	if _, ok := dns.IsDomainName(name); len(name) > 250 || !ok {
		return o.Zone
	}
	return dns.Fqdn(name)
}

func randomLabel(r *rand.Rand) string {
	pool := []string{"svc", "ns", "db-global", "db", "_peer", "_tcp", "_", "x-east", "in-addr", "arpa", "1", "255",
		"dns-version", "-", "a\\.b", "\\000", "UPPER", strings.Repeat("l", 63), "é"}
	if r.IntN(4) == 0 {
		b := make([]byte, 1+r.IntN(20))
		for i := range b {
			b[i] = "abcdefghijklmnopqrstuvwxyz0123456789-_"[r.IntN(38)]
		}
		return string(b)
	}
	return pool[r.IntN(len(pool))]
}

// compressionLoop is a query whose name is a compression pointer to itself.
func compressionLoop(r *rand.Rand) []byte {
	b := []byte{byte(r.IntN(256)), byte(r.IntN(256)), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	return append(b, 0xC0, 12, 0, 1, 0, 1)
}
