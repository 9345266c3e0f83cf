package source

import (
	"cmp"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/kubeclient"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// indexedService is what the index keeps of a Service: what Classify,
// WrittenByGlobalmirror and the controller's ownership checks read. Of its
// labels, only those keys (key, value pairs: a map of its own costs several
// times that); ports and selector only of headless Services (members and
// globals are headless); its UID only where something owns or deletes by it
// (not of a headless mirror). What many Services share (namespace, labels,
// cluster IP "None", ports) is one interned serviceShape; what Linkerd's
// headless mirrors never have is in rare, nil for them. Stored in its
// Service's entry (store.go), whose key its name shares.
type indexedService struct {
	name      string
	shape     *serviceShape
	rare      *serviceRare
	delivered bool // its list mark (listMarks)
	rv        kubeclient.Version
	// memberBase is the base of a member (aggregate.Classify), "" for
	// any other Service: kept from the classification of the Service as
	// it came (serviceSink.upsert), as every slice of its members asks
	// for it.
	memberBase string
}

type serviceShape struct {
	namespace string
	labels    []string
	clusterIP string
	ports     []corev1.ServicePort
}

type serviceRare struct {
	uid               types.UID
	remoteFQName      string    // Linkerd's remote-svc-fq-name annotation
	includeMirrors    string    // globalmirror's include-mirrors annotation
	drain             string    // globalmirror's drain annotation
	drainSince        time.Time // when drain was written (ServiceDrain.Since); not compared by sameAs
	selector          map[string]string
	deletionTimestamp *metav1.Time
}

func (c *indexedService) namespace() string { return c.shape.namespace }

// label is the value of the kept label key, "" where it has none.
func (c *indexedService) label(key string) string {
	for i := 0; i+1 < len(c.shape.labels); i += 2 {
		if c.shape.labels[i] == key {
			return labelValue(c.shape.labels[i+1], c.name)
		}
	}
	return ""
}

// present reports whether c is a Service in the index (an entry's is empty
// where the entry has only slices).
func (c *indexedService) present() bool { return c.shape != nil }

// service is c as a sparse Service; read-only, like everything from the index.
func (c *indexedService) service() *corev1.Service {
	sh := c.shape
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: sh.namespace},
		Spec:       corev1.ServiceSpec{ClusterIP: sh.clusterIP, Ports: sh.ports},
	}
	if len(sh.labels) > 0 {
		svc.Labels = make(map[string]string, len(sh.labels)/2)
		for i := 0; i < len(sh.labels); i += 2 {
			svc.Labels[sh.labels[i]] = labelValue(sh.labels[i+1], c.name)
		}
	}
	if r := c.rare; r != nil {
		svc.UID, svc.DeletionTimestamp, svc.Spec.Selector = r.uid, r.deletionTimestamp, r.selector
		if r.remoteFQName != "" || r.includeMirrors != "" || r.drain != "" {
			svc.Annotations = map[string]string{}
			if r.remoteFQName != "" {
				svc.Annotations[aggregate.AnnotationRemoteFQName] = r.remoteFQName
			}
			if r.includeMirrors != "" {
				svc.Annotations[aggregate.AnnotationIncludeMirrors] = r.includeMirrors
			}
			if r.drain != "" {
				svc.Annotations[aggregate.AnnotationDrain] = r.drain
			}
		}
	}
	return svc
}

// sameAs reports whether c keeps what o keeps: a relist or an update of
// something not kept changes nothing.
func (c *indexedService) sameAs(o *indexedService) bool {
	a, b := *c, *o
	a.delivered, b.delivered, a.rv, b.rv = false, false, 0, 0
	if a.rare != nil && b.rare != nil && a.rare.drainSince != b.rare.drainSince {
		ra, rb := *a.rare, *b.rare
		ra.drainSince, rb.drainSince = time.Time{}, time.Time{}
		a.rare, b.rare = &ra, &rb
	}
	return reflect.DeepEqual(a, b)
}

// indexedDrain is a drained member's drain, with its namespace.
type indexedDrain struct {
	ServiceDrain
	namespace string
}

// serviceDrain is c's drain where c is a member service its own annotation
// drains (a valid level but none); ok false for any other.
func (c *indexedService) serviceDrain() (indexedDrain, bool) {
	if c.memberBase == "" || c.rare == nil || c.rare.drain == "" {
		return indexedDrain{}, false
	}
	level, err := aggregate.ParseDrain(c.rare.drain)
	if err != nil || level == aggregate.NotDrained {
		return indexedDrain{}, false
	}
	ns := c.namespace()
	return indexedDrain{ServiceDrain{Service: ns + "/" + c.name, Cluster: c.label(aggregate.LabelClusterName), Level: level, Since: c.rare.drainSince}, ns}, true
}

// keepDrainSince keeps old's drain time in c where both are drained at one
// level: the Service changed, its drain did not.
func (c *indexedService) keepDrainSince(old *indexedService) {
	if old == nil || c.rare == nil || old.rare == nil || c.rare.drain == "" || old.rare.drain != c.rare.drain {
		return
	}
	if !old.rare.drainSince.IsZero() && old.rare.drainSince.Before(c.rare.drainSince) {
		c.rare.drainSince = old.rare.drainSince
	}
}

// A label value stored as "\x00<n>" is the Service's name but its last n
// bytes: a global's base label, its name less the suffix. So stored, it is
// the same for every global, whose label pairs and shape are then interned.
// No label value contains a NUL.
const fromName = "\x00"

// labelValue is the label value stored as v, of the Service named name.
func labelValue(v, name string) string {
	if rest, ok := strings.CutPrefix(v, fromName); ok {
		if n, err := strconv.Atoi(rest); err == nil && n <= len(name) {
			return name[:len(name)-n]
		}
	}
	return v
}

// stripService is what the index keeps of svc, a Service whose globals'
// names end in suffix; with keepUID, its UID where anything owns or deletes
// by it.
func (in *interner) stripService(svc *corev1.Service, keys []string, suffix string, keepUID bool) *indexedService {
	// Shared only where it is like others': a cluster IP or a label value
	// of its own (a global's base) would fill the interner with entries
	// used by one Service each.
	sh := serviceShape{namespace: in.str(svc.Namespace), clusterIP: svc.Spec.ClusterIP}
	shared := true
	switch sh.clusterIP {
	case corev1.ClusterIPNone:
		sh.clusterIP = corev1.ClusterIPNone
	case "":
	default:
		shared = false
	}
	var labelsKey, portsKey string
	var sharedLabels bool
	sh.labels, labelsKey, sharedLabels = in.keep(svc.Labels, keys, svc.Name, suffix)
	shared = shared && sharedLabels
	r := serviceRare{
		uid:               svc.UID,
		remoteFQName:      remoteFQName(svc),
		deletionTimestamp: svc.DeletionTimestamp,
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		sh.ports, portsKey = in.servicePorts(svc.Spec.Ports)
		r.selector = svc.Spec.Selector
		r.includeMirrors = svc.Annotations[aggregate.AnnotationIncludeMirrors]
		// A local service's drain, or one Linkerd copied onto a headless
		// mirror from its exported service (aggregate.AnnotationDrain).
		r.drain = svc.Annotations[aggregate.AnnotationDrain]
		if r.drain != "" {
			r.drainSince = cmp.Or(annotatedAt(svc), time.Now())
		}
		if svc.Labels[aggregate.LabelMirroredService] == "true" {
			r.uid = "" // a headless mirror is neither owned nor deleted by uid
		}
	}
	if !keepUID {
		r.uid = ""
	}
	c := &indexedService{name: svc.Name, shape: &sh, rv: kubeclient.ParseVersion(svc.ResourceVersion)}
	if shared {
		c.shape = in.serviceShape(sh, labelsKey+"\x01"+portsKey)
	}
	if r.uid != "" || r.remoteFQName != "" || r.includeMirrors != "" || r.drain != "" || r.deletionTimestamp != nil || r.selector != nil {
		c.rare = &r
	}
	return c
}

// remoteFQName is svc's Linkerd remote-svc-fq-name annotation, or "" where
// it names the base the mirror's name does (Linkerd's own mirrors), so that
// Classify reads the same base without it.
func remoteFQName(svc *corev1.Service) string {
	fq := svc.Annotations[aggregate.AnnotationRemoteFQName]
	cluster := svc.Labels[aggregate.LabelClusterName]
	if fq == "" || cluster == "" || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return fq
	}
	base, _, _ := strings.Cut(fq, ".")
	if fromName, ok := strings.CutSuffix(svc.Name, "-"+cluster); ok && fromName == base && len(aggregate.IsDNS1035Label(base)) == 0 {
		return ""
	}
	return fq
}
