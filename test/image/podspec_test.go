package image

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/globalmirror/globalmirror/test/helmtest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// container is one container of a rendered pod spec, translated into what
// `podman run` takes.
type container struct {
	Image string
	// Flags say who the process runs as and with what: user and group,
	// read-only root filesystem, no_new_privs, capabilities, seccomp,
	// environment and volumes.
	Flags []string
	// Args follow the image; the image's entrypoint runs them (the chart
	// sets no command).
	Args []string
	// Spec is the container as rendered, for its probes.
	Spec corev1.Container
}

// translate turns the named container of a Deployment rendered in m into
// podman flags. A setting of the pod's or the container's security context
// that it does not translate fails the test, so that the settings the test
// runs with are all the chart's. ConfigMap volumes are written under dir from
// the ConfigMaps rendered in m.
func translate(t *testing.T, m helmtest.Manifest, namespace, deployment, name, dir string) container {
	t.Helper()
	var d struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	helmtest.Typed(t, m.MustGet(t, "Deployment", namespace, deployment), &d)
	pod := d.Spec.Template.Spec
	i := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("Deployment %s has no container %s", deployment, name)
	}
	c := pod.Containers[i]
	if len(c.Command) > 0 {
		t.Fatalf("%s/%s: command %q: the test runs the image's entrypoint", deployment, name, c.Command)
	}
	out := container{Image: c.Image, Args: c.Args, Spec: c}
	out.Flags = append(out.Flags, securityFlags(t, deployment+"/"+name, pod.SecurityContext, c.SecurityContext)...)
	for _, e := range c.Env {
		out.Flags = append(out.Flags, "--env", e.Name+"="+envValue(t, e, namespace))
	}
	for _, vm := range c.VolumeMounts {
		out.Flags = append(out.Flags, "--volume", volume(t, m, namespace, pod.Volumes, vm, dir))
	}
	return out
}

// securityFlags translates the effective security context (the container's
// fields over the pod's) as the kubelet applies it.
func securityFlags(t *testing.T, what string, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) []string {
	t.Helper()
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if c == nil {
		c = &corev1.SecurityContext{}
	}
	untranslated(t, what+" pod securityContext", pod, "runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile")
	untranslated(t, what+" securityContext", c, "runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile",
		"readOnlyRootFilesystem", "allowPrivilegeEscalation", "capabilities", "privileged")

	user, group := first(c.RunAsUser, pod.RunAsUser), first(c.RunAsGroup, pod.RunAsGroup)
	if user == nil || group == nil {
		t.Fatalf("%s: no runAsUser or runAsGroup: the test runs the chart's user, not the image's", what)
	}
	if nonRoot := first(c.RunAsNonRoot, pod.RunAsNonRoot); nonRoot != nil && *nonRoot && *user == 0 {
		t.Fatalf("%s: runAsNonRoot with runAsUser 0: the kubelet would not start it", what)
	}
	flags := []string{"--user", fmt.Sprintf("%d:%d", *user, *group)}
	if c.Privileged != nil && *c.Privileged {
		t.Fatalf("%s: privileged", what)
	}
	if c.ReadOnlyRootFilesystem != nil && *c.ReadOnlyRootFilesystem {
		// Without tmpfs on /tmp, /run and /var/tmp, which podman adds to a
		// read-only container and the kubelet does not.
		flags = append(flags, "--read-only", "--read-only-tmpfs=false")
	}
	// Kubernetes sets no_new_privs unless allowPrivilegeEscalation is true or unset.
	if c.AllowPrivilegeEscalation != nil && !*c.AllowPrivilegeEscalation {
		flags = append(flags, "--security-opt", "no-new-privileges")
	}
	if caps := c.Capabilities; caps != nil {
		for _, cp := range caps.Drop {
			flags = append(flags, "--cap-drop", string(cp))
		}
		for _, cp := range caps.Add {
			flags = append(flags, "--cap-add", string(cp))
		}
	}
	if sp := first(c.SeccompProfile, pod.SeccompProfile); sp != nil {
		switch sp.Type {
		case corev1.SeccompProfileTypeRuntimeDefault: // podman's default profile
		case corev1.SeccompProfileTypeUnconfined:
			flags = append(flags, "--security-opt", "seccomp=unconfined")
		default:
			t.Fatalf("%s: seccompProfile %s is not translated to podman", what, sp.Type)
		}
	}
	return flags
}

// untranslated fails the test when obj sets a field other than the known ones.
func untranslated(t *testing.T, what string, obj any, known ...string) {
	t.Helper()
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	var rest []string
	for k := range fields {
		if !slices.Contains(known, k) {
			rest = append(rest, k)
		}
	}
	if len(rest) > 0 {
		sort.Strings(rest)
		t.Fatalf("%s sets %v, which this test does not translate to podman: teach it, or the test no longer runs the chart's settings", what, rest)
	}
}

func first[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func envValue(t *testing.T, e corev1.EnvVar, namespace string) string {
	t.Helper()
	switch {
	case e.ValueFrom == nil:
		return e.Value
	case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
		return namespace
	}
	t.Fatalf("env %s: valueFrom %+v is not translated", e.Name, e.ValueFrom)
	return ""
}

// volume writes a ConfigMap volume's files under dir and returns the podman
// --volume value that mounts them as the kubelet would.
func volume(t *testing.T, m helmtest.Manifest, namespace string, volumes []corev1.Volume, vm corev1.VolumeMount, dir string) string {
	t.Helper()
	i := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
	if i < 0 {
		t.Fatalf("volumeMount %s: no such volume", vm.Name)
	}
	v := volumes[i]
	if v.ConfigMap == nil || vm.SubPath != "" || vm.SubPathExpr != "" {
		t.Fatalf("volume %s: only whole ConfigMap volumes are translated: %+v", v.Name, v)
	}
	var cm corev1.ConfigMap
	helmtest.Typed(t, m.MustGet(t, "ConfigMap", namespace, v.ConfigMap.Name), &cm)
	items := v.ConfigMap.Items
	if len(items) == 0 {
		for k := range cm.Data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	host := filepath.Join(dir, "volume-"+v.Name)
	// Readable by the container's non-root user, as the kubelet's are.
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		data, ok := cm.Data[it.Key]
		if !ok {
			t.Fatalf("ConfigMap %s has no key %s", cm.Name, it.Key)
		}
		if err := os.WriteFile(filepath.Join(host, it.Path), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return host + ":" + vm.MountPath + ":" + map[bool]string{true: "ro", false: "rw"}[vm.ReadOnly]
}

// without returns flags without the flag and value pair, failing the test
// when flags do not hold it.
func without(t *testing.T, flags []string, flag, value string) []string {
	t.Helper()
	for i := 0; i+1 < len(flags); i++ {
		if flags[i] == flag && flags[i+1] == value {
			return slices.Concat(flags[:i], flags[i+2:])
		}
	}
	t.Fatalf("no %s %s in %q", flag, value, flags)
	return nil
}

// replaceArg returns args with the one starting with prefix replaced by
// prefix+value, failing the test when there is none.
func replaceArg(t *testing.T, args []string, prefix, value string) []string {
	t.Helper()
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, prefix) })
	if i < 0 {
		t.Fatalf("no argument %s... in %q", prefix, args)
	}
	out := slices.Clone(args)
	out[i] = prefix + value
	return out
}

// probeURL is the loopback URL of a container's HTTP probe served on port.
func probeURL(t *testing.T, p *corev1.Probe, what string, port int) string {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Fatalf("%s: no HTTP probe rendered", what)
	}
	return "http://127.0.0.1:" + strconv.Itoa(port) + p.HTTPGet.Path
}
