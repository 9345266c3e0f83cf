package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globalmirror/globalmirror/cli"
	runbin "github.com/globalmirror/globalmirror/test/run"
)

// kubeconfig writes a kubeconfig whose server is url.
func kubeconfig(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: app}}]
current-context: c
`, url)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Help is asked for where users type it, and answered on stdout with 0.
func TestHelpOfEachCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"check", "--help"}, {"status", "-h"}, {"status", "db-global", "--help"}, {"drain", "--help"}, {"undrain", "-h"}} {
		code, out, errOut := runCmd(args...)
		if code != 0 || !strings.Contains(out, "Usage:\n  globalmirror") || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if _, out, _ := runCmd("check", "--help"); !strings.Contains(out, "--timeout") || !strings.Contains(out, "-o, --output") {
		t.Errorf("check --help does not list --timeout:\n%s", out)
	}
}

// Usage errors are refused before any request: the API server here counts
// every request it gets.
func TestUsageErrorsAreRefusedBeforeAnyRequest(t *testing.T) {
	var requests atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1); http.NotFound(w, r) }))
	defer api.Close()
	kc := kubeconfig(t, api.URL)
	for _, args := range [][]string{
		{}, {"chekc"}, {"check", "extra"}, {"status"}, {"status", "a", "b"},
		{"status", "db_global"}, {"status", "App/db-global"}, {"status", "app/db-global/x"}, {"status", "/db-global"},
		{"check", "-o", "yaml"}, {"check", "--timeout", "0s"}, {"check", "--wait", "-1s"}, {"status", "db-global", "--wait", "1m"}, {"check", "--dns-service", "kube-dns"}, {"check", "--no-such-flag"},
		{"drain"}, {"drain", "east", "west"}, {"drain", "East_1"}, {"drain", "east", "--level", "none"}, {"drain", "east", "--level", ""},
		{"drain", "--service", "db"}, {"drain", "--service", "app/db", "east"}, {"undrain"}, {"undrain", "east", "--level", "all"},
		{"drain", "--exported", "east"}, {"drain", "--exported", "--service", "app/db"}, {"undrain", "--exported", "east"},
	} {
		if len(args) > 0 {
			args = append(args, "--kubeconfig", kc)
		}
		code, out, errOut := runCmd(args...)
		if code != exitUsage || out != "" || errOut == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, and only stderr", args, code, out, errOut, exitUsage)
		}
		if len(args) == 0 || slices.Contains(args, "-o") {
			continue
		}
		// Under -o json, one JSON value on stdout too, saying it.
		code, out, _ = runCmd(append(args, "-o", "json")...)
		var v struct {
			SchemaVersion string        `json:"schemaVersion"`
			Error         string        `json:"error"`
			Checks        []cli.Result  `json:"checks"`
			Rest          []interface{} `json:"-"`
		}
		dec := json.NewDecoder(strings.NewReader(out))
		if err := dec.Decode(&v); err != nil || dec.More() || code != exitUsage || !strings.HasPrefix(v.Error, "usage: ") ||
			(args[0] == "check" && (v.SchemaVersion != cli.SchemaVersion || v.Checks == nil)) {
			t.Errorf("%v -o json: exit %d, stdout %q (%v); want one JSON value saying the usage error", args, code, out, err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("usage errors sent %d requests", n)
	}
}

// checkJSON runs check -o json and decodes its report, which must be
// valid JSON in the one shape on every exit path.
func checkJSON(t *testing.T, args ...string) (int, cli.Report) {
	t.Helper()
	code, out, errOut := runCmd(append([]string{"check", "-o", "json"}, args...)...)
	var r cli.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("exit %d: stdout is not a report: %v\n%s\nstderr: %s", code, err, out, errOut)
	}
	return code, r
}

// An API server nobody listens on fails the API check, with the same
// report shape as a success.
func TestCheckOfAnUnreachableAPIServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	code, r := checkJSON(t, "--kubeconfig", kubeconfig(t, "https://"+addr))
	if code != cli.ExitCouldNotCheck || r.Success || r.SchemaVersion != cli.SchemaVersion || len(r.Checks) < 11 ||
		r.Checks[0].ID != "kubernetes-api" || r.Checks[0].Result != cli.Skipped || !strings.Contains(r.Error, "connection refused") || !strings.Contains(r.Error, "reachable") {
		t.Errorf("exit %d, report %+v", code, r)
	}
	for _, c := range r.Checks {
		if c.Result != cli.Skipped || c.ID == "" || !strings.Contains(c.Detail, "not run: the API server did not answer") {
			t.Errorf("%+v; want every check skipped, saying why", c)
		}
	}
}

// check --wait runs a failed check again until the wait is over (here it
// never passes), and writes the last run's report alone; without --wait
// it runs once.
func TestCheckWaitRunsAFailedCheckAgain(t *testing.T) {
	var requests atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "starting", http.StatusServiceUnavailable)
	}))
	defer api.Close()
	kc := kubeconfig(t, api.URL)
	code, r := checkJSON(t, "--kubeconfig", kc, "--timeout", "1s")
	once := requests.Load()
	if code != cli.ExitCouldNotCheck || r.Error == "" || once == 0 {
		t.Fatalf("without --wait: exit %d, %d requests, report %+v", code, once, r)
	}
	requests.Store(0)
	code, r = checkJSON(t, "--kubeconfig", kc, "--timeout", "1s", "--wait", "3s")
	if n := requests.Load(); code != cli.ExitCouldNotCheck || r.Error == "" || n < 2*once {
		t.Errorf("--wait 3s: exit %d, %d requests (one run sends %d), report %+v; want the checks run again and one report", code, n, once, r)
	}
}

// An API server that accepts and never answers delays check no longer than
// --timeout, and the report says it was not answered in time. (The guard
// below is no performance goal: it only keeps a hang from hanging the test.)
func TestCheckOfAHungAPIServerEndsAtItsTimeout(t *testing.T) {
	release := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer api.Close()
	defer close(release)
	done := make(chan struct{})
	var code int
	var r cli.Report
	go func() {
		defer close(done)
		code, r = checkJSON(t, "--kubeconfig", kubeconfig(t, api.URL), "--timeout", "1s")
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("check --timeout 1s still runs after a minute")
	}
	if code != cli.ExitCouldNotCheck || r.Success || len(r.Checks) < 11 || !strings.Contains(r.Error, "no answer before the timeout") {
		t.Errorf("exit %d, report %+v", code, r)
	}
}

// A kubeconfig whose credential plugin never returns (a login waiting for
// a device code) holds neither check nor status past --timeout: each ends
// at its deadline, long before the plugin would have, check reporting in
// its one shape, status exiting 3 saying why. client-go runs the plugin
// with no deadline of its own.
func TestAHungCredentialPluginEndsAtTheTimeout(t *testing.T) {
	var requests atomic.Int32
	// TLS: client-go reads a user's credentials only for a TLS server.
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1); http.NotFound(w, r) }))
	defer api.Close()
	kc := execKubeconfig(t, t.TempDir(), api.URL, fmt.Sprintf("#!/bin/sh\nexec sleep %d </dev/null >/dev/null 2>&1\n", int(pluginLife.Seconds())))
	const timeout = 2 * time.Second
	began := time.Now()
	code, r := checkJSON(t, "--kubeconfig", kc, "--timeout", timeout.String())
	if took := time.Since(began); took > pluginLife/2 {
		t.Errorf("check --timeout %v returned after %v, as if it waited for the plugin", timeout, took)
	}
	if code != cli.ExitCouldNotCheck || r.Success || len(r.Checks) < 11 || r.Checks[0].Result != cli.Skipped ||
		!strings.Contains(r.Error, "credential plugin") {
		t.Errorf("exit %d, report %+v", code, r)
	}
	began = time.Now()
	code, out, errOut := runCmd("status", "db-global", "--kubeconfig", kc, "--timeout", timeout.String())
	if took := time.Since(began); took > pluginLife/2 {
		t.Errorf("status --timeout %v returned after %v, as if it waited for the plugin", timeout, took)
	}
	if code != 3 || out != "" || !strings.Contains(errOut, "no answer before the timeout") {
		t.Errorf("status: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the API server got %d requests without credentials", n)
	}
}

// A release between the proven ones, as the API server's discovery says it:
// the API check warns (‼) with a hint, and a warning alone fails nothing.
func TestCheckOfAReleaseOutsideTheMatrixWarns(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" {
			fmt.Fprint(w, `{"major": "1", "minor": "34", "gitVersion": "v1.34.2"}`)
			return
		}
		http.NotFound(w, r)
	}))
	defer api.Close()
	_, r := checkJSON(t, "--kubeconfig", kubeconfig(t, api.URL), "--timeout", "10s")
	first := r.Checks[0]
	if first.Check != "Kubernetes API" || first.Result != cli.Warning || !strings.Contains(first.Detail, "v1.34.2") || !strings.Contains(first.Hint, "1.34 is not among") {
		t.Errorf("the API check of 1.34: %+v", first)
	}
	if len(r.Checks) < 11 {
		t.Errorf("%d checks ran after a warning; want every one", len(r.Checks))
	}
	if !cli.NewReport(r.Checks[:1], "").Success {
		t.Error("a warning alone fails the report")
	}
}

// status's exit codes tell a script what it found, or that it found nothing.
func TestStatusExitCodes(t *testing.T) {
	for _, tc := range []struct {
		st   cli.GlobalStatus
		want int
	}{{cli.GlobalStatus{Exists: true, InSync: true}, 0}, {cli.GlobalStatus{InSync: true}, 1}, {cli.GlobalStatus{Exists: true}, 2}, {cli.GlobalStatus{}, 2}} {
		if got := statusCode(&tc.st); got != tc.want {
			t.Errorf("%+v: exit %d, want %d", tc.st, got, tc.want)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if code, out, errOut := runCmd("status", "app/db-global", "--kubeconfig", kubeconfig(t, "https://"+addr)); code != 3 || out != "" || !strings.Contains(errOut, "connection refused") {
		t.Errorf("status against no API server: exit %d, stdout %q, stderr %q; want 3", code, out, errOut)
	}
	// Under -o json, stdout is one JSON value on that path too.
	code, out, _ := runCmd("status", "app/db-global", "-o", "json", "--kubeconfig", kubeconfig(t, "https://"+addr))
	var failed struct{ Error string }
	if err := json.Unmarshal([]byte(out), &failed); code != 3 || err != nil || !strings.Contains(failed.Error, "connection refused") {
		t.Errorf("status -o json against no API server: exit %d, stdout %q (%v); want 3 and {\"error\": ...}", code, out, err)
	}
}

// pluginLife is how long the test's hung credential plugins would live: a
// command still running at half of it waited for the plugin, not for its
// own --timeout (seconds), whatever the machine's load.
const pluginLife = 120 * time.Second

// A credential plugin that never returns and holds stderr open: every
// command of the built binary, its stdout and stderr pipes read to their end
// as a script's $(...) reads them, ends at --timeout, not with the plugin,
// and leaves no process of the plugin's behind.
func TestAHungCredentialPluginEndsWithTheProcess(t *testing.T) {
	bin, err := runbin.Bin("globalmirror")
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }))
	defer api.Close()
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	// It says it waits for a login, on stderr, and waits; so does a child
	// of its own.
	kc := execKubeconfig(t, dir, api.URL, fmt.Sprintf("#!/bin/sh\necho $$ >> %[1]s\necho 'waiting for the device code login' >&2\nsleep %[2]d &\necho $! >> %[1]s\nexec sleep %[2]d\n", pids, int(pluginLife.Seconds())))
	const timeout = 2 * time.Second
	for _, args := range [][]string{
		{"check", "-o", "json"}, {"status", "db-global"}, {"drain", "east"}, {"undrain", "--service", "app/db"}, {"drain", "--exported"},
	} {
		cmd := exec.Command(bin, append(args, "--kubeconfig", kc, "--timeout", timeout.String())...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var out, errOut []byte
		read := make(chan struct{})
		go func() { out, _ = io.ReadAll(stdout); close(read) }()
		errOut, _ = io.ReadAll(stderr)
		<-read
		_ = cmd.Wait()
		if took := time.Since(began); took > pluginLife/2 {
			t.Errorf("%v: its output ended after %v, as if it waited for the plugin (--timeout %v)", args, took.Round(time.Millisecond), timeout)
		}
		if !strings.Contains(string(out)+string(errOut), "credential plugin") {
			t.Errorf("%v: stdout %q, stderr %q; want the credential plugin named", args, out, errOut)
		}
	}
	data, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range strings.Fields(string(data)) {
		if _, err := os.Stat("/proc/" + pid); err == nil {
			if stat, _ := os.ReadFile("/proc/" + pid + "/stat"); !strings.Contains(string(stat), ") Z ") {
				t.Errorf("the plugin's process %s still runs", pid)
			}
		}
	}
}

// execKubeconfig writes, in dir, a kubeconfig for server (TLS: client-go
// reads a user's credentials only for a TLS server) whose user logs in
// through the credential plugin script, and returns its path.
func execKubeconfig(t *testing.T, dir, server, script string) string {
	t.Helper()
	plugin := filepath.Join(dir, "login")
	if err := os.WriteFile(plugin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: %q, interactiveMode: Never}}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: app}}]
current-context: c
`, server, plugin)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// kubectl's conventions: --flag with -o and -n, a version command (the
// command's own with --client; both halves' otherwise, an API server that
// does not answer exiting 3), and completion scripts that complete the
// commands and flags.
func TestKubectlConventions(t *testing.T) {
	code, out, _ := runCmd("version", "--client", "-o", "json")
	var v cli.Versions
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || v.Command == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Errorf("version --client -o json: exit %d, %q (%v)", code, out, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if code, out, errOut := runCmd("version", "--kubeconfig", kubeconfig(t, "https://"+addr), "--timeout", "2s"); code != 3 || !strings.Contains(out, "globalmirror ") || !strings.Contains(errOut, "could not read") {
		t.Errorf("version of an unreachable cluster: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if code, out, _ := runCmd("completion", shell); code != 0 || !strings.Contains(out, "globalmirror") {
			t.Errorf("completion %s: exit %d, %d bytes", shell, code, len(out))
		}
	}
	// What a shell asks when completing: commands, then a flag's values.
	if _, out, _ := runCmd("__complete", "dr"); !strings.Contains(out, "drain") {
		t.Errorf("completing dr: %q", out)
	}
	if _, out, _ := runCmd("__complete", "drain", "--level", ""); !strings.Contains(out, "shared") || !strings.Contains(out, "all") {
		t.Errorf("completing drain --level: %q", out)
	}
	// -n names status's namespace; a usage error still comes before any request.
	if code, _, errOut := runCmd("status", "-n", "app", "db_global", "--kubeconfig", kubeconfig(t, "https://"+addr)); code != exitUsage || !strings.Contains(errOut, "db_global") {
		t.Errorf("status -n app db_global: exit %d, %q", code, errOut)
	}
}
