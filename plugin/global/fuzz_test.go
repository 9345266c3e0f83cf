package global

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// FuzzServeDNS feeds arbitrary query bytes to the plugin. It must never
// panic, and in front of the kubernetes plugin (serving the converged global
// objects) it must answer exactly what the kubernetes plugin alone answers.
//
//	go test ./plugin/global -run '^$' -fuzz FuzzServeDNS -fuzztime 60s
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{dbGlobal, dns.TypeA},
		{"db-0-east.db-global.ns.svc.cluster.local.", dns.TypeAAAA},
		{"_peer._tcp.db-global.ns.svc.cluster.local.", dns.TypeSRV},
		{"192-0-2-30.nohost-global.ns.svc.cluster.local.", dns.TypeTXT},
		{"a.b.c.db-global.ns.svc.Cluster.Local.", dns.TypeSOA},
		{"taken-global.ns.svc.cluster.local.", dns.TypeA},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}

	h := startHarness(f, defaultConfig(), testWorld()...)
	ref := reference(f, h.g.ctrl.src, []string{"cluster.local."}, userService())
	h.g.Next = ref

	f.Fuzz(func(t *testing.T, data []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(data); err != nil {
			return
		}
		got, grc, gerr := exchangeNoPanic(t, h.g, m)
		want, wrc, werr, refPanicked := func() (w *dns.Msg, rc int, err error, panicked bool) {
			defer func() {
				if recover() != nil {
					panicked = true
				}
			}()
			w, rc, err = exchange(ref, m)
			return
		}()
		if refPanicked || len(m.Question) == 0 {
			return // nothing to compare with; not panicking is all we ask
		}
		if grc != wrc || (gerr == nil) != (werr == nil) || normalize(got) != normalize(want) {
			t.Errorf("%s %s:\nglobal (rcode %d, err %v):\n%s\nkubernetes (rcode %d, err %v):\n%s",
				m.Question[0].Name, dns.TypeToString[m.Question[0].Qtype], grc, gerr, normalize(got), wrc, werr, normalize(want))
		}
	})
}

func exchangeNoPanic(t *testing.T, g *Global, m *dns.Msg) (resp *dns.Msg, rcode int, err error) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic on %v: %v", m, fmt.Sprint(r))
		}
	}()
	return exchange(g, m)
}

// FuzzServeDNSViews feeds arbitrary queries to the plugin with the reverse
// and clusterset views on: it must never panic, and every reply must pack.
//
//	go test ./plugin/global -run '^$' -fuzz FuzzServeDNSViews -fuzztime 60s
func FuzzServeDNSViews(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"10.2.0.192.in-addr.arpa.", dns.TypePTR},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", dns.TypePTR},
		{"2.0.192.in-addr.arpa.", dns.TypeA},
		{"db.ns.svc.clusterset.local.", dns.TypeA},
		{"db-0.east.db.ns.svc.clusterset.local.", dns.TypeAAAA},
		{"_peer._tcp.db.ns.svc.clusterset.local.", dns.TypeSRV},
		{"dns-version.clusterset.local.", dns.TypeTXT},
		{"east.db.ns.svc.clusterset.local.", dns.TypeA},
	} {
		b, err := new(dns.Msg).SetQuestion(q.name, q.qtype).Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	h := startHarness(f, viewsConfig(f), testWorld()...)
	f.Fuzz(func(t *testing.T, data []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(data); err != nil {
			return
		}
		resp, _, _ := exchangeNoPanic(t, h.g, m)
		if resp != nil {
			if _, err := resp.Pack(); err != nil {
				t.Errorf("%v: reply does not pack: %v", m.Question, err)
			}
		}
	})
}

// viewsConfig turns on every view: reverse and clusterset.
func viewsConfig(t testing.TB) *config {
	return configFrom(t, "global {\n reverse\n clusterset "+localID+"\n}")
}
