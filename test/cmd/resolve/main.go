// Command resolve looks names up the way applications in a pod do, through
// the pod's /etc/resolv.conf (search path, ndots), with glibc's resolver or
// Go's, and prints what it got as JSON, one object per query, in order. The
// test node's client image holds it (test/node).
//
// Usage: resolve QUERY...
//
//	resolve -watch FILE [-every D] [-tcp] QUERY...
//
// A QUERY is LIB/TYPE/NAME. LIB is glibc or go. TYPE is host (A and AAAA:
// glibc's getaddrinfo, Go's LookupHost), AAAA alone (glibc's res_search,
// Go's LookupIP of ip6), SRV (glibc's res_search, Go's LookupSRV) or PTR
// (NAME is an address: glibc's getnameinfo, Go's LookupAddr).
//
// -watch asks the queries over and over, in turn, one every -every, until it
// is killed, and appends each result to FILE as a JSON line with when it
// was asked and how long it took: a client that never stops asking. -tcp
// asks over TCP: Go's resolver through a dialer that connects over TCP,
// glibc's as its options say (run it with RES_OPTIONS=use-vc).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	// exist), as opposed to NO_DATA; SRV and AAAA queries through glibc only.
	NXDomain bool   `json:"nxdomain,omitempty"`
	Err      string `json:"err,omitempty"`
}

// Timed is a Result of -watch: asked At (Unix milliseconds), answered
// after Millis.
type Timed struct {
	At     int64   `json:"at"`
	Millis float64 `json:"ms"`
	Result
}

func main() {
	watchFile := flag.String("watch", "", "ask the queries over and over, appending each result to this file")
	every := flag.Duration("every", 50*time.Millisecond, "with -watch: a query this often")
	tcp := flag.Bool("tcp", false, "ask over TCP (glibc: set RES_OPTIONS=use-vc as well)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: resolve [-watch FILE [-every D] [-tcp]] LIB/TYPE/NAME...")
		os.Exit(2)
	}
	if *tcp {
		goResolver.Dial = func(ctx context.Context, _, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	if *watchFile != "" {
		if err := watch(*watchFile, *every, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	results := make([]Result, 0, flag.NArg())
	for _, q := range flag.Args() {
		results = append(results, lookup(q))
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// watch asks queries in turn, one every every, forever, appending each
// result to path.
func watch(path string, every time.Duration, queries []string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		start := time.Now()
		r := lookup(queries[i%len(queries)])
		t := Timed{At: start.UnixMilli(), Millis: float64(time.Since(start).Microseconds()) / 1000, Result: r}
		if err := enc.Encode(t); err != nil {
			return err
		}
		<-tick.C
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
	case "AAAA":
		ips, err := goResolver.LookupIP(ctx, "ip6", name)
		if _, ok := errors.AsType[*net.AddrError](err); ok {
			err = errNotFound // only addresses of the other family: no AAAA records
		}
		var out []string
		for _, ip := range ips {
			out = append(out, ip.String())
		}
		return out, err
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
