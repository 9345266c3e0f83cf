package wirefuzz

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/run"
	"github.com/miekg/dns"
)

// serve runs a miekg/dns server on a free loopback port (free for UDP and
// TCP alike) with handler h, and returns its address.
func serve(t *testing.T, h dns.HandlerFunc) string {
	t.Helper()
	port, err := run.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	udp, tcp := &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: l, Handler: h}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
	return addr
}

func opts(addr string) Options {
	return Options{Addr: addr, Zone: "cluster.local.", Names: []string{"db-global.ns.svc.cluster.local."},
		Seed: 1, Duration: 2 * time.Second, Timeout: 100 * time.Millisecond}
}

// A well-behaved server: replies are well formed, and every kind of message
// was sent.
func TestWellFormedServer(t *testing.T) {
	addr := serve(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetRcode(r, dns.RcodeNameError)
		_ = w.WriteMsg(m)
	})
	rep, err := Run(context.Background(), opts(addr))
	if err != nil {
		t.Fatal(err)
	}
	if rep.MalformedCount != 0 || rep.Replies == 0 {
		t.Errorf("%v: %v", rep, rep.Malformed)
	}
	for _, kind := range []string{"random bytes", "truncated", "bit flips", "compression loop", "odd EDNS", "two questions"} {
		if rep.ByKind[kind] == 0 {
			t.Errorf("no %q message sent in %v", kind, rep.ByKind)
		}
	}
}

// A server that answers with the wrong ID, or with garbage, is caught.
func TestMalformedRepliesCaught(t *testing.T) {
	for name, h := range map[string]dns.HandlerFunc{
		"wrong id": func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg).SetReply(r)
			m.Id++
			_ = w.WriteMsg(m)
		},
		"garbage": func(w dns.ResponseWriter, r *dns.Msg) { _, _ = w.Write([]byte{1, 2, 3}) },
	} {
		t.Run(name, func(t *testing.T) {
			o := opts(serve(t, h))
			o.Duration = 500 * time.Millisecond
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if rep.MalformedCount == 0 || !strings.Contains(strings.Join(rep.Malformed, "\n"), map[string]string{"wrong id": "answers query id", "garbage": "does not unpack"}[name]) {
				t.Errorf("%v: %v", rep, rep.Malformed)
			}
		})
	}
}

// A server that is gone is an error, not a clean run.
func TestServerGone(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	o := opts(addr)
	o.Duration = time.Second
	if _, err := Run(context.Background(), o); err == nil {
		t.Error("no error with nothing listening over TCP")
	}
}
