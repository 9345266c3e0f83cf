package kubeclient

import (
	"net"
	"time"

	"k8s.io/client-go/rest"
)

// HTTP1 makes rc's clients talk HTTP/1.1, each request on a connection of
// its own, with TCP keepalives that notice a dead API server within about
// 30 s. It is for a reader with a few long watches, as the plugin does.
//
// Over HTTP/2, Go's transport reads up to 4 MiB per stream ahead of its
// reader (the stream's flow-control window), and client-go gives no way to
// lower that short of replacing its transport, which would lose its
// certificate reloading and exec-plugin certificates. A relist that streams
// a large world faster than the index takes the objects in would have that
// read-ahead on the heap, per stream. Over HTTP/1.1 what the reader has not
// taken waits in the kernel's socket buffer and then in the server,
// throttled by TCP's window, so the heap has only what the reader took.
// Nothing is lost by not multiplexing a few watches; what HTTP/2's pings
// did (client-go sends one after 30 s of silence) the keepalives do.
func HTTP1(rc *rest.Config) {
	rc.NextProtos = []string{"http/1.1"}
	dialer := &net.Dialer{
		Timeout: 30 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3,
		},
	}
	// A dialer of its own also keeps the transport out of client-go's
	// cache: it is never shared with another client of the process (the
	// kubernetes plugin's) that wants HTTP/2.
	rc.Dial = dialer.DialContext
}
