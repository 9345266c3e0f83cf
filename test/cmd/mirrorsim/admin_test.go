package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/globalmirror/globalmirror/test/mirrorsim"
)

type fakeLinks struct{ calls []string }

func (f *fakeLinks) Link(_ context.Context, name string, cfg *rest.Config, opts ...mirrorsim.LinkOption) error {
	f.calls = append(f.calls, fmt.Sprintf("link %s %s %d options", name, cfg.Host, len(opts)))
	return nil
}

func (f *fakeLinks) Unlink(_ context.Context, name string) error {
	f.calls = append(f.calls, "unlink "+name)
	if name == "nowhere" {
		return errors.New("nowhere is not linked")
	}
	return nil
}

func (f *fakeLinks) SetGatewayAlive(name string, alive bool) error {
	f.calls = append(f.calls, "gateway "+name+" "+map[bool]string{true: "up", false: "down"}[alive])
	return nil
}

func (f *fakeLinks) Links() []mirrorsim.LinkStatus {
	return []mirrorsim.LinkStatus{{Name: "east", GatewayAlive: true, GatewayUp: false}}
}

func TestAdminHandler(t *testing.T) {
	sim := &fakeLinks{}
	load := func(path string) (*rest.Config, error) { return &rest.Config{Host: "host-of-" + path}, nil }
	srv := httptest.NewServer(adminHandler(sim, load))
	defer srv.Close()

	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/healthz", 200, "ok\n"},
		{"GET", "/links", 200, `[{"name":"east","gatewayAlive":true,"gatewayUp":false}]` + "\n"},
		{"PUT", "/links/west?kubeconfig=w.kubeconfig", 200, "ok\n"},
		{"PUT", "/links/north?kubeconfig=n.kubeconfig&gateway=down", 200, "ok\n"},
		{"PUT", "/links/north?kubeconfig=n.kubeconfig&gateway=sideways", 400, "gateway=up|down\n"},
		{"PUT", "/links/west", 400, "kubeconfig=PATH is required\n"},
		{"PUT", "/links/east/gateway?alive=false", 200, "ok\n"},
		{"PUT", "/links/east/gateway?alive=true", 200, "ok\n"},
		{"PUT", "/links/east/gateway?alive=maybe", 400, "alive=true|false is required\n"},
		{"DELETE", "/links/west", 200, "ok\n"},
		{"DELETE", "/links/nowhere", 409, "nowhere is not linked\n"},
		{"POST", "/links/west", 405, ""},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.body != "" && string(body) != tc.body) {
			t.Errorf("%s %s = %d %q, want %d %q", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.body)
		}
	}
	want := "link west host-of-w.kubeconfig 0 options|link north host-of-n.kubeconfig 1 options|gateway east down|gateway east up|unlink west|unlink nowhere"
	if got := strings.Join(sim.calls, "|"); got != want {
		t.Errorf("calls %s\nwant  %s", got, want)
	}
}

func TestTargets(t *testing.T) {
	tg := targets{}
	if err := tg.Set("east=/e.kubeconfig"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"east=/again", "noequals", "=path", "name="} {
		if err := tg.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}
