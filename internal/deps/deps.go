package deps
import (
 _ "github.com/coredns/coredns/coremain"
 _ "github.com/coredns/coredns/core/plugin"
 _ "github.com/miekg/dns"
 _ "k8s.io/client-go/kubernetes"
 _ "k8s.io/client-go/tools/leaderelection"
 _ "k8s.io/endpointslice/util"
 _ "sigs.k8s.io/controller-runtime/pkg/envtest"
 _ "github.com/prometheus/client_golang/prometheus"
)
