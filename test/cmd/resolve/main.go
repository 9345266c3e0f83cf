// Command resolve looks names up the way applications in a pod do, through
// the pod's /etc/resolv.conf (search path, ndots), with glibc's resolver or
// Go's, and prints what it got as JSON, one object per query, in order. The
// test node's client image holds it (test/node).
//
// Usage: resolve QUERY...
//
// A QUERY is LIB/TYPE/NAME. LIB is glibc or go. TYPE is host (A and AAAA:
// glibc's getaddrinfo, Go's LookupHost), SRV (glibc's res_search, Go's
// LookupSRV) or PTR (NAME is an address: glibc's getnameinfo, Go's
// LookupAddr).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"
)

// Result is one query's outcome.
type Result struct {
	Query   string   `json:"query"`
	Records []string `json:"records,omitempty"`
	// NotFound: the resolver said the name does not exist or has no such
	// records (EAI_NONAME, Go's IsNotFound).
	NotFound bool `json:"notFound,omitempty"`
	// NXDomain: glibc's res_search said HOST_NOT_FOUND (the name does not
	// exist), as opposed to NO_DATA; SRV queries through glibc only.
	NXDomain bool   `json:"nxdomain,omitempty"`
	Err      string `json:"err,omitempty"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: resolve LIB/TYPE/NAME...")
		os.Exit(2)
	}
	results := make([]Result, 0, len(os.Args)-1)
	for _, q := range os.Args[1:] {
		results = append(results, lookup(q))
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func lookup(query string) Result {
	r := Result{Query: query}
	parts := strings.SplitN(query, "/", 3)
	if len(parts) != 3 {
		r.Err = "want LIB/TYPE/NAME"
		return r
	}
	lib, typ, name := parts[0], parts[1], parts[2]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	switch lib {
	case "glibc":
		r.Records, r.NXDomain, err = glibc(typ, name)
	case "go":
		r.Records, err = goLookup(ctx, typ, name)
	default:
		err = fmt.Errorf("unknown resolver %q", lib)
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound, errors.Is(err, errNotFound):
		r.NotFound = true
	case err != nil:
		r.Err = err.Error()
	}
	slices.Sort(r.Records)
	return r
}

// errNotFound is glibc's "no such name or no such records".
var errNotFound = errors.New("not found")

// goResolver is Go's own resolver, whatever the build prefers.
var goResolver = &net.Resolver{PreferGo: true}

func goLookup(ctx context.Context, typ, name string) ([]string, error) {
	switch typ {
	case "host":
		return goResolver.LookupHost(ctx, name)
	case "PTR":
		return goResolver.LookupAddr(ctx, name)
	case "SRV":
		_, srvs, err := goResolver.LookupSRV(ctx, "", "", name)
		var out []string
		for _, s := range srvs {
			out = append(out, fmt.Sprintf("%d %d %d %s", s.Priority, s.Weight, s.Port, s.Target))
		}
		return out, err
	}
	return nil, fmt.Errorf("unknown type %q", typ)
}
