package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"k8s.io/client-go/rest"

	"github.com/globalmirror/globalmirror/test/mirrorsim"
)

// links is what the admin API drives: *mirrorsim.Simulator.
type links interface {
	Link(ctx context.Context, name string, cfg *rest.Config, opts ...mirrorsim.LinkOption) error
	Unlink(ctx context.Context, name string) error
	SetGatewayAlive(name string, alive bool) error
	Links() []mirrorsim.LinkStatus
}

const adminUsage = `Admin API, on --admin-addr:
  GET    /healthz                          200 once every --target is linked
  GET    /links                            [{"name":"east","gatewayAlive":true,"gatewayUp":true}, ...]
  PUT    /links/{name}?kubeconfig=PATH     link a cluster (&gateway=down: its gateway fails
                                           its probes from the start)
  DELETE /links/{name}                     unlink: delete all of its mirrors
  PUT    /links/{name}/gateway?alive=BOOL  gateway passes (true) or fails (false) its probes
`

// adminHandler serves the admin API; loadConfig reads a kubeconfig.
func adminHandler(sim links, loadConfig func(path string) (*rest.Config, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /links", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sim.Links())
	})
	mux.HandleFunc("PUT /links/{name}", func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Query().Get("kubeconfig")
		if path == "" {
			http.Error(w, "kubeconfig=PATH is required", http.StatusBadRequest)
			return
		}
		cfg, err := loadConfig(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var opts []mirrorsim.LinkOption
		switch r.URL.Query().Get("gateway") {
		case "", "up":
		case "down":
			opts = append(opts, mirrorsim.GatewayDown())
		default:
			http.Error(w, "gateway=up|down", http.StatusBadRequest)
			return
		}
		reply(w, sim.Link(r.Context(), r.PathValue("name"), cfg, opts...))
	})
	mux.HandleFunc("DELETE /links/{name}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, sim.Unlink(r.Context(), r.PathValue("name")))
	})
	mux.HandleFunc("PUT /links/{name}/gateway", func(w http.ResponseWriter, r *http.Request) {
		alive, err := strconv.ParseBool(r.URL.Query().Get("alive"))
		if err != nil {
			http.Error(w, "alive=true|false is required", http.StatusBadRequest)
			return
		}
		reply(w, sim.SetGatewayAlive(r.PathValue("name"), alive))
	})
	return mux
}

func reply(w http.ResponseWriter, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	fmt.Fprintln(w, "ok")
}
