package node_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// dnsWire is what the node's interfaces carried of the asker's DNS: over
// UDP, its queries and the answers to them, and every ICMP error sent to
// it; over TCP, each connection's opening and closing segments (SYN, FIN,
// RST); on the asker's own link and on the CoreDNS pods' side of
// kube-proxy's NAT. It is the evidence an excused lookup is matched to: an
// answer the node orphaned (a reply from a pod's own address delivered to
// the asker, which asked the Service's), a refusal (a pod's ICMP port
// unreachable), a query lost to a pod that ended, a connection a pod closed
// first. The test runs in the node's network namespace, so one packet
// socket sees every interface of it.
type dnsWire struct {
	asker, service [4]byte
	askerLink      int // the asker's veth, the node's side

	mu      sync.Mutex
	packets []packet
	fd      int
}

type packetKind uint8

const (
	query packetKind = iota + 1
	reply
	unreachable // ICMP port unreachable for a query; ports are the query's
	opened      // a TCP SYN without ACK: the asker opening a connection
	closed      // a TCP FIN or RST: its sender closing the connection
)

// packet is one DNS message or ICMP error as one interface carried it.
type packet struct {
	at           time.Time
	link         int
	kind         packetKind
	src, dst     [4]byte // for unreachable: the ICMP's
	sport, dport uint16  // for unreachable: the refused query's
	id           uint16  // the DNS message's
	rcode        uint8
	answers      uint16
}

func (p packet) String() string {
	a := func(b [4]byte) string { return netip.AddrFrom4(b).String() }
	switch p.kind {
	case unreachable:
		return fmt.Sprintf("%s link %d: ICMP port unreachable %s -> %s for the query from port %d", p.at.Format("15:04:05.000"), p.link, a(p.src), a(p.dst), p.sport)
	case reply:
		return fmt.Sprintf("%s link %d: reply %s:%d -> %s:%d id %d rcode %d, %d answers", p.at.Format("15:04:05.000"), p.link, a(p.src), p.sport, a(p.dst), p.dport, p.id, p.rcode, p.answers)
	case opened:
		return fmt.Sprintf("%s link %d: TCP SYN %s:%d -> %s:%d", p.at.Format("15:04:05.000"), p.link, a(p.src), p.sport, a(p.dst), p.dport)
	case closed:
		return fmt.Sprintf("%s link %d: TCP FIN or RST %s:%d -> %s:%d", p.at.Format("15:04:05.000"), p.link, a(p.src), p.sport, a(p.dst), p.dport)
	}
	return fmt.Sprintf("%s link %d: query %s:%d -> %s:%d id %d", p.at.Format("15:04:05.000"), p.link, a(p.src), p.sport, a(p.dst), p.dport, p.id)
}

// wireFilter keeps IPv4 packets from or to the asker that are UDP from or to
// port 53, TCP from or to port 53 with SYN, FIN or RST set, or ICMP: the
// kernel copies nothing else to the socket. The socket takes every protocol
// (a bridge port hands its frames to the bridge before any tap of one
// protocol sees them) and reads from the network header on, so the filter
// looks for IPv4 by its version.
func wireFilter(asker [4]byte) []bpf.Instruction {
	addr := binary.BigEndian.Uint32(asker[:])
	const synFinRst = 0x07
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x40, SkipFalse: 16},
		bpf.LoadAbsolute{Off: 12, Size: 4}, // source address
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: addr, SkipTrue: 2},
		bpf.LoadAbsolute{Off: 16, Size: 4}, // destination address
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: addr, SkipFalse: 12},
		bpf.LoadMemShift{Off: 0},          // X: the IP header's length
		bpf.LoadAbsolute{Off: 9, Size: 1}, // protocol
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_ICMP, SkipTrue: 8},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipTrue: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_TCP, SkipFalse: 7},
		bpf.LoadIndirect{Off: 13, Size: 1}, // TCP flags
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: synFinRst, SkipFalse: 5},
		bpf.LoadIndirect{Off: 0, Size: 2}, // source port
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 2},
		bpf.LoadIndirect{Off: 2, Size: 2}, // destination port
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipFalse: 1},
		bpf.RetConstant{Val: 1 << 16},
		bpf.RetConstant{Val: 0},
	}
}

// captureDNS captures the asker's DNS until stop is called.
func captureDNS(asker, service netip.Addr, askerLink int) (w *dnsWire, stop func(), err error) {
	w = &dnsWire{asker: asker.As4(), service: service.As4(), askerLink: askerLink}
	w.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, nil, fmt.Errorf("packet socket: %w", err)
	}
	prog, err := bpf.Assemble(wireFilter(w.asker))
	if err == nil {
		filter := make([]unix.SockFilter, len(prog))
		for i, ins := range prog {
			filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
		}
		err = unix.SetsockoptSockFprog(w.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]})
	}
	if err == nil {
		err = unix.SetsockoptInt(w.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	if err == nil {
		err = unix.SetsockoptTimeval(w.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	}
	if err != nil {
		unix.Close(w.fd)
		return nil, nil, fmt.Errorf("packet socket: %w", err)
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		buf := make([]byte, 1<<16)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, from, err := unix.Recvfrom(w.fd, buf, 0)
			if err != nil {
				continue // the read timeout, to look at done
			}
			ll, ok := from.(*unix.SockaddrLinklayer)
			if !ok {
				continue
			}
			if p, ok := parsePacket(buf[:n]); ok {
				p.at, p.link = time.Now(), ll.Ifindex
				w.add(p)
			}
		}
	}()
	return w, func() { close(done); <-stopped; unix.Close(w.fd) }, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// add keeps p, unless another link than the asker's carried it on the
// Service's side of NAT (the asker's link says as much), or it is the last
// kept packet again as another bridge port carried it.
func (w *dnsWire) add(p packet) {
	if p.link != w.askerLink && (p.src == w.service || p.dst == w.service) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.packets); n > 0 {
		last := w.packets[n-1]
		last.at, last.link = p.at, p.link
		if last == p && p.link != w.askerLink {
			return
		}
	}
	w.packets = append(w.packets, p)
}

// forget drops the packets before t: steps are judged in order.
func (w *dnsWire) forget(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := 0
	for i < len(w.packets) && w.packets[i].at.Before(t) {
		i++
	}
	w.packets = append(w.packets[:0], w.packets[i:]...)
}

// parsePacket reads an IPv4 packet: a DNS query or reply over UDP, a TCP
// connection opened or closed, or an ICMP port unreachable for a query.
func parsePacket(b []byte) (packet, bool) {
	var p packet
	if len(b) < 20 || b[0]>>4 != 4 {
		return p, false
	}
	ihl := int(b[0]&0xf) * 4
	if len(b) < ihl+8 || binary.BigEndian.Uint16(b[6:8])&0x1fff != 0 { // a later fragment
		return p, false
	}
	copy(p.src[:], b[12:16])
	copy(p.dst[:], b[16:20])
	switch b[9] {
	case unix.IPPROTO_UDP:
		p.sport, p.dport = binary.BigEndian.Uint16(b[ihl:]), binary.BigEndian.Uint16(b[ihl+2:])
		dns := b[ihl+8:]
		if len(dns) < 12 {
			return p, false
		}
		p.id, p.kind = binary.BigEndian.Uint16(dns), query
		if flags := binary.BigEndian.Uint16(dns[2:]); flags&0x8000 != 0 {
			p.kind, p.rcode, p.answers = reply, uint8(flags&0xf), binary.BigEndian.Uint16(dns[6:])
		}
		return p, true
	case unix.IPPROTO_TCP:
		if len(b) < ihl+14 {
			return p, false
		}
		p.sport, p.dport = binary.BigEndian.Uint16(b[ihl:]), binary.BigEndian.Uint16(b[ihl+2:])
		const fin, syn, rst, ack = 0x01, 0x02, 0x04, 0x10
		switch flags := b[ihl+13]; {
		case flags&(fin|rst) != 0:
			p.kind = closed
		case flags&syn != 0 && flags&ack == 0:
			p.kind = opened
		default:
			return p, false
		}
		return p, p.sport == 53 || p.dport == 53
	case unix.IPPROTO_ICMP:
		inner := b[ihl+8:]
		if b[ihl] != 3 || b[ihl+1] != 3 || len(inner) < 20 || inner[9] != unix.IPPROTO_UDP {
			return p, false
		}
		iihl := int(inner[0]&0xf) * 4
		if len(inner) < iihl+4 {
			return p, false
		}
		p.kind = unreachable
		p.sport, p.dport = binary.BigEndian.Uint16(inner[iihl:]), binary.BigEndian.Uint16(inner[iihl+2:])
		return p, p.dport == 53
	}
	return p, false
}

// slack is how far apart the asker's clock stamps (milliseconds) and the
// capture's (when the test read the packet) may put one moment.
const slack = 5 * time.Millisecond

// within calls f with each packet kept while l was asked.
func (w *dnsWire) within(l lookup, f func(packet)) {
	from, to := l.asked().Add(-slack), l.answered().Add(slack)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.packets {
		if !p.at.Before(from) && !p.at.After(to) {
			f(p)
		}
	}
}

// evidence is what the wire says befell a lookup's queries from an ended
// pod: the packet that proves it and that pod's address.
type evidence struct {
	pod    netip.Addr
	packet packet
}

// cause looks for what befell lookup l through a pod in ended (its address,
// and when its endpoint first stopped serving or began terminating): an
// answer the node orphaned (a reply from the pod's own address delivered
// to the asker on a port of l's queries, after the pod ended), a refusal
// (the pod's ICMP port unreachable for one of them), or a query lost to it
// (one of them sent to it past NAT, never answered).
func (w *dnsWire) cause(l lookup, ended map[netip.Addr]time.Time) (orphaned, refused, lost *evidence) {
	ports := map[uint16]bool{}
	var sent []packet // past NAT
	// replied are the pods' replies, by pod, port and ID: a resolver may
	// ask again from the same port with the same ID, and another pod answer.
	type podQuery struct {
		pod      [4]byte
		port, id uint16
	}
	replied := map[podQuery]bool{}
	// refusedFrom are the ports whose queries a pod refused: those were
	// not lost.
	type podPort struct {
		pod  [4]byte
		port uint16
	}
	refusedFrom := map[podPort]bool{}
	var candidates []packet
	w.within(l, func(p packet) {
		switch {
		case p.kind == query && p.src == w.asker && p.link == w.askerLink:
			ports[p.sport] = true
		case p.kind == query && p.src == w.asker && p.dst != w.service:
			sent = append(sent, p)
		case p.kind == reply && p.dst == w.asker:
			replied[podQuery{p.src, p.dport, p.id}] = true
			candidates = append(candidates, p)
		case p.kind == unreachable && p.dst == w.asker:
			refusedFrom[podPort{p.src, p.sport}] = true
			candidates = append(candidates, p)
		}
	})
	// endedBy is p as evidence against pod, if pod had ended by then and
	// port is one of l's.
	endedBy := func(p packet, pod [4]byte, port uint16) *evidence {
		addr := netip.AddrFrom4(pod)
		if at, ok := ended[addr]; ok && !p.at.Before(at.Add(-time.Second)) && ports[port] {
			return &evidence{pod: addr, packet: p}
		}
		return nil
	}
	for _, p := range candidates {
		switch {
		case p.kind == reply && p.link == w.askerLink && p.src != w.service && orphaned == nil:
			orphaned = endedBy(p, p.src, p.dport)
		case p.kind == unreachable && p.src != w.service && refused == nil:
			refused = endedBy(p, p.src, p.sport)
		}
	}
	for _, p := range sent {
		if lost == nil && !replied[podQuery{p.dst, p.sport, p.id}] && !refusedFrom[podPort{p.dst, p.sport}] {
			lost = endedBy(p, p.dst, p.sport)
		}
	}
	return orphaned, refused, lost
}

// closedFirst looks for a TCP connection of lookup l that a CoreDNS pod
// closed before the asker did: its FIN or RST, from the pod's own address,
// on a connection the asker opened while l was asked and had not closed.
// A client closes first once it has its answers; a server closing first
// took the connection without answering all it asked.
func (w *dnsWire) closedFirst(l lookup) *evidence {
	ours, closedByAsker := map[uint16]bool{}, map[uint16]bool{}
	var e *evidence
	w.within(l, func(p packet) {
		switch {
		case e != nil:
		case p.kind == opened && p.src == w.asker && p.link == w.askerLink:
			ours[p.sport] = true
		case p.kind == closed && p.src == w.asker:
			closedByAsker[p.sport] = true
		case p.kind == closed && p.dst == w.asker && p.src != w.service && p.sport == 53 &&
			ours[p.dport] && !closedByAsker[p.dport]:
			e = &evidence{pod: netip.AddrFrom4(p.src), packet: p}
		}
	})
	return e
}

// during is every packet kept while l was asked over l's transport: each
// of the asker's containers asks one lookup at a time, so they are that
// lookup's queries and whatever came of them, for a failed step's message.
func (w *dnsWire) during(l lookup) string {
	var b strings.Builder
	fmt.Fprintf(&b, "the asker's DNS over %s on the wire while %s %s was asked (link %d is the asker's):\n",
		l.network, l.asked().Format("15:04:05.000"), l.Query, w.askerLink)
	n := 0
	w.within(l, func(p packet) {
		if tcp := p.kind == opened || p.kind == closed; tcp != (l.network == "tcp") {
			return
		}
		if n++; n <= 100 {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	})
	if n > 100 {
		fmt.Fprintf(&b, "  ... and %d more\n", n-100)
	}
	return b.String()
}
