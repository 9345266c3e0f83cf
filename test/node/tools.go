//go:build tools

package node

// The stock CoreDNS the node test runs as kubeadm's is CoreDNS's own main,
// every standard plugin linked (images.sh builds it from this module). This
// import, which no build compiles, keeps the modules of the plugins that
// build/coredns leaves out in go.mod and go.sum.
import _ "github.com/coredns/coredns"
