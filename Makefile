# globalmirror — build, test, demo. Everything the targets need is installed by
# the targets themselves and cached outside the repo (TOOLS_CACHE), keyed by version.

SHELL        := /usr/bin/env bash
.SHELLFLAGS  := -eu -o pipefail -c
GO           ?= go
TOOLS_CACHE  ?= $(HOME)/.cache/globalmirror
BIN          := $(CURDIR)/bin

KUBE_VERSION        := v1.36.3
ETCD_VERSION        := v3.6.8
STATICCHECK_VERSION := v0.8.2
KUBEPLANE_DIR       := $(TOOLS_CACHE)/kubeplane-$(KUBE_VERSION)-etcd-$(ETCD_VERSION)
STATICCHECK         := $(TOOLS_CACHE)/staticcheck-$(STATICCHECK_VERSION)/staticcheck

# Tests and the demo find the control plane and the project's binaries here.
export GLOBALMIRROR_KUBE_ASSETS := $(KUBEPLANE_DIR)
export GLOBALMIRROR_BIN         := $(BIN)

GO_BUILD_FLAGS := -trimpath
KUBE_LDFLAGS   := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=36 \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/component-base/version/verflag.programName=kubeplane

COMMANDS := $(BIN)/globalmirror-controller $(BIN)/coredns $(BIN)/localkube $(BIN)/mirrorsim

.PHONY: all tools apt-deps build test test-unit lint demo bench clean

all: build

## tools: the control plane (etcd, kube-apiserver, kube-controller-manager), built from Go modules once per version.
tools: $(KUBEPLANE_DIR)/.ok apt-deps

$(KUBEPLANE_DIR)/.ok: test/tools/go.mod test/tools/go.sum test/tools/kubeplane/main.go
	@mkdir -p $(KUBEPLANE_DIR)
	@echo ">> building kube-apiserver, kube-controller-manager and etcd $(KUBE_VERSION)/$(ETCD_VERSION) (cold: ~9 min)"
	cd test/tools && $(GO) build $(GO_BUILD_FLAGS) -ldflags '$(KUBE_LDFLAGS)' -o $(KUBEPLANE_DIR)/kubeplane ./kubeplane
	cd $(KUBEPLANE_DIR) && for n in etcd kube-apiserver kube-controller-manager; do ln -sf kubeplane $$n; done
	@touch $@

## apt-deps: dig and dnsperf from Debian, installed only when missing.
apt-deps:
	@missing=""; command -v dig >/dev/null || missing="$$missing dnsutils"; \
	command -v dnsperf >/dev/null || missing="$$missing dnsperf"; \
	if [ -n "$$missing" ]; then \
		echo ">> installing$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

## build: the controller, the custom CoreDNS and the test tools into bin/.
build:
	@mkdir -p $(BIN)
	$(GO) build $(GO_BUILD_FLAGS) -o $(BIN)/ ./controller/cmd/globalmirror-controller ./build/coredns ./test/cmd/localkube ./test/cmd/mirrorsim

## test: unit, integration and end-to-end tests against real control planes and a real CoreDNS.
test: tools build
	$(GO) test -count=1 -timeout 45m ./...

## test-unit: only the tests that need no control plane.
test-unit:
	$(GO) test -count=1 -short ./...

$(STATICCHECK):
	@mkdir -p $(dir $@)
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## lint: gofmt, go vet, staticcheck.
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

clean:
	rm -rf $(BIN)
