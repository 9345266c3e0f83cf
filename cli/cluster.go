// Package cli is what the globalmirror command tells an operator about an
// installation: `check`, a list of read-only checks each passed or failed
// with a hint, and `status`, one global service member by member. It reads
// the cluster with its own client, as the operator, and judges what it reads
// with the same code the controller and the plugin run (aggregate, source,
// the plugin's stanza parser, the controller's flags).
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/globalmirror/globalmirror/controller/options"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Cluster is what the commands found of an installation, and what they
// could not read: each error is reported by the check that needs it.
type Cluster struct {
	Client  kubernetes.Interface
	Config  *rest.Config
	Version *version.Info
	// Controller is the globalmirror controller; nil when none was found
	// or ControllerErr says why it could not be looked for.
	Controller    *Controller
	ControllerErr error
	// DNS is the cluster DNS: the pods behind its Service; nil when
	// DNSErr says why it could not be read.
	DNS    *DNS
	DNSErr error
	// Forwarded is the chart's CoreDNS serving a zone of its own that the
	// cluster DNS forwards to it (the chart's coredns.forwarded), where the
	// cluster DNS's Corefiles hold no global stanza: the checks of the
	// plugin then judge it (judged). Nil where there is none, or
	// ForwardedErr says why it could not be looked for.
	Forwarded    *DNS
	ForwardedErr error
}

// Controller is the controller's Deployment and what its flags say.
type Controller struct {
	Deployment *appsv1.Deployment
	Options    options.Options
	// LeaseNamespace is where its Lease is.
	LeaseNamespace string
	// Others are more controller Deployments (namespace/name) the selector
	// found: other releases, each writing global services too; Overlapping
	// those among them that watch a namespace this one watches too.
	Others, Overlapping []string
}

// DNS is the cluster DNS Service and the pods it selects.
type DNS struct {
	Service *corev1.Service
	Pods    []corev1.Pod
	// Corefiles are the Corefiles the pods load, by the ConfigMap with
	// each (namespace/name); CorefileErrs, why one could not be read.
	Corefiles    map[string]string
	CorefileErrs map[string]error
	// Files are what the first pod loading each Corefile sees of its
	// volumes, for the Corefile's imports.
	Files map[string]*podFiles
	// metrics are the pods' metrics (by pod name) as the image check read
	// them, for the stanza check: which plugins each instance runs.
	metrics map[string]string
	// KubeDNS is the ConfigMap kube-dns of the Service's namespace, whose
	// stubDomains kube-dns's own pods (GKE's) forward zones by: read for
	// the forwarding check where a running pod loads no Corefile (an
	// empty one where there is none); KubeDNSErr, why it could not be.
	KubeDNS    *corev1.ConfigMap
	KubeDNSErr error
}

// Options say where to look.
type Options struct {
	// ControllerSelector selects the controller's Deployment, in every
	// namespace: the chart's labels by default.
	ControllerSelector string
	// DNSService is the cluster DNS Service, namespace/name.
	DNSService string
	// ControllerNamespace is where to look for the controller, and the
	// chart's CoreDNS of a forwarded zone; empty: every namespace, which
	// needs a cluster-wide list of Deployments (and Services).
	ControllerNamespace string
}

// DefaultOptions are the chart's labels and kube-dns.
func DefaultOptions() Options {
	return Options{
		// part-of, not name: the chart's nameOverride changes the name.
		ControllerSelector: "app.kubernetes.io/part-of=globalmirror,app.kubernetes.io/component=controller",
		DNSService:         "kube-system/kube-dns",
	}
}

// Validate refuses options no cluster can answer, before any API call.
func (o Options) Validate() error {
	if ns, name, ok := strings.Cut(o.DNSService, "/"); !ok || ns == "" || name == "" {
		return fmt.Errorf("--dns-service %q: want NAMESPACE/NAME", o.DNSService)
	}
	if _, err := labels.Parse(o.ControllerSelector); err != nil {
		return fmt.Errorf("--controller-selector: %w", err)
	}
	if errs := validation.IsDNS1123Label(o.ControllerNamespace); o.ControllerNamespace != "" && len(errs) > 0 {
		return fmt.Errorf("--controller-namespace %q: %s", o.ControllerNamespace, strings.Join(errs, "; "))
	}
	return nil
}

// CommandConfig is cfg as the command uses it: every request bounded by
// the run's timeout (a hung one ends with it), and no client-side rate
// limit (client-go's 5 per second queued a big install's access reviews
// past the timeout): the command bounds what it has in flight itself
// (reviewsInFlight), and the API server's fairness protects it from a
// one-shot diagnostic.
func CommandConfig(cfg *rest.Config, timeout time.Duration) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "globalmirror-cli"
	cfg.Timeout = timeout
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil // negative: no limiter
	return cfg
}

// Discover finds the installation: the API server's version, the
// controller, the cluster DNS, and the chart's CoreDNS of a forwarded zone
// where the cluster DNS serves no global names (discoverForwarded). What
// it cannot find or read is left nil with its error, for the checks to
// report; an error means the API server did not answer at all.
func Discover(ctx context.Context, c kubernetes.Interface, cfg *rest.Config, o Options) (*Cluster, error) {
	cl := &Cluster{Client: c, Config: cfg}
	body, err := c.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return cl, err
	}
	cl.Version = &version.Info{}
	if err := json.Unmarshal(body, cl.Version); err != nil {
		return cl, fmt.Errorf("the API server's /version: %w", err)
	}
	cl.Controller, cl.ControllerErr = findController(ctx, c, o.ControllerNamespace, o.ControllerSelector)
	cl.DNS, cl.DNSErr = findDNS(ctx, c, o.DNSService)
	discoverForwarded(ctx, c, cl, o.ControllerNamespace)
	return cl, nil
}

func findController(ctx context.Context, c kubernetes.Interface, namespace, selector string) (*Controller, error) {
	deps, err := c.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsForbidden(err) && namespace == metav1.NamespaceAll {
		return nil, fmt.Errorf("listing Deployments labelled %s in every namespace (give the controller's with --controller-namespace): %w", selector, err)
	}
	if err != nil {
		return nil, fmt.Errorf("listing Deployments labelled %s: %w", selector, err)
	}
	if len(deps.Items) == 0 {
		return nil, nil
	}
	ctl, err := controllerOf(&deps.Items[0])
	if ctl != nil {
		for _, d := range deps.Items[1:] {
			id := d.Namespace + "/" + d.Name
			ctl.Others = append(ctl.Others, id)
			other, oerr := controllerOf(&d)
			if oerr != nil || overlap(ctl.Options.Namespaces, other.Options.Namespaces) {
				ctl.Overlapping = append(ctl.Overlapping, id)
			}
		}
	}
	return ctl, err
}

// overlap says whether two controllers' --namespaces share one (empty:
// every namespace).
func overlap(a, b []string) bool {
	return len(a) == 0 || len(b) == 0 || slices.ContainsFunc(a, func(ns string) bool { return slices.Contains(b, ns) })
}

func findDNS(ctx context.Context, c kubernetes.Interface, service string) (*DNS, error) {
	ns, name, _ := strings.Cut(service, "/")
	svc, err := c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the cluster DNS Service %s: %w", service, err)
	}
	return dnsOf(ctx, c, svc)
}

// dnsOf reads the running pods behind svc and the Corefiles they load.
func dnsOf(ctx context.Context, c kubernetes.Interface, svc *corev1.Service) (*DNS, error) {
	ns := svc.Namespace
	dns := &DNS{Service: svc, Corefiles: map[string]string{}, CorefileErrs: map[string]error{}, Files: map[string]*podFiles{}}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		return nil, fmt.Errorf("the pods of %s/%s: %w", ns, svc.Name, err)
	}
	type got struct {
		cm  *corev1.ConfigMap
		err error
	}
	configMaps := map[string]got{} // each read once
	get := func(name string) (*corev1.ConfigMap, error) {
		g, ok := configMaps[name]
		if !ok {
			g.cm, g.err = c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			configMaps[name] = g
		}
		return g.cm, g.err
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		dns.Pods = append(dns.Pods, p)
		cm, file := corefileOf(&p)
		key := p.Namespace + "/" + cm
		if _, seen := dns.Corefiles[key]; cm == "" || seen || dns.CorefileErrs[key] != nil {
			continue
		}
		m, err := get(cm)
		if err != nil {
			dns.CorefileErrs[key] = err
			continue
		}
		dns.Corefiles[key] = m.Data[file]
		dns.Files[key] = readPodFiles(&p, get)
	}
	return dns, nil
}

// controllerOf reads the controller's flags from its Deployment's
// container, with the controller's own flag set (defaults where absent).
func controllerOf(d *appsv1.Deployment) (*Controller, error) {
	o := options.Default()
	fs := pflag.NewFlagSet("globalmirror-controller", pflag.ContinueOnError)
	o.AddFlags(fs)
	c := d.Spec.Template.Spec.Containers[0]
	for _, cc := range d.Spec.Template.Spec.Containers {
		if cc.Name == "controller" {
			c = cc
		}
	}
	if err := fs.Parse(append(slices.Clone(c.Command[min(1, len(c.Command)):]), c.Args...)); err != nil {
		return nil, fmt.Errorf("the controller %s/%s's flags: %w", d.Namespace, d.Name, err)
	}
	ctl := &Controller{Deployment: d, Options: o, LeaseNamespace: o.LeaderElectNamespace}
	if ctl.LeaseNamespace == "" {
		ctl.LeaseNamespace = d.Namespace // the pod's namespace, which it defaults to
	}
	return ctl, nil
}
