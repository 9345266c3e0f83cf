package kubeclient

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
)

// HTTP1: a client of the configuration talks HTTP/1.1 to a server that
// offers HTTP/2, which the same configuration without it would use.
func TestHTTP1(t *testing.T) {
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Proto", r.Proto)
	}))
	server.EnableHTTP2 = true
	server.StartTLS()
	defer server.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})

	proto := func(rc *rest.Config) string {
		t.Helper()
		client, err := rest.HTTPClientFor(rc)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, server.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Proto")
	}
	base := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	if got := proto(rest.CopyConfig(base)); got != "HTTP/2.0" {
		t.Fatalf("without HTTP1 the client spoke %s, want HTTP/2.0 (the test proves nothing)", got)
	}
	rc := rest.CopyConfig(base)
	HTTP1(rc)
	if got := proto(rc); got != "HTTP/1.1" {
		t.Errorf("with HTTP1 the client spoke %s, want HTTP/1.1", got)
	}
}
