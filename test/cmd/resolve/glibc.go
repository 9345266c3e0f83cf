//go:build cgo

package main

/*
#cgo LDFLAGS: -lresolv
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <resolv.h>
#include <arpa/nameser.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

// search is res_nsearch: the search path and ndots of /etc/resolv.conf
// applied, as an application calling res_search gets them. It returns the
// answer's length, or -1 with *herr set from h_errno.
static int search(const char *name, int type, unsigned char *buf, int len, int *herr) {
	struct __res_state st;
	memset(&st, 0, sizeof st);
	if (res_ninit(&st) != 0) {
		*herr = NETDB_INTERNAL;
		return -1;
	}
	int n = res_nsearch(&st, name, ns_c_in, type, buf, len);
	*herr = st.res_h_errno;
	res_nclose(&st);
	return n;
}

// hostAddrs fills out with the addresses getaddrinfo gives for name, one per
// line, and returns getaddrinfo's result.
static int hostAddrs(const char *name, char *out, int outlen) {
	struct addrinfo hints, *res, *ai;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(name, NULL, &hints, &res);
	if (rc != 0) return rc;
	out[0] = 0;
	for (ai = res; ai; ai = ai->ai_next) {
		char buf[INET6_ADDRSTRLEN];
		void *a = ai->ai_family == AF_INET ? (void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
			: (void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
		if (!inet_ntop(ai->ai_family, a, buf, sizeof buf)) continue;
		if ((int)(strlen(out) + strlen(buf) + 2) > outlen) break;
		strcat(out, buf);
		strcat(out, "\n");
	}
	freeaddrinfo(res);
	return 0;
}

// nameOf is getnameinfo of an IPv4 or IPv6 address, NI_NAMEREQD.
static int nameOf(const char *addr, char *host, int hostlen) {
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	socklen_t sl;
	if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		ss.ss_family = AF_INET;
		sl = sizeof(struct sockaddr_in);
	} else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		ss.ss_family = AF_INET6;
		sl = sizeof(struct sockaddr_in6);
	} else {
		return EAI_NONAME;
	}
	return getnameinfo((struct sockaddr *)&ss, sl, host, hostlen, NULL, 0, NI_NAMEREQD);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/miekg/dns"
)

// glibc resolves through the C library. nxdomain reports, for SRV, that
// res_search ended with HOST_NOT_FOUND.
func glibc(typ, name string) (records []string, nxdomain bool, err error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	switch typ {
	case "host":
		buf := make([]byte, 64<<10)
		rc := C.hostAddrs(cname, (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
		if rc == C.EAI_NONAME || rc == C.EAI_NODATA {
			return nil, false, errNotFound
		}
		if rc != 0 {
			return nil, false, fmt.Errorf("getaddrinfo: %s", C.GoString(C.gai_strerror(rc)))
		}
		return strings.Fields(C.GoString((*C.char)(unsafe.Pointer(&buf[0])))), false, nil
	case "PTR":
		host := make([]byte, C.NI_MAXHOST)
		rc := C.nameOf(cname, (*C.char)(unsafe.Pointer(&host[0])), C.int(len(host)))
		if rc == C.EAI_NONAME {
			return nil, false, errNotFound
		}
		if rc != 0 {
			return nil, false, fmt.Errorf("getnameinfo: %s", C.GoString(C.gai_strerror(rc)))
		}
		return []string{C.GoString((*C.char)(unsafe.Pointer(&host[0])))}, false, nil
	case "SRV", "AAAA":
		qtype := C.int(C.ns_t_srv)
		if typ == "AAAA" {
			qtype = C.ns_t_aaaa
		}
		buf := make([]byte, 64<<10)
		var herr C.int
		n := C.search(cname, qtype, (*C.uchar)(unsafe.Pointer(&buf[0])), C.int(len(buf)), &herr)
		if n < 0 {
			switch herr {
			case C.HOST_NOT_FOUND:
				return nil, true, errNotFound
			case C.NO_DATA:
				return nil, false, errNotFound
			}
			return nil, false, fmt.Errorf("res_search: h_errno %d", int(herr))
		}
		m := new(dns.Msg)
		if err := m.Unpack(buf[:n]); err != nil {
			return nil, false, fmt.Errorf("res_search answer: %w", err)
		}
		for _, rr := range m.Answer {
			switch r := rr.(type) {
			case *dns.SRV:
				records = append(records, fmt.Sprintf("%d %d %d %s", r.Priority, r.Weight, r.Port, r.Target))
			case *dns.AAAA:
				records = append(records, r.AAAA.String())
			}
		}
		return records, false, nil
	}
	return nil, false, fmt.Errorf("unknown type %q", typ)
}
