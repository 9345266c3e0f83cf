package kubeclient

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// Options are what differs between the halves' clients.
type Options struct {
	// UserAgent names the client in the API server's logs and audit events.
	UserAgent string
	// QPS and Burst limit the client's requests; zero leaves client-go's
	// defaults (5 and 10).
	QPS   float32
	Burst int
	// Notify is told when the API server starts and stops refusing
	// connections (see QuickReconnect), to log it; nil: nobody.
	Notify func(error)
}

// Configure is the client configuration both halves use: a copy of base
// (a kubeconfig's or the in-cluster one) that talks protobuf, reconnects
// quickly (QuickReconnect), and carries o's user agent and rate limits.
func Configure(base *rest.Config, o Options) *rest.Config {
	rc := rest.CopyConfig(base)
	// Built-in types only: protobuf is cheaper to decode than JSON, as for
	// kube-controller-manager.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.UserAgent = o.UserAgent
	rc.QPS, rc.Burst = o.QPS, o.Burst
	// Feeds, leader election and writes follow the API again within half a second of its
	// return, not after client-go's backoff (up to a minute after repeated
	// restarts).
	QuickReconnect(rc, o.Notify)
	return rc
}
