package node_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

var (
	askerAddr   = netip.MustParseAddr("10.244.0.9")
	serviceAddr = netip.MustParseAddr("10.96.0.10")
	endedPod    = netip.MustParseAddr("10.244.0.5")
	livePod     = netip.MustParseAddr("10.244.0.6")
)

// ipv4 is an IPv4 packet of proto from src to dst around payload.
func ipv4(src, dst netip.Addr, proto byte, payload []byte) []byte {
	b := make([]byte, 20, 20+len(payload))
	b[0], b[8], b[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(b[2:], uint16(20+len(payload)))
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	return append(b, payload...)
}

// dnsOverUDP is a UDP datagram with a DNS header: a reply when rcode >= 0.
func dnsOverUDP(sport, dport, id uint16, rcode int, answers uint16) []byte {
	b := make([]byte, 8+12)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[8:], id)
	if rcode >= 0 {
		binary.BigEndian.PutUint16(b[10:], 0x8000|uint16(rcode))
		binary.BigEndian.PutUint16(b[14:], answers)
	}
	return b
}

// tcpSegment is a TCP header with flags (FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10).
func tcpSegment(sport, dport uint16, flags byte) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12], b[13] = 5<<4, flags
	return b
}

// portUnreachable is from's ICMP port unreachable for the query q.
func portUnreachable(from, to netip.Addr, q []byte) []byte {
	return ipv4(from, to, unix.IPPROTO_ICMP, append([]byte{3, 3, 0, 0, 0, 0, 0, 0}, q[:28]...))
}

func TestTheWireFilterKeepsTheAskersDNSAndICMP(t *testing.T) {
	vm, err := bpf.NewVM(wireFilter(askerAddr.As4()))
	if err != nil {
		t.Fatal(err)
	}
	other := netip.MustParseAddr("10.244.0.7")
	q := ipv4(askerAddr, serviceAddr, unix.IPPROTO_UDP, dnsOverUDP(40000, 53, 7, -1, 0))
	for name, c := range map[string]struct {
		packet []byte
		kept   bool
	}{
		"the asker's query":            {q, true},
		"a reply to the asker":         {ipv4(endedPod, askerAddr, unix.IPPROTO_UDP, dnsOverUDP(53, 40000, 7, 0, 9)), true},
		"an ICMP error to the asker":   {portUnreachable(endedPod, askerAddr, ipv4(askerAddr, endedPod, unix.IPPROTO_UDP, dnsOverUDP(40000, 53, 7, -1, 0))), true},
		"another pod's query":          {ipv4(other, serviceAddr, unix.IPPROTO_UDP, dnsOverUDP(40000, 53, 7, -1, 0)), false},
		"the asker's UDP off port 53":  {ipv4(askerAddr, other, unix.IPPROTO_UDP, dnsOverUDP(40000, 5353, 7, -1, 0)), false},
		"the asker's TCP SYN":          {ipv4(askerAddr, serviceAddr, unix.IPPROTO_TCP, tcpSegment(40000, 53, 0x02)), true},
		"a pod's FIN to the asker":     {ipv4(endedPod, askerAddr, unix.IPPROTO_TCP, tcpSegment(53, 40000, 0x11)), true},
		"a pod's RST to the asker":     {ipv4(endedPod, askerAddr, unix.IPPROTO_TCP, tcpSegment(53, 40000, 0x04)), true},
		"the asker's TCP data":         {ipv4(askerAddr, serviceAddr, unix.IPPROTO_TCP, tcpSegment(40000, 53, 0x18)), false},
		"the asker's FIN off port 53":  {ipv4(askerAddr, other, unix.IPPROTO_TCP, tcpSegment(40000, 443, 0x11)), false},
		"another pod's TCP SYN":        {ipv4(other, serviceAddr, unix.IPPROTO_TCP, tcpSegment(40000, 53, 0x02)), false},
		"a reply to another pod":       {ipv4(endedPod, other, unix.IPPROTO_UDP, dnsOverUDP(53, 40000, 7, 0, 9)), false},
		"an ICMP error to another pod": {portUnreachable(endedPod, other, q), false},
		"not IPv4, IPv4's bytes else":  {append([]byte{0x65}, q[1:]...), false},
	} {
		n, err := vm.Run(c.packet)
		if err != nil {
			t.Fatal(err)
		}
		if kept := n > 0; kept != c.kept {
			t.Errorf("%s: kept %v, want %v", name, kept, c.kept)
		}
	}
}

func TestAPacketIsReadAsTheWireCarriedIt(t *testing.T) {
	q := ipv4(askerAddr, serviceAddr, unix.IPPROTO_UDP, dnsOverUDP(40000, 53, 7, -1, 0))
	if p, ok := parsePacket(q); !ok || p.kind != query || p.sport != 40000 || p.id != 7 || p.src != askerAddr.As4() {
		t.Errorf("query read as %+v, %v", p, ok)
	}
	r := ipv4(endedPod, askerAddr, unix.IPPROTO_UDP, dnsOverUDP(53, 40000, 7, 3, 0))
	if p, ok := parsePacket(r); !ok || p.kind != reply || p.dport != 40000 || p.rcode != 3 || p.src != endedPod.As4() {
		t.Errorf("reply read as %+v, %v", p, ok)
	}
	u := portUnreachable(endedPod, askerAddr, ipv4(askerAddr, endedPod, unix.IPPROTO_UDP, dnsOverUDP(40000, 53, 7, -1, 0)))
	if p, ok := parsePacket(u); !ok || p.kind != unreachable || p.sport != 40000 || p.src != endedPod.As4() {
		t.Errorf("port unreachable read as %+v, %v", p, ok)
	}
	for flags, want := range map[byte]packetKind{0x02: opened, 0x11: closed, 0x14: closed, 0x12: 0, 0x18: 0} {
		p, ok := parsePacket(ipv4(askerAddr, serviceAddr, unix.IPPROTO_TCP, tcpSegment(40000, 53, flags)))
		if ok != (want != 0) || ok && (p.kind != want || p.sport != 40000 || p.dport != 53) {
			t.Errorf("TCP flags %#x read as %+v, %v; want kind %d", flags, p, ok, want)
		}
	}
	// The asker's own refusal of an orphaned answer is no refusal of a query.
	refusal := portUnreachable(askerAddr, endedPod, r)
	if p, ok := parsePacket(refusal); ok {
		t.Errorf("the asker's ICMP for a reply read as %+v", p)
	}
}

// TestOnlyWhatTheWireProvesIsExcused holds judge to its evidence: a slow or
// failed lookup is excused only by a packet of its own queries through a
// pod that ended, one lookup a pod; refused and lost ones only where
// kubeadm's pods end.
func TestOnlyWhatTheWireProvesIsExcused(t *testing.T) {
	const askerLink, podLink = 11, 12
	base := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	ended := map[netip.Addr]time.Time{endedPod: at(0)}
	// The wire of one slow lookup from port, asked at ms, whose reply went
	// as how says.
	type lookupOnWire struct {
		how  string
		port uint16
	}
	wireOf := func(ls ...lookupOnWire) *dnsWire {
		w := &dnsWire{asker: askerAddr.As4(), service: serviceAddr.As4(), askerLink: askerLink}
		for i, l := range ls {
			start := 10_000 * (i + 1)
			q := packet{kind: query, src: askerAddr.As4(), dst: serviceAddr.As4(), sport: l.port, dport: 53, id: 7}
			add := func(ms, link int, p packet) { p.at, p.link = at(start+ms), link; w.add(p) }
			add(1, askerLink, q)
			past := q
			past.dst = endedPod.As4()
			switch l.how {
			case "orphaned", "orphaned by a live pod":
				pod := endedPod
				if l.how == "orphaned by a live pod" {
					pod, past.dst = livePod, livePod.As4()
				}
				add(2, podLink, past)
				add(3, askerLink, packet{kind: reply, src: pod.As4(), dst: askerAddr.As4(), sport: 53, dport: l.port, id: 7, answers: 9})
			case "orphaned on another port":
				add(3, askerLink, packet{kind: reply, src: endedPod.As4(), dst: askerAddr.As4(), sport: 53, dport: l.port + 1, id: 7})
			case "refused":
				add(2, podLink, past)
				add(3, podLink, packet{kind: unreachable, src: endedPod.As4(), dst: askerAddr.As4(), sport: l.port, dport: 53})
			case "lost":
				add(2, podLink, past)
			case "refused, then its retry lost":
				add(2, podLink, past)
				add(3, podLink, packet{kind: unreachable, src: endedPod.As4(), dst: askerAddr.As4(), sport: l.port, dport: 53})
				retried := past
				retried.sport = l.port + 50
				add(4, askerLink, packet{kind: query, src: askerAddr.As4(), dst: serviceAddr.As4(), sport: retried.sport, dport: 53, id: 7})
				add(4, podLink, retried)
			}
			// The retry, answered through the Service; glibc asks again from
			// the same port with the same ID.
			retry := q
			if l.how != "lost, asked again as glibc does" {
				retry.sport, retry.id = l.port+100, 8
			} else {
				add(2, podLink, past)
			}
			add(5000, askerLink, retry)
			answered := retry
			answered.dst = livePod.As4()
			add(5001, podLink+1, answered)
			add(5002, podLink+1, packet{kind: reply, src: livePod.As4(), dst: askerAddr.As4(), sport: 53, dport: retry.sport, id: retry.id, answers: 9})
			add(5002, askerLink, packet{kind: reply, src: serviceAddr.As4(), dst: askerAddr.As4(), sport: 53, dport: retry.sport, id: retry.id, answers: 9})
		}
		return w
	}
	want := answers{"go/host/db": {Records: []string{"192.0.2.1"}}}
	tr := &truth{spans: []span{{from: base, want: want}}}
	slow := func(i int) lookup {
		return lookup{At: at(10_000 * (i + 1)).UnixMilli(), Millis: 5003, network: "udp",
			result: result{Query: "go/host/db", Records: []string{"192.0.2.1"}}}
	}
	refusedLookup := func(i int) lookup {
		l := slow(i)
		l.Millis, l.result = 4, result{Query: "go/host/db", Err: "read: connection refused"}
		return l
	}
	failedAfterRetry := func(i int) lookup {
		l := slow(i)
		l.result = result{Query: "go/host/db", Err: "getaddrinfo: Temporary failure in name resolution"}
		return l
	}
	for name, c := range map[string]struct {
		wire    []lookupOnWire
		lookups []lookup
		allows  allowance
		want    tally
	}{
		"an orphaned answer from an ended pod":         {[]lookupOnWire{{"orphaned", 40000}}, []lookup{slow(0)}, strict, tally{Orphaned: 1}},
		"a second one from the same pod":               {[]lookupOnWire{{"orphaned", 40000}, {"orphaned", 41000}}, []lookup{slow(0), slow(1)}, strict, tally{Orphaned: 1, Slow: 1}},
		"an orphaned answer from a live pod":           {[]lookupOnWire{{"orphaned by a live pod", 40000}}, []lookup{slow(0)}, strict, tally{Slow: 1}},
		"an orphaned answer to another port":           {[]lookupOnWire{{"orphaned on another port", 40000}}, []lookup{slow(0)}, strict, tally{Slow: 1}},
		"a refusal where no pod of kubeadm's ends":     {[]lookupOnWire{{"refused", 40000}}, []lookup{refusedLookup(0)}, strict, tally{Failed: 1}},
		"a refusal where kubeadm's pods end":           {[]lookupOnWire{{"refused", 40000}}, []lookup{refusedLookup(0)}, kubeadmPodsEnd, tally{Refused: 1}},
		"a failure without a refusal on the wire":      {[]lookupOnWire{{"lost", 40000}}, []lookup{refusedLookup(0)}, kubeadmPodsEnd, tally{Failed: 1}},
		"a query lost where kubeadm's pods end":        {[]lookupOnWire{{"lost", 40000}}, []lookup{slow(0)}, kubeadmPodsEnd, tally{Lost: 1}},
		"a query lost where no pod of kubeadm's ends":  {[]lookupOnWire{{"lost", 40000}}, []lookup{slow(0)}, strict, tally{Slow: 1}},
		"a query lost, asked again from its port":      {[]lookupOnWire{{"lost, asked again as glibc does", 40000}}, []lookup{slow(0)}, kubeadmPodsEnd, tally{Lost: 1}},
		"a refusal and a query lost by one pod":        {[]lookupOnWire{{"refused", 40000}, {"lost", 41000}}, []lookup{refusedLookup(0), slow(1)}, kubeadmPodsEnd, tally{Refused: 1, Lost: 1}},
		"refused, its retry lost, failed":              {[]lookupOnWire{{"refused, then its retry lost", 40000}}, []lookup{failedAfterRetry(0)}, kubeadmPodsEnd, tally{Refused: 1}},
		"refused, failed after a retry not lost":       {[]lookupOnWire{{"refused", 40000}}, []lookup{failedAfterRetry(0)}, kubeadmPodsEnd, tally{Failed: 1}},
		"refused, its retry lost, no pod of kubeadm's": {[]lookupOnWire{{"refused, then its retry lost", 40000}}, []lookup{failedAfterRetry(0)}, strict, tally{Failed: 1}},
	} {
		a := &askerLog{all: c.lookups}
		got := a.judge(tr, nil, wireOf(c.wire...), ended, c.allows, name, base, at(60_000))
		if got.Orphaned != c.want.Orphaned || got.Refused != c.want.Refused || got.Lost != c.want.Lost ||
			got.Failed != c.want.Failed || got.Wrong != c.want.Wrong || got.Slow != c.want.Slow {
			t.Errorf("%s: %s", name, got)
		}
		if got.Ended != 1 {
			t.Errorf("%s: %d pods ended, want 1", name, got.Ended)
		}
	}
	// Nothing is excused where no pod ended.
	a := &askerLog{all: []lookup{slow(0)}}
	if got := a.judge(tr, nil, wireOf(lookupOnWire{"orphaned", 40000}), nil, kubeadmPodsEnd, "none ended", base, at(60_000)); got.Slow != 1 {
		t.Errorf("an orphaned answer where no pod ended: %s", got)
	}
}

// TestOnlyAConnectionAPodClosedFirstInAReloadIsExcused holds judge to its
// TCP evidence: a failed TCP lookup is excused only in a reload, only where
// a pod closed one of the lookup's own connections before the asker did,
// one lookup a pod.
func TestOnlyAConnectionAPodClosedFirstInAReloadIsExcused(t *testing.T) {
	const askerLink, podLink = 11, 12
	base := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// The wire of the i-th failed lookup over TCP from port, whose
	// connection went to pod and was closed first as how says.
	type connection struct {
		how  string
		port uint16
		pod  netip.Addr
	}
	wireOf := func(cs ...connection) *dnsWire {
		w := &dnsWire{asker: askerAddr.As4(), service: serviceAddr.As4(), askerLink: askerLink}
		for i, c := range cs {
			start := 10_000 * (i + 1)
			add := func(ms, link int, kind packetKind, src, dst netip.Addr, sport, dport uint16) {
				w.add(packet{at: at(start + ms), link: link, kind: kind, src: src.As4(), dst: dst.As4(), sport: sport, dport: dport})
			}
			port := c.port
			if c.how == "on a connection opened before the lookup" {
				add(-100, askerLink, opened, askerAddr, serviceAddr, port, 53)
			} else {
				add(1, askerLink, opened, askerAddr, serviceAddr, port, 53)
			}
			add(1, podLink, opened, askerAddr, c.pod, port, 53)
			podCloses := func(ms int) {
				add(ms, podLink, closed, c.pod, askerAddr, 53, port)
				add(ms, askerLink, closed, serviceAddr, askerAddr, 53, port)
			}
			askerCloses := func(ms int) {
				add(ms, askerLink, closed, askerAddr, serviceAddr, port, 53)
				add(ms, podLink, closed, askerAddr, c.pod, port, 53)
			}
			if c.how == "by the asker first" {
				askerCloses(2)
				podCloses(3)
			} else {
				podCloses(2)
				askerCloses(3)
			}
		}
		return w
	}
	want := answers{"glibc/host/db": {Records: []string{"192.0.2.1"}}}
	tr := &truth{spans: []span{{from: base, want: want}}}
	failed := func(i int) lookup {
		return lookup{At: at(10_000 * (i + 1)).UnixMilli(), Millis: 4, network: "tcp",
			result: result{Query: "glibc/host/db", Err: "Temporary failure in name resolution"}}
	}
	// glibc over TCP may report a name not found, where the search list's
	// first name lost its answers to the close, rather than fail.
	notFound := func(i int) lookup {
		l := failed(i)
		l.Err, l.NotFound = "", true
		return l
	}
	otherRecords := func(i int) lookup {
		l := failed(i)
		l.Err, l.Records = "", []string{"192.0.2.99"}
		return l
	}
	for name, c := range map[string]struct {
		wire    []connection
		lookups []lookup
		allows  allowance
		want    tally
	}{
		"a pod closed first in a reload":        {[]connection{{"by the pod first", 40000, livePod}}, []lookup{failed(0)}, reloads, tally{Closed: 1}},
		"a pod closed first, no reload":         {[]connection{{"by the pod first", 40000, livePod}}, []lookup{failed(0)}, strict, tally{Failed: 1}},
		"the asker closed first":                {[]connection{{"by the asker first", 40000, livePod}}, []lookup{failed(0)}, reloads, tally{Failed: 1}},
		"a connection not the lookup's":         {[]connection{{"on a connection opened before the lookup", 40000, livePod}}, []lookup{failed(0)}, reloads, tally{Failed: 1}},
		"two lookups closed by one pod":         {[]connection{{"by the pod first", 40000, livePod}, {"by the pod first", 41000, livePod}}, []lookup{failed(0), failed(1)}, reloads, tally{Closed: 1, Failed: 1}},
		"two lookups closed by two pods":        {[]connection{{"by the pod first", 40000, livePod}, {"by the pod first", 41000, endedPod}}, []lookup{failed(0), failed(1)}, reloads, tally{Closed: 2}},
		"a pod closed first, the lookup's UDP":  {[]connection{{"by the pod first", 40000, livePod}}, []lookup{func() lookup { l := failed(0); l.network = "udp"; return l }()}, reloads, tally{Failed: 1}},
		"a pod closed first, found nothing":     {[]connection{{"by the pod first", 40000, livePod}}, []lookup{notFound(0)}, reloads, tally{Closed: 1}},
		"a pod closed first, other records":     {[]connection{{"by the pod first", 40000, livePod}}, []lookup{otherRecords(0)}, reloads, tally{Wrong: 1}},
		"the asker closed first, found nothing": {[]connection{{"by the asker first", 40000, livePod}}, []lookup{notFound(0)}, reloads, tally{Wrong: 1}},
	} {
		a := &askerLog{all: c.lookups}
		got := a.judge(tr, nil, wireOf(c.wire...), nil, c.allows, name, base, at(60_000))
		if got.Closed != c.want.Closed || got.Failed != c.want.Failed || got.Wrong != c.want.Wrong || got.Slow != 0 {
			t.Errorf("%s: %s", name, got)
		}
	}
}

// TestKubeadmsStepsLoseAtMostMaxKubeadmLost holds tally.problems to the
// bound the docs state, whatever befell the lookups.
func TestKubeadmsStepsLoseAtMostMaxKubeadmLost(t *testing.T) {
	span := tally{Took: time.Second, By: map[string]int{}, Ended: 2 * maxKubeadmLost}
	for _, k := range resolverTransports {
		span.By[k] = minRate
	}
	span.Orphaned, span.Refused, span.Lost = 1, 1, maxKubeadmLost-2
	if got := span.problems(kubeadmPodsEnd); len(got) != 0 {
		t.Errorf("%d lost: %q", maxKubeadmLost, got)
	}
	span.Lost++
	if got := span.problems(kubeadmPodsEnd); len(got) != 1 {
		t.Errorf("%d lost: %q, want one problem", maxKubeadmLost+1, got)
	}
}

func TestAnEndpointEndsWhenItStopsServingTerminatesOrGoes(t *testing.T) {
	base := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	a, b, c := netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("10.244.0.6"), netip.MustParseAddr("10.244.0.7")
	state := func(s int, slice string, serving ...netip.Addr) endpointState {
		st := endpointState{at: base.Add(time.Duration(s) * time.Second), slice: slice, serving: map[netip.Addr]bool{}}
		for _, addr := range serving {
			st.serving[addr] = true
		}
		return st
	}
	h := &endpointHistory{states: []endpointState{
		state(0, "kube-dns-1", a, b, c),
		state(5, "kube-dns-1", b, c), // a stopped serving before the span
		state(12, "kube-dns-1", c),   // b terminating
		state(14, "kube-dns-1", a, c),
		state(16, "kube-dns-1"), // every endpoint gone
		state(30, "kube-dns-1"), // after the span
	}}
	got := h.ended(base.Add(10*time.Second), base.Add(20*time.Second))
	want := map[netip.Addr]time.Time{b: base.Add(12 * time.Second), a: base.Add(16 * time.Second), c: base.Add(16 * time.Second)}
	if len(got) != len(want) {
		t.Fatalf("ended %v, want %v", got, want)
	}
	for addr, at := range want {
		if !got[addr].Equal(at) {
			t.Errorf("%s ended at %v, want %v", addr, got[addr], at)
		}
	}
}

// TestAnOldAnswerIsRightOnlyWithinTheLag: once the truth is settled, an
// answer of the span it ended is wrong, but for an asker behind a cache
// (NodeLocal DNSCache) within its lag.
func TestAnOldAnswerIsRightOnlyWithinTheLag(t *testing.T) {
	old, now := answers{"go/host/db": {Records: []string{"192.0.2.1"}}}, answers{"go/host/db": {Records: []string{"192.0.2.2"}}}
	tr := &truth{spans: []span{{from: time.Unix(0, 0), to: time.Unix(100, 0), want: old}, {from: time.Unix(90, 0), want: now}}}
	asked := func(sec int) lookup {
		return lookup{At: int64(sec) * 1000, Millis: 2, result: result{Query: "go/host/db", Records: []string{"192.0.2.1"}}}
	}
	for _, c := range []struct {
		at   int
		lag  time.Duration
		want bool
	}{{99, 0, true}, {101, 0, false}, {101, nodeLocalLag("go/host/db"), true}, {104, nodeLocalLag("go/host/db"), true}, {106, nodeLocalLag("go/host/db"), false}} {
		if got := tr.right(asked(c.at), c.lag); got != c.want {
			t.Errorf("the old answer asked at %d s with a lag of %v: right %v, want %v", c.at, c.lag, got, c.want)
		}
	}
}

func TestBetweenIsEachStateOfPodsLeavingOneAtATime(t *testing.T) {
	srv := func(w int, hosts ...string) []string {
		var out []string
		for _, h := range hosts {
			out = append(out, fmt.Sprintf("0 %d 5432 %s.", w, h))
		}
		return out
	}
	all := answers{
		"go/host/db":       {Records: []string{"1", "2", "3"}},
		"go/SRV/_db._tcp":  {Records: srv(33, "a", "b", "c")},
		"go/host/a.db":     {Records: []string{"2"}},
		"go/host/unmoved":  {Records: []string{"9"}},
		"glibc/PTR/either": {Any: [][]string{{"x"}, {"y"}}},
	}
	less := answers{
		"go/host/db":       {Records: []string{"1"}},
		"go/SRV/_db._tcp":  {Records: srv(100, "a")},
		"go/host/a.db":     {NotFound: true},
		"go/host/unmoved":  {Records: []string{"9"}},
		"glibc/PTR/either": {Any: [][]string{{"x"}}},
	}
	var got []string
	for _, s := range between(all, less) {
		for q, r := range s {
			if !slices.Equal(r.Records, all[q].Records) {
				got = append(got, q+" "+strings.Join(r.Records, ","))
			}
		}
	}
	slices.Sort(got)
	want := []string{
		"go/SRV/_db._tcp 0 50 5432 a.,0 50 5432 b.", "go/SRV/_db._tcp 0 50 5432 a.,0 50 5432 c.",
		"go/host/db 1,2", "go/host/db 1,3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("between: %q, want %q", got, want)
	}
}
