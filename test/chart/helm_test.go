// Package chart tests the Helm chart in charts/globalmirror with a real helm
// binary (built by `make helm`, found through $GLOBALMIRROR_HELM): lint,
// rendering, the values schema, and an install into a real local cluster
// whose API server checks every object and whose RBAC is exercised as the
// chart's ServiceAccounts.
package chart

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

// HelmEnv names the helm binary; the Makefile exports it.
const HelmEnv = "GLOBALMIRROR_HELM"

const (
	releaseNamespace = "globalmirror-system"
	chartDir         = "../../charts/globalmirror"
)

// helmBin fails the test, never skips it, when helm is missing: a chart that
// was not checked has not passed.
func helmBin(t testing.TB) string {
	t.Helper()
	p := os.Getenv(HelmEnv)
	if p == "" {
		t.Fatalf("$%s is not set: run `make test-chart` (or `make helm` and export %s=<path to helm>)", HelmEnv, HelmEnv)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("$%s: %v: run `make helm`", HelmEnv, err)
	}
	return p
}

// helm runs helm with args and returns its stdout; stderr is in the error.
// Helm's own state (repositories, cache, registry logins) goes to a temporary
// directory, so the test neither reads nor changes the user's.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"), // only --kubeconfig reaches a cluster
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// mustHelm is helm that fails the test on error.
func mustHelm(t testing.TB, args ...string) string {
	t.Helper()
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeValues writes a values file and returns its path.
func writeValues(t testing.TB, values string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// manifest is a rendered chart: its objects in order, and the raw text.
type manifest struct {
	objects []*unstructured.Unstructured
	raw     string
}

// render runs `helm template` with args (values files, --set) and decodes the
// output. Every document must be valid YAML without duplicate keys, and every
// object of a built-in kind must decode strictly into its Go type: a misspelt
// or misplaced field fails here, before any API server sees it.
func render(t testing.TB, args ...string) manifest {
	t.Helper()
	return renderRelease(t, "gm", args...)
}

// renderRelease is render for a release of another name.
func renderRelease(t testing.TB, name string, args ...string) manifest {
	t.Helper()
	out := mustHelm(t, append([]string{"template", name, chartDir, "--namespace", releaseNamespace}, args...)...)
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatalf("rendered manifest: %v\n%s", err, out)
	}
	return m
}

var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

func decodeManifest(text string) (manifest, error) {
	m := manifest{raw: text}
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
		m.objects = append(m.objects, u)
	}
}

// get returns the object of kind, namespace and name, or nil.
func (m manifest) get(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range m.objects {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

// mustGet is get that fails the test when the object is missing, listing what is there.
func (m manifest) mustGet(t testing.TB, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	if o := m.get(kind, namespace, name); o != nil {
		return o
	}
	t.Fatalf("no %s %s/%s rendered; have:\n%s", kind, namespace, name, strings.Join(m.ids(), "\n"))
	return nil
}

// ids lists "Kind namespace/name" for every object.
func (m manifest) ids() []string {
	var ids []string
	for _, o := range m.objects {
		ids = append(ids, fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName()))
	}
	return ids
}

// typed converts u into out (a pointer to a Go API type).
func typed(t testing.TB, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}
