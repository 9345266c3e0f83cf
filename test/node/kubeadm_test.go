package node_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"text/template"

	"github.com/globalmirror/globalmirror/test/node"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// kubeadmManifestsEnv names the environment variable holding kubeadm's
// CoreDNS manifests (cmd/kubeadm/app/phases/addons/dns/manifests.go of the
// k8s.io/kubernetes module the control plane is built from): the Makefile
// points it into the module cache.
const kubeadmManifestsEnv = "GLOBALMIRROR_KUBEADM_DNS_MANIFESTS"

// kubeadmDNS is the cluster DNS kubeadm writes: the kube-dns Service, the
// coredns Deployment, ConfigMap and ServiceAccount, and the system:coredns
// ClusterRole and binding, from kubeadm's own templates, filled in as
// kubeadm fills them (two replicas, its control-plane taint key, the DNS IP
// and domain), running image.
type kubeadmDNS struct {
	service    *corev1.Service
	deployment *appsv1.Deployment
	configMap  *corev1.ConfigMap
	account    *corev1.ServiceAccount
	role       *rbacv1.ClusterRole
	binding    *rbacv1.ClusterRoleBinding
}

func loadKubeadmDNS(image string) (*kubeadmDNS, error) {
	path := os.Getenv(kubeadmManifestsEnv)
	if path == "" {
		return nil, fmt.Errorf("$%s is not set: run the test through make", kubeadmManifestsEnv)
	}
	consts, err := stringConstants(path)
	if err != nil {
		return nil, err
	}
	data := map[string]any{
		"DeploymentName": "coredns", "Image": image, "Replicas": int32(2),
		"ControlPlaneTaintKey": "node-role.kubernetes.io/control-plane",
		"DNSIP":                node.ClusterDNS, "DNSDomain": node.ClusterDomain,
	}
	d := &kubeadmDNS{service: &corev1.Service{}, deployment: &appsv1.Deployment{}, configMap: &corev1.ConfigMap{},
		account: &corev1.ServiceAccount{}, role: &rbacv1.ClusterRole{}, binding: &rbacv1.ClusterRoleBinding{}}
	for name, into := range map[string]runtime.Object{
		"CoreDNSService": d.service, "CoreDNSDeployment": d.deployment, "CoreDNSConfigMap": d.configMap,
		"CoreDNSServiceAccount": d.account, "CoreDNSClusterRole": d.role, "CoreDNSClusterRoleBinding": d.binding,
	} {
		text, ok := consts[name]
		if !ok {
			return nil, fmt.Errorf("%s: no constant %s", path, name)
		}
		tmpl, err := template.New(name).Option("missingkey=error").Parse(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		var b bytes.Buffer
		if err := tmpl.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(b.Bytes(), nil, into); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, name, err)
		}
	}
	return d, nil
}

// stringConstants are the string constants a Go file declares, by name.
func stringConstants(path string) (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, value := range vs.Values { // none where iota repeats
				if lit, ok := value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil {
						out[vs.Names[i].Name] = v
					}
				}
			}
		}
	}
	return out, nil
}

// createKubeadmDNS writes every object of kubeadm's cluster DNS, as
// `kubeadm init`'s addon phase does.
func (s *install) createKubeadmDNS(d *kubeadmDNS) {
	s.t.Helper()
	ctx, sys, o := s.ctx, metav1.NamespaceSystem, metav1.CreateOptions{}
	s.must(s.c.RbacV1().ClusterRoles().Create(ctx, d.role, o))
	s.must(s.c.RbacV1().ClusterRoleBindings().Create(ctx, d.binding, o))
	s.must(s.c.CoreV1().ServiceAccounts(sys).Create(ctx, d.account, o))
	s.must(s.c.CoreV1().ConfigMaps(sys).Create(ctx, d.configMap, o))
	s.must(s.c.AppsV1().Deployments(sys).Create(ctx, d.deployment, o))
	svc := d.service.DeepCopy()
	svc.ResourceVersion = "" // kubeadm's template sets "0" for its updates
	s.must(s.c.CoreV1().Services(sys).Create(ctx, svc, o))
}
