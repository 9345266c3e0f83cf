// Package helmtest runs the helm binary that `make helm` builds (found
// through $GLOBALMIRROR_HELM) for tests on the chart, and decodes what `helm
// template` renders, strictly.
package helmtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Env names the helm binary; the Makefile exports it.
const Env = "GLOBALMIRROR_HELM"

// The chart, as a test package's directory (test/<package>) finds it, and
// the objects of release gm in Namespace, which the tests render.
const (
	ChartDir   = "../../charts/globalmirror"
	Namespace  = "globalmirror-system"
	Controller = "gm-globalmirror-controller"
	CoreDNS    = "gm-globalmirror-coredns"
)

// Run runs helm with args and returns its stdout; stderr is in the error.
// Helm's own state (repositories, cache, registry logins) and its discovery
// cache go to a temporary directory, so the test neither reads nor changes
// the user's. Without helm the test fails, never skips: a chart that was
// not checked has not passed.
func Run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv(Env)
	if _, err := os.Stat(bin); bin == "" || err != nil {
		t.Fatalf("$%s=%q (%v): run `make test` (or `make helm` and export %s=<path to helm>)", Env, bin, err, Env)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECACHEDIR="+filepath.Join(home, "kube-cache"),  // not ~/.kube/cache
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"), // only --kubeconfig reaches a cluster
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Must is Run that fails the test on error.
func Must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := Run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WriteValues writes a values file and returns its path.
func WriteValues(t testing.TB, values string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// CoreDNSServers returns values for coredns.servers (indented to go under
// `coredns:`): one server on 127.0.0.1:dns whose health, ready and
// prometheus plugins listen on the other loopback ports, and whose global
// (with a TTL of ttl seconds) and kubernetes plugins reach the API server
// through kubeconfig. It keeps a test's CoreDNS off the host's ports 53,
// 8080, 8181 and 9153.
func CoreDNSServers(dns, health, ready, metrics, ttl int, kubeconfig string) string {
	return fmt.Sprintf(`  servers:
    - zones: [{zone: .}]
      port: %[1]d
      plugins:
        - {name: bind, parameters: 127.0.0.1}
        - {name: errors}
        - {name: health, parameters: "127.0.0.1:%[2]d"}
        - {name: ready, parameters: "127.0.0.1:%[3]d"}
        - {name: global, parameters: cluster.local, configBlock: "ttl %[5]d\nkubeconfig %[6]s"}
        - {name: kubernetes, parameters: cluster.local, configBlock: "kubeconfig %[6]s\npods insecure"}
        - {name: prometheus, parameters: "127.0.0.1:%[4]d"}
`, dns, health, ready, metrics, ttl, kubeconfig)
}

// Manifest is a rendered chart: its objects in order.
type Manifest struct {
	Objects []*unstructured.Unstructured
}

// Template runs `helm template release ChartDir --namespace Namespace
// args...` (values files, --set) and decodes the output with Decode, failing
// the test on any error.
func Template(t testing.TB, release string, args ...string) Manifest {
	t.Helper()
	out := Must(t, append([]string{"template", release, ChartDir, "--namespace", Namespace}, args...)...)
	m, err := Decode(out)
	if err != nil {
		t.Fatalf("rendered manifest: %v\n%s", err, out)
	}
	return m
}

var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// Decode splits a rendered manifest into objects. Every document must be
// valid YAML without duplicate keys, and every object of a built-in kind must
// decode strictly into its Go type: a misspelt or misplaced field fails here,
// before any API server sees it.
func Decode(text string) (Manifest, error) {
	var m Manifest
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return m, err
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return m, fmt.Errorf("%w in\n%s", err, doc)
		}
		if string(bytes.TrimSpace(js)) == "null" { // a template that rendered nothing
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return m, fmt.Errorf("%w in\n%s", err, doc)
		}
		if scheme.Scheme.Recognizes(u.GroupVersionKind()) {
			if _, _, err := strictDecoder.Decode(js, nil, nil); err != nil {
				return m, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
		m.Objects = append(m.Objects, u)
	}
}

// Get returns the object of kind, namespace and name, or nil.
func (m Manifest) Get(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range m.Objects {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

// MustGet is Get that fails the test when the object is missing, listing what is there.
func (m Manifest) MustGet(t testing.TB, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	if o := m.Get(kind, namespace, name); o != nil {
		return o
	}
	t.Fatalf("no %s %s/%s rendered; have:\n%s", kind, namespace, name, strings.Join(m.IDs(), "\n"))
	return nil
}

// IDs lists "Kind namespace/name" for every object.
func (m Manifest) IDs() []string {
	var ids []string
	for _, o := range m.Objects {
		ids = append(ids, fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName()))
	}
	return ids
}

// Typed converts u into out (a pointer to a Go API type).
func Typed(t testing.TB, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}
