// Package aggregate turns the members of one base service (the local headless
// service and Linkerd's headless mirrors of it) into the global view: addresses,
// per-pod hostnames, readiness, ports and collisions. It is pure: no client, no
// clock, no I/O. The controller writes its output as objects; the CoreDNS plugin
// answers from it. Neither re-implements it, which is what keeps them equal.
package aggregate

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Linkerd multicluster labels and annotations (headless mode).
const (
	LabelMirroredService    = "mirror.linkerd.io/mirrored-service"
	LabelClusterName        = "mirror.linkerd.io/cluster-name"
	LabelHeadlessMirrorName = "mirror.linkerd.io/headless-mirror-svc-name"
	LabelExported           = "mirror.linkerd.io/exported"
	AnnotationRemoteFQName  = "mirror.linkerd.io/remote-svc-fq-name"
)

// AnnotationIncludeMirrors, "true" on a local member service, opts it into
// native names: its own name (db.<ns>.svc) then answers its global's
// endpoints too, local and mirrored, with the same per-pod names, and the
// controller adds the mirrors' endpoints to it as EndpointSlices of its own.
const AnnotationIncludeMirrors = "globalmirror.io/include-mirrors"

// Labels on everything globalmirror writes.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "globalmirror"
	// LabelBase names the base service a global was built for.
	LabelBase = "globalmirror.io/base"
	// EndpointSliceManagedBy is the endpointslice.kubernetes.io/managed-by value of
	// the global slices, so Kubernetes' own controllers leave them alone. It is a
	// label value, so it cannot contain "/" (like "endpointslice-controller.k8s.io").
	EndpointSliceManagedBy = "controller.globalmirror.io"
)

// DefaultSuffix is appended to a base name to form its global service name.
const DefaultSuffix = "-global"

// DefaultLocalSelector selects the local service of a base: the exported one.
const DefaultLocalSelector = LabelExported

// Role says what a Service is to globalmirror.
type Role int

const (
	// RoleNone: not a member (ClusterIP mirrors, gateway mirrors, anything else).
	RoleNone Role = iota
	// RoleHeadlessMirror: Linkerd's headless mirror `<base>-<cluster>` of a remote service.
	RoleHeadlessMirror
	// RoleEndpointMirror: Linkerd's per-pod ClusterIP mirror `<host>-<cluster>`; its
	// readiness says whether the cluster's gateway is reachable.
	RoleEndpointMirror
	// RoleLocal: the local headless service named like the base.
	RoleLocal
)

// String names r as logs and status show it.
func (r Role) String() string {
	switch r {
	case RoleHeadlessMirror:
		return "headless-mirror"
	case RoleEndpointMirror:
		return "endpoint-mirror"
	case RoleLocal:
		return "local"
	default:
		return "none"
	}
}

// Classification is what Classify found out about a Service.
type Classification struct {
	Role Role
	// Base is the base service name (for mirrors and local services).
	Base string
	// Cluster is the remote cluster of a mirror; empty for local services.
	Cluster string
	// HeadlessMirror is, for an endpoint mirror, the headless mirror it belongs to.
	HeadlessMirror string
}

// SkipReason says why a Service that claims to be a Linkerd mirror is
// ignored: CamelCase and low in cardinality, for event reasons and metric
// labels.
type SkipReason string

// Skip reasons.
const (
	SkipMissingClusterName SkipReason = "MissingClusterName"
	SkipInvalidClusterName SkipReason = "InvalidClusterName"
	SkipInvalidRemoteName  SkipReason = "InvalidRemoteName"
	SkipUnknownBase        SkipReason = "UnknownBase"
)

// Skip is why a malformed object is ignored.
type Skip struct {
	Reason SkipReason
	Detail string // human readable, names what is wrong
}

// Classify decides whether svc is a member of a global service and of which.
// local selects local services; nil means none are members (NoLocalSelector).
// A Service that looks like a mirror but is malformed is returned as RoleNone
// with a Skip, so callers can report it instead of guessing.
func Classify(svc *corev1.Service, local labels.Selector) (Classification, *Skip) {
	lbl := svc.Labels
	if lbl[LabelMirroredService] == "true" {
		cluster := lbl[LabelClusterName]
		if cluster == "" {
			return Classification{}, &Skip{SkipMissingClusterName, "mirror without " + LabelClusterName + " label"}
		}
		if errs := IsDNS1123Label(cluster); len(errs) > 0 {
			return Classification{}, &Skip{SkipInvalidClusterName, "invalid cluster name " + quote(cluster) + ": " + errs[0]}
		}
		if hm, ok := lbl[LabelHeadlessMirrorName]; ok {
			return Classification{Role: RoleEndpointMirror, Cluster: cluster, HeadlessMirror: hm}, nil
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			return Classification{}, nil // a ClusterIP or gateway mirror: not ours, not an error
		}
		base, skip := mirrorBase(svc, cluster)
		if skip != nil {
			return Classification{}, skip
		}
		return Classification{Role: RoleHeadlessMirror, Base: base, Cluster: cluster}, nil
	}
	if local != nil && svc.Spec.ClusterIP == corev1.ClusterIPNone && local.Matches(labels.Set(lbl)) {
		return Classification{Role: RoleLocal, Base: svc.Name}, nil
	}
	return Classification{}, nil
}

// mirrorBase is the first label of the remote FQDN, or the name minus "-cluster".
func mirrorBase(svc *corev1.Service, cluster string) (string, *Skip) {
	if fq := svc.Annotations[AnnotationRemoteFQName]; fq != "" {
		base, _, _ := strings.Cut(fq, ".")
		if errs := IsDNS1035Label(base); len(errs) > 0 {
			return "", &Skip{SkipInvalidRemoteName, "invalid " + AnnotationRemoteFQName + " " + quote(fq) + ": " + errs[0]}
		}
		return base, nil
	}
	base, ok := strings.CutSuffix(svc.Name, "-"+cluster)
	if !ok || base == "" {
		return "", &Skip{SkipUnknownBase, "name " + quote(svc.Name) + " does not end in -" + cluster + " and has no " + AnnotationRemoteFQName}
	}
	return base, nil
}

// GlobalName is the name of the global service of base.
func GlobalName(base, suffix string) string { return base + suffix }

// BaseOf is the base whose global service is called name: GlobalName's
// inverse. ok is false for a name that is not a global name.
func BaseOf(name, suffix string) (string, bool) {
	if base, ok := strings.CutSuffix(name, suffix); ok && base != "" {
		return base, true
	}
	return "", false
}

// WrittenByGlobalmirror reports whether labels say globalmirror wrote the
// object (app.kubernetes.io/managed-by: globalmirror), of whatever kind.
func WrittenByGlobalmirror(lbl map[string]string) bool { return lbl[LabelManagedBy] == ManagedBy }

// Owner says who owns a global name.
type Owner int

const (
	// OwnerNone: no Service has the name.
	OwnerNone Owner = iota
	// OwnerGlobalmirror: the Service of that name is globalmirror's.
	OwnerGlobalmirror
	// OwnerUser: someone else's Service has the name; globalmirror leaves the
	// name alone, whether or not the global should exist.
	OwnerUser
)

// OwnerOf is who owns a global name, given the Service of that name (nil
// when there is none).
func OwnerOf(svc *corev1.Service) Owner {
	switch {
	case svc == nil:
		return OwnerNone
	case WrittenByGlobalmirror(svc.Labels):
		return OwnerGlobalmirror
	default:
		return OwnerUser
	}
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return "\"" + s + "\""
}
