// Package image runs the two container images `make image` builds, with
// podman, the way the Helm chart's pod specs say: the user, group, read-only
// root filesystem, no_new_privs, capabilities, seccomp profile, environment,
// arguments and ConfigMap volumes all come from `helm template` output
// (translate fails on a security setting it does not know). Against a local
// cluster with Linkerd's mirrors simulated, the CoreDNS image answers
// *-global names over UDP and TCP as UID 65532, and the controller image
// converges the cluster and serves /readyz. (Port 53 under a real kubelet's
// capabilities is test/node's.)
//
// Each image's name is a manifest list of linux/amd64 and linux/arm64 (what
// the chart's default tags name); podman runs this machine's member. The
// test checks every member's platform, that its binary is a static ELF
// executable for that machine (CoreDNS's with its file capability), and runs
// the binaries of every member on this machine, the foreign ones under
// qemu-user (qemu-aarch64-static on amd64): the controller writes db-global
// and CoreDNS, with the chart's Corefile, answers it over UDP and TCP.
//
// What differs from a pod, and why: the containers share the host's network
// (all traffic stays on loopback), the API server is reached through a
// kubeconfig mounted read-only (there is no ServiceAccount token; it
// authenticates as an administrator, the chart's RBAC is tested in
// test/chart), and the servers listen on free loopback ports instead of the
// chart's 8080, 8181 and 9153, which the probes' paths are asked on.
package image

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/test/await"
	"github.com/globalmirror/globalmirror/test/dnsq"
	"github.com/globalmirror/globalmirror/test/helmtest"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	// Where the containers find the kubeconfig, mounted read-only.
	kubeconfigPath = "/var/run/globalmirror/kubeconfig"
	ns             = "app"
	ttl            = 5
	// netBindService is CAP_NET_BIND_SERVICE's bit.
	netBindService = uint64(1) << 10
)

// Image names: the Makefile exports what `make image` tagged.
const (
	repoEnv    = "GLOBALMIRROR_IMAGE_REPO"
	versionEnv = "GLOBALMIRROR_IMAGE_VERSION"
)

func TestImages(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containers against local clusters")
	}
	pm := newPodman(t)
	dir := t.TempDir()
	repo, version := os.Getenv(repoEnv), os.Getenv(versionEnv)
	if repo == "" || version == "" {
		t.Fatalf("$%s and $%s name the images: run `make test`, which builds them", repoEnv, versionEnv)
	}

	health, ready, metrics := freePort(t), freePort(t), freePort(t)
	m := render(t, repo, version, 53, health, ready, metrics, kubeconfigPath)
	ctrl := translate(t, m, helmtest.Namespace, helmtest.Controller, "controller", filepath.Join(dir, "port53"))
	dnsc := translate(t, m, helmtest.Namespace, helmtest.CoreDNS, "coredns", filepath.Join(dir, "port53"))
	for _, c := range []container{ctrl, dnsc} {
		pm.requireImage(t, c.Image)
	}

	// bins: each platform's binary of each image, by binary and platform.
	bins := map[string]map[string]string{}
	t.Run("platforms", func(t *testing.T) {
		bins["globalmirror-controller"] = checkPlatforms(t, pm, ctrl, "globalmirror-controller", 0, filepath.Join(dir, "platforms"))
		bins["coredns"] = checkPlatforms(t, pm, dnsc, "coredns", netBindService, filepath.Join(dir, "platforms"))
	})

	t.Run("coredns -version", func(t *testing.T) {
		commit := gitCommit(t)
		p := pm.run(t, "version", dnsc.Flags, dnsc.Image, "-version")
		out := waitExit(t, p, 30*time.Second)
		if !strings.Contains(out, "CoreDNS-") || !strings.Contains(out, ", "+commit) {
			t.Errorf("coredns -version does not name commit %s:\n%s", commit, out)
		}
	})

	ctx := t.Context()
	env := localkube.StartT(t, "source", "east")
	source := env.Cluster("source")
	want := mirroredDB(t, env)
	if _, err := source.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: helmtest.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The cluster's admin kubeconfig, readable by the containers' user.
	kubeconfig := filepath.Join(dir, "kubeconfig")
	data, err := os.ReadFile(source.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mountKubeconfig := []string{"--volume", kubeconfig + ":" + kubeconfigPath + ":ro"}

	t.Run("controller", func(t *testing.T) {
		port := freePort(t)
		args := replaceArg(t, ctrl.Args, "--metrics-addr=", "127.0.0.1:"+strconv.Itoa(port))
		p := pm.run(t, "controller", slices.Concat(ctrl.Flags, mountKubeconfig), ctrl.Image,
			append(args, "--kubeconfig="+kubeconfigPath)...)
		waitHTTP(t, p, probeURL(t, ctrl.Spec.ReadinessProbe, "controller readiness", port))
		waitHTTP(t, p, probeURL(t, ctrl.Spec.LivenessProbe, "controller liveness", port))
		expectGlobalService(t, source, want, p)
	})

	dnsFlags := slices.Concat(dnsc.Flags, mountKubeconfig)

	// CoreDNS beside the cluster DNS, on an unprivileged port: the chart's
	// pod spec for that must run the image too.
	t.Run("coredns on a high port", func(t *testing.T) {
		port := freePort(t)
		c := translate(t, render(t, repo, version, port, health, ready, metrics, kubeconfigPath), helmtest.Namespace, helmtest.CoreDNS, "coredns", filepath.Join(dir, "highport"))
		p := pm.run(t, "highport", slices.Concat(c.Flags, mountKubeconfig), c.Image, c.Args...)
		waitHTTP(t, p, probeURL(t, c.Spec.ReadinessProbe, "coredns readiness", ready))
		expectAnswers(t, "127.0.0.1:"+strconv.Itoa(port), want, p)
	})

	// The chart adds NET_BIND_SERVICE for port 53. Without it in the
	// bounding set the kernel refuses to execute /coredns at all: its file
	// capability has the effective bit, which demands every capability it
	// names (a pod without it never starts).
	t.Run("coredns without NET_BIND_SERVICE", func(t *testing.T) {
		p := pm.run(t, "nocap", without(t, dnsFlags, "--cap-add", "NET_BIND_SERVICE"), dnsc.Image, dnsc.Args...)
		if log := waitExit(t, p, 30*time.Second); !strings.Contains(log, "exec /coredns: operation not permitted") {
			t.Errorf("coredns ran without NET_BIND_SERVICE:\n%s", log)
		}
	})

	t.Run("every platform's binaries (arm64 emulated)", func(t *testing.T) {
		if len(bins["globalmirror-controller"]) != len(platforms) || len(bins["coredns"]) != len(platforms) {
			t.Fatalf("the platforms subtest extracted %v, not every platform's binaries", bins)
		}
		checkEmulated(t, ctrl, dnsc, bins, repo, version, kubeconfig, source, want)
	})
}

// render renders the chart with both images and a CoreDNS server on
// 127.0.0.1:dnsPort, its health, ready and prometheus plugins on the other
// ports, reading the kubeconfig at kubeconfig.
func render(t *testing.T, repo, version string, dnsPort, health, ready, metrics int, kubeconfig string) helmtest.Manifest {
	t.Helper()
	values := helmtest.WriteValues(t, fmt.Sprintf(`
controller:
  image: {repository: %[1]s/globalmirror-controller, tag: %[2]q}
coredns:
  enabled: true
  image: {repository: %[1]s/globalmirror-coredns, tag: %[2]q}
`, repo, version)+helmtest.CoreDNSServers(dnsPort, health, ready, metrics, ttl, kubeconfig))
	return helmtest.Template(t, "gm", "-f", values)
}

// mirroredDB makes the global service the test expects: db exported in
// cluster east (three pods) and in source (two local pods), east linked into
// source by the mirror simulator. It returns the endpoints db-global must
// have, by hostname, from the objects themselves: local pods' IPs, and for
// east's pods the ClusterIPs of Linkerd's endpoint mirrors.
func mirroredDB(t *testing.T, env *localkube.Env) map[string]string {
	t.Helper()
	source, east := env.Cluster("source"), env.Cluster("east")
	s := scenario.NewIn(t, source, ns)
	local := s.Workload(source, "db", 2, "192.0.2.0/26")
	s.Workload(east, "db", 3, "198.51.100.0/26")
	s.Link(east)

	want := map[string]string{}
	for i := range 2 {
		want[fmt.Sprintf("db-%d", i)] = s.PodIP(local, i)
	}
	for i := range 3 {
		host := fmt.Sprintf("db-%d-east", i)
		want[host] = s.ClusterIP(host)
	}
	t.Logf("db-global should hold %v", want)
	return want
}

// expectGlobalService waits until the controller has written db-global with
// exactly the wanted endpoints, all ready.
func expectGlobalService(t *testing.T, c *localkube.Cluster, want map[string]string, p *run.Process) {
	t.Helper()
	err := await.Poll(t.Context(), 60*time.Second, 100*time.Millisecond, func(ctx context.Context) string {
		return scenario.GlobalService(ctx, c.Client, ns, "db-global", 5432, want)
	})
	if err != nil {
		t.Fatalf("no db-global with endpoints %v: %v\ncontroller log:\n%s", want, err, p.Log(4000))
	}
}

// expectAnswers waits until CoreDNS at server answers db-global's A query
// with every wanted address (its informers sync a moment after it is
// ready), then asks, over UDP and TCP, for db-global's A and SRV records and
// each pod's A record, and requires exactly the wanted answers.
func expectAnswers(t *testing.T, server string, want map[string]string, p *run.Process) {
	t.Helper()
	global := "db-global." + ns + ".svc." + scenario.Zone
	addrs := slices.Collect(maps.Values(want))
	if err := scenario.AwaitAnswer(t.Context(), "udp", server, global, dns.TypeA, dnsq.NoError(addrs...), 30*time.Second, 50*time.Millisecond); err != nil {
		t.Fatalf("%v\ncoredns log:\n%s", err, p.Log(4000))
	}
	wantA := aRecords(global, addrs...)

	var srv, extra []string
	for host, addr := range want {
		target := host + "." + global
		srv = append(srv, fmt.Sprintf("%s\t%d\tIN\tSRV\t0 %d 5432 %s", global, ttl, 100/len(want), target))
		extra = append(extra, aRecords(target, addr)...)
	}
	sort.Strings(srv)
	sort.Strings(extra)
	for _, network := range []string{"udp", "tcp"} {
		check := func(name string, qtype uint16, want []string, section func(*dns.Msg) []dns.RR) {
			t.Helper()
			msg, err := dnsq.Ask(network, server, name, qtype, 0)
			if err != nil {
				t.Errorf("%s %s over %s: %v", name, dns.TypeToString[qtype], network, err)
				return
			}
			if got := records(section(msg)); msg.Rcode != dns.RcodeSuccess || !msg.Authoritative || !slices.Equal(got, want) {
				t.Errorf("%s %s over %s: %s, authoritative %v, records\n%s\nwant\n%s", name, dns.TypeToString[qtype], network,
					dns.RcodeToString[msg.Rcode], msg.Authoritative, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
		answerSection := func(m *dns.Msg) []dns.RR { return m.Answer }
		check(global, dns.TypeA, wantA, answerSection)
		check(global, dns.TypeSRV, srv, answerSection)
		check(global, dns.TypeSRV, extra, func(m *dns.Msg) []dns.RR { return m.Extra })
		for host, addr := range want {
			check(host+"."+global, dns.TypeA, aRecords(host+"."+global, addr), answerSection)
		}
	}
}

func aRecords(name string, addrs ...string) []string {
	var rrs []string
	for _, a := range addrs {
		rrs = append(rrs, fmt.Sprintf("%s\t%d\tIN\tA\t%s", name, ttl, a))
	}
	sort.Strings(rrs)
	return rrs
}

// records are the records' text forms, sorted.
func records(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, rr.String())
	}
	sort.Strings(out)
	return out
}

// waitExit waits for a container to end and returns its output.
func waitExit(t *testing.T, p *run.Process, timeout time.Duration) string {
	t.Helper()
	err := await.Poll(t.Context(), timeout, 50*time.Millisecond, func(context.Context) string {
		if exited, _ := p.Exited(); !exited {
			return "running"
		}
		return ""
	})
	if err != nil {
		t.Fatalf("%s still runs after %v:\n%s", p.Name, timeout, p.Log(4000))
	}
	return p.Log(1 << 16)
}

// waitHTTP waits until url answers 200, failing the test with the
// container's output if it ends first or does not within a minute.
func waitHTTP(t *testing.T, p *run.Process, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := run.WaitHTTP(ctx, url, p); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := run.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gitCommit is the commit `make image` stamps into CoreDNS (GIT_COMMIT).
func gitCommit(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v: the test compares the image's commit with the checkout's", err)
	}
	return strings.TrimSpace(string(out))
}

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

	user, group := cmp.Or(c.RunAsUser, pod.RunAsUser), cmp.Or(c.RunAsGroup, pod.RunAsGroup)
	if user == nil || group == nil {
		t.Fatalf("%s: no runAsUser or runAsGroup: the test runs the chart's user, not the image's", what)
	}
	if nonRoot := cmp.Or(c.RunAsNonRoot, pod.RunAsNonRoot); nonRoot != nil && *nonRoot && *user == 0 {
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
	if sp := cmp.Or(c.SeccompProfile, pod.SeccompProfile); sp != nil {
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
