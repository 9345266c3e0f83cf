# globalmirror — build, test, demo. Everything the targets need is installed by
# the targets themselves and cached outside the repo (TOOLS_CACHE), keyed by version.

SHELL        := /usr/bin/env bash
.SHELLFLAGS  := -eu -o pipefail -c
GO           ?= go
TOOLS_CACHE  ?= $(HOME)/.cache/globalmirror
BIN          := $(CURDIR)/bin

# The Kubernetes releases proven (build/kubernetes-versions, which
# `globalmirror check` reads too): the first is the control plane of the whole
# suite, the others' kube-apiservers run make test-compat. 1.31 and 1.33
# refuse streamed lists (the paged path), 1.37 streams. Each builds from
# test/tools/apiserver with its own module file (modfile.sh writes one).
KUBE_VERSIONS        := $(shell grep -v '^\#' build/kubernetes-versions)
KUBE_VERSION         := $(firstword $(KUBE_VERSIONS))
KUBE_COMPAT_VERSIONS := $(wordlist 2,$(words $(KUBE_VERSIONS)),$(KUBE_VERSIONS))
ETCD_VERSION        := v3.6.8
STATICCHECK_VERSION := v0.8.2
CONTAINERD_VERSION  := v2.4.2
KUBEPLANE_DIR       := $(TOOLS_CACHE)/kubeplane-$(KUBE_VERSION)-etcd-$(ETCD_VERSION)
apiserver            = $(TOOLS_CACHE)/kube-apiserver-$(1)/kube-apiserver
COMPAT_APISERVERS   := $(foreach v,$(KUBE_COMPAT_VERSIONS),$(call apiserver,$(v)))
CONTAINERD_DIR      := $(TOOLS_CACHE)/containerd-$(CONTAINERD_VERSION)
STATICCHECK         := $(TOOLS_CACHE)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
HELM_VERSION        := v3.19.0
# Prometheus 3.16's promtool (its Go module is v0.316.0): checks and unit-tests the chart's alerts.
PROMTOOL_VERSION    := v0.316.0
PROMTOOL            := $(TOOLS_CACHE)/promtool-$(PROMTOOL_VERSION)/promtool
HELM                := $(TOOLS_CACHE)/helm-$(HELM_VERSION)/helm
# What helm's own release build stamps in: without it, `helm version` is bare
# and `helm template` assumes Kubernetes v1.20 (helm v3.19 is built on 1.34).
HELM_LDFLAGS        := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=34

# Images: the release version is the chart's appVersion, so that the chart's
# default image tags name what `make image` builds.
VERSION    ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/globalmirror/Chart.yaml)
GIT_COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
IMAGE_REPO ?= ghcr.io/globalmirror
IMAGES     := controller coredns
# Empty: the first of docker, podman, buildah that works.
CONTAINER_ENGINE ?=
# local: make the golang and distroless base images here (build/images/bases.sh),
# as no registry is reachable on this project's machines; upstream: pull the
# Dockerfile's defaults, as release images should.
IMAGE_BASES ?= local
# The platforms each image is built for, into one manifest list per image
# (the chart's default images); PUSH=1 pushes the lists to IMAGE_REPO.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
PUSH ?=
# The OCI runtime podman and buildah run build steps and containers with:
# crun rejects the hybrid cgroup layout of this project's machines.
CONTAINER_RUNTIME ?= runc

# Tests and the demo find the control plane and the project's binaries here.
export GLOBALMIRROR_KUBE_ASSETS := $(KUBEPLANE_DIR)
export GLOBALMIRROR_KUBE_APISERVERS := $(foreach v,$(KUBE_COMPAT_VERSIONS),$(v)=$(call apiserver,$(v)))
export GLOBALMIRROR_BIN         := $(BIN)
export GLOBALMIRROR_HELM        := $(HELM)
export GLOBALMIRROR_PROMTOOL    := $(PROMTOOL)
# ... and the images `make image` built (test/image runs them with podman).
export GLOBALMIRROR_IMAGE_REPO    := $(IMAGE_REPO)
export GLOBALMIRROR_IMAGE_VERSION := $(VERSION)

# `make build` and `make image` (the Dockerfile) build with these, so the
# binaries in bin/ and in the images are the same: static (CGO_ENABLED=0),
# reproducible (no paths, no VCS stamp), stripped, with CoreDNS's -version
# naming the commit and build.Version the release (`globalmirror check` compares them).
GO_BUILD_FLAGS := -trimpath -buildvcs=false
# Every go command of this module (lint, tests, bench) builds as `make build`
# does, so that a cold run compiles each package once: pure Go and -trimpath
# are part of a package's build cache key.
export CGO_ENABLED := 0
export GOFLAGS     := -buildvcs=false -trimpath
GO_LDFLAGS     := -s -w -X github.com/coredns/coredns/coremain.GitCommit=$(GIT_COMMIT) \
	-X github.com/globalmirror/globalmirror/build.Version=$(VERSION)
KUBE_LDFLAGS   := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/component-base/version/verflag.programName=kubeplane

# took: the seconds since the recipe it ends began (make expands a recipe
# whole before running its first line), so that a cold run says where its
# time went.
took = $$(( $$(date +%s) - $(shell date +%s) ))s

COMMANDS := $(BIN)/globalmirror-controller $(BIN)/coredns $(BIN)/globalmirror $(BIN)/localkube $(BIN)/mirrorsim

.PHONY: all tools tools-compat node-tools node-images apt-deps image-deps build test test-node test-compiled test-compat test-unit test-chart lint demo bench faults clean helm promtool image

all: build

## tools: the control plane and node (etcd, kube-apiserver, kube-controller-manager,
## kube-scheduler, kubelet, kube-proxy), built from Go modules once per version.
tools: $(KUBEPLANE_DIR)/.ok apt-deps

$(KUBEPLANE_DIR)/.ok: test/tools/go.mod test/tools/go.sum test/tools/kubeplane/main.go
	@mkdir -p $(KUBEPLANE_DIR)
	@echo ">> building etcd $(ETCD_VERSION) and Kubernetes $(KUBE_VERSION) (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy; cold: ~12 min)"
	cd test/tools && env -u CGO_ENABLED $(GO) build $(GO_BUILD_FLAGS) -ldflags '$(KUBE_LDFLAGS)' -o $(KUBEPLANE_DIR)/kubeplane ./kubeplane
	cd $(KUBEPLANE_DIR) && for n in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do ln -sf kubeplane $$n; done
	@touch $@
	@echo ">> took $(took): etcd and Kubernetes $(KUBE_VERSION)"

## tools-compat: the kube-apiserver of each of KUBE_COMPAT_VERSIONS, built
## from Go modules once per version (cold: 5-12 min each).
tools-compat: $(COMPAT_APISERVERS)

$(TOOLS_CACHE)/kube-apiserver-%/kube-apiserver: test/tools/apiserver/main.go test/tools/apiserver/kube-apiserver-%.mod test/tools/apiserver/kube-apiserver-%.sum
	@mkdir -p $(dir $@)
	@echo ">> building kube-apiserver $* (cold: 5-12 min)"
	cd test/tools/apiserver && $(GO) build -modfile=kube-apiserver-$*.mod $(GO_BUILD_FLAGS) -o $@.tmp \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$* -X k8s.io/component-base/version.gitMajor=1 \
		-X k8s.io/component-base/version.gitMinor=$$(echo $* | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean" .
	@mv $@.tmp $@
	@echo ">> took $(took): kube-apiserver $*"

## node-tools: what a real node needs besides kubeplane: containerd, its runc
## shim and ctr built from Go modules (kubelet 1.36 needs containerd 2; Debian
## has 1.6), and runc, the CNI plugins, iptables and iproute2 from Debian.
node-tools: $(CONTAINERD_DIR)/.ok
	$(call apt_install,runc:runc /usr/lib/cni/bridge:containernetworking-plugins iptables:iptables ip:iproute2)

$(CONTAINERD_DIR)/.ok:
	@mkdir -p $(CONTAINERD_DIR)
	@echo ">> building containerd $(CONTAINERD_VERSION) (cold: ~3 min)"
	GOBIN=$(CONTAINERD_DIR) CGO_ENABLED=0 $(GO) install -trimpath -tags 'no_btrfs no_zfs no_devmapper' -ldflags '-s -w' \
		github.com/containerd/containerd/v2/cmd/containerd@$(CONTAINERD_VERSION) \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$(CONTAINERD_VERSION) \
		github.com/containerd/containerd/v2/cmd/ctr@$(CONTAINERD_VERSION)
	@touch $@
	@echo ">> took $(took): containerd $(CONTAINERD_VERSION)"

# apt_install: install the Debian package behind each command:package pair
# whose command is missing.
define apt_install
	@missing=""; for pair in $(1); do \
		command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo ">> installing$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
endef

## apt-deps: dig and dnsperf from Debian, installed only when missing.
apt-deps:
	$(call apt_install,dig:dnsutils dnsperf:dnsperf)

## image-deps: podman, runc, debootstrap (for the local base images) and
## qemu-user-static (test/image runs the arm64 binaries under qemu-aarch64-static)
## from Debian, installed only when missing.
image-deps:
	$(call apt_install,podman:podman runc:runc debootstrap:debootstrap qemu-aarch64-static:qemu-user-static)

## build: the controller, the custom CoreDNS, the globalmirror command and the test tools into bin/.
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GO_BUILD_FLAGS) -ldflags '$(GO_LDFLAGS)' -o $(BIN)/ ./controller/cmd/globalmirror-controller ./build/coredns ./cli/cmd/globalmirror ./test/cmd/localkube ./test/cmd/mirrorsim
	@echo ">> took $(took): build"

## test: unit, integration and end-to-end tests against real control planes and a
## real CoreDNS, the images (built with podman) run as the chart runs them, and
## the chart installed on a real node (test-node, first). What the rest needs
## built (the tests compiled, promtool, the other kube-apiservers) is built
## beside the node test in the idle scheduling class, so that it takes only
## the CPU time the node test leaves, and waited for once it ends.
test: tools node-tools build helm image-deps image node-images
	@echo ">> beside the node test, in the idle scheduling class: the tests compiled and promtool ($(BIN)/beside-go-tests.log), the other kube-apiservers ($(BIN)/beside-compat.log)"
	@setsid $(IDLE) $(MAKE) --no-print-directory test-compiled promtool >$(BIN)/beside-go-tests.log 2>&1 & forgo=$$!; \
	setsid $(IDLE) $(MAKE) --no-print-directory tools-compat >$(BIN)/beside-compat.log 2>&1 & forcompat=$$!; \
	$(NODE_TEST) || { kill -- -$$forgo -$$forcompat; exit 1; }; \
	echo ">> took $(took): the node test"; \
	$(call unidle,$$forgo); $(call unidle,$$forcompat); \
	if ! wait $$forgo; then cat $(BIN)/beside-go-tests.log; kill -- -$$forcompat; exit 1; fi; grep '^>>' $(BIN)/beside-go-tests.log || true; \
	if ! wait $$forcompat; then cat $(BIN)/beside-compat.log; exit 1; fi; grep '^>>' $(BIN)/beside-compat.log || true
	@echo ">> took $(took): the node test and what was built beside it"
	$(GO) test -count=1 -timeout 45m $(GO_TEST_PACKAGES)
	@echo ">> took $(took): the tests but the version matrix"
	$(MAKE) --no-print-directory test-compat

# GO_TEST_PACKAGES are the packages make test's go test runs: all but the
# node test, which runs first on its own.
GO_TEST_PACKAGES = $$($(GO) list ./... | grep -v '/test/node$$')

# IDLE runs a command in the idle scheduling class (SCHED_IDLE: a CPU only
# when nothing else wants it); chrt and setsid (each beside build a process
# group of its own, ended whole where a test fails) are util-linux's.
IDLE := chrt --idle 0
# unidle: a beside build now waited for leaves the idle class (its running
# processes, and what they start from now on): nothing else runs then.
unidle = for p in $$(pgrep -g $(1)); do chrt --other -p 0 $$p 2>/dev/null || true; done

## test-compiled: every test binary compiled and linked, none run (-exec
## true): the build cache then holds what make test's go test compiles.
test-compiled:
	$(GO) test -count=1 -exec true $(GO_TEST_PACKAGES) >/dev/null
	@echo ">> took $(took): the tests compiled"

## test-compat: what touches the API server the most, against each of
## KUBE_COMPAT_VERSIONS' kube-apiserver (the rest of the control plane stays
## KUBE_VERSION's): both halves' integration tests, the relist and upgrade
## tests, and the e2e differential test.
COMPAT_PACKAGES := ./source/integration ./controller/integration ./plugin/global/integration
test-compat: tools build tools-compat
	@for v in $(KUBE_COMPAT_VERSIONS); do \
		echo ">> Kubernetes $$v"; \
		GLOBALMIRROR_KUBE_APISERVER=$(TOOLS_CACHE)/kube-apiserver-$$v/kube-apiserver \
			$(GO) test -count=1 -timeout 20m -skip '^TestAControlPlaneUpgradedInPlace' $(COMPAT_PACKAGES) || exit 1; \
		GLOBALMIRROR_KUBE_APISERVER=$(TOOLS_CACHE)/kube-apiserver-$$v/kube-apiserver \
			$(GO) test -count=1 -timeout 20m -run '^TestDifferential$$' ./test/e2e || exit 1; \
	done
	@echo ">> took $(took): the version matrix"

# NODE_TEST runs the node test; make test runs it too, its prerequisites
# already made.
NODE_TEST = $(GO) test -count=1 -timeout 50m -v ./test/node

## test-node: helm install of the chart onto a real node (containerd, kubelet,
## kube-proxy) in a network namespace of the test's own; see test/node.
test-node: tools node-tools build helm image-deps image node-images
	$(NODE_TEST)
	@echo ">> took $(took): the node test"
# test/image and the node's images come from podman, so make test builds them with podman.
test test-node: CONTAINER_ENGINE = podman

## node-images: the images the test node imports into containerd (pause, a
## client with glibc's and Go's resolvers, a stock CoreDNS, and the project's two), as archives.
NODE_IMAGES := $(BIN)/node-images
export GLOBALMIRROR_NODE_IMAGES := $(NODE_IMAGES)
export GLOBALMIRROR_CONTAINERD   := $(CONTAINERD_DIR)
# kubeadm's CoreDNS manifests, which the node test starts from: in the
# module cache, as part of the k8s.io/kubernetes module `make tools` builds.
export GLOBALMIRROR_KUBEADM_DNS_MANIFESTS := $(shell $(GO) env GOMODCACHE)/k8s.io/kubernetes@$(KUBE_VERSION)/cmd/kubeadm/app/phases/addons/dns/manifests.go
node-images: image
	@OUT='$(NODE_IMAGES)' IMAGE_REPO='$(IMAGE_REPO)' VERSION='$(VERSION)' GO='$(GO)' CONTAINER_RUNTIME='$(CONTAINER_RUNTIME)' \
	GO_IMAGE="localhost/globalmirror/$$(sed -n 's/^ARG GO_IMAGE=\(golang:[^@ ]*\).*/\1/p' Dockerfile)" \
	BASE_IMAGE=localhost/globalmirror/static-debian12:nonroot-$$($(GO) env GOARCH) test/node/images.sh
	@echo ">> took $(took): the node's images"

## test-unit: only the tests that need no control plane.
test-unit:
	$(GO) test -count=1 -short ./...

## test-chart: only the Helm chart's tests (lint, template, schema, install and RBAC on a local cluster).
test-chart: tools build helm promtool
	$(GO) test -count=1 -timeout 15m ./test/chart/...

## helm: helm $(HELM_VERSION), built from Go modules once per version (cold: ~6 min).
helm: $(HELM)

$(HELM):
	@mkdir -p $(dir $@)
	@echo ">> building helm $(HELM_VERSION) (cold: ~6 min)"
	GOBIN=$(dir $@) CGO_ENABLED=0 $(GO) install -trimpath -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	@echo ">> took $(took): helm $(HELM_VERSION)"

## promtool: Prometheus' promtool, built from Go modules once per version (cold: ~5 min).
promtool: $(PROMTOOL)

$(PROMTOOL):
	@mkdir -p $(dir $@)
	@echo ">> building promtool $(PROMTOOL_VERSION) (cold: ~5 min)"
	GOBIN=$(dir $@) CGO_ENABLED=0 $(GO) install -trimpath -ldflags '-s -w' github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)
	@echo ">> took $(took): promtool $(PROMTOOL_VERSION)"

## image: $(IMAGE_REPO)/globalmirror-{controller,coredns}:$(VERSION), each a
## manifest list of IMAGE_PLATFORMS, with the first working container engine;
## the steps are in build/images/build.sh.
image:
	@IMAGE_REPO='$(IMAGE_REPO)' VERSION='$(VERSION)' IMAGES='$(IMAGES)' IMAGE_BASES='$(IMAGE_BASES)' \
	PLATFORMS='$(IMAGE_PLATFORMS)' PUSH='$(PUSH)' \
	CONTAINER_ENGINE='$(CONTAINER_ENGINE)' CONTAINER_RUNTIME='$(CONTAINER_RUNTIME)' GO='$(GO)' GOPROXY='$(GOPROXY)' \
	GO_BUILD_FLAGS='$(GO_BUILD_FLAGS)' GO_LDFLAGS='$(GO_LDFLAGS)' BASES_CACHE='$(TOOLS_CACHE)/bases' \
	build/images/build.sh
	@echo ">> took $(took): the images"

$(STATICCHECK):
	@mkdir -p $(dir $@)
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## lint: gofmt, go vet, staticcheck.
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd test/benchplot && $(GO) vet ./... && $(STATICCHECK) ./...
	@echo ">> took $(took): lint"

## demo: three local clusters, the Linkerd mirror simulator, the controller and
## CoreDNS on 127.0.0.1:$(DEMO_DNS_PORT); prints dig answers, runs until Ctrl-C
## (DEMO_EXIT=1: exits after printing). DEMO_TOPOLOGY=mesh: three clusters linked
## to each other, a controller and a CoreDNS each (ports DEMO_DNS_PORT, +1, +2).
DEMO_DNS_PORT ?= 1053
demo: tools build
	CGO_ENABLED=0 $(GO) build $(GO_BUILD_FLAGS) -o $(BIN)/demo ./test/cmd/demo
	DEMO_DNS_PORT=$(DEMO_DNS_PORT) $(BIN)/demo

## bench: DNS throughput, programming latency, memory, relists, storms, controller
## scale and Go micro-benchmarks into test/bench/RESULTS.md (and stdout),
## results.json (the floors) and the curves' plots (test/benchplot); see
## test/bench/README.md.
BENCH_ROUNDS   ?= 5
BENCH_DURATION ?= 10
BENCH_SIZES    ?= 1000,10000
BENCH_CHANGES  ?= 1000
BENCH_FLAGS    ?=
bench: tools tools-compat build
	CGO_ENABLED=0 $(GO) build $(GO_BUILD_FLAGS) -o $(BIN)/bench ./test/bench/cmd/bench
	$(BIN)/bench -rounds=$(BENCH_ROUNDS) -duration=$(BENCH_DURATION) -sizes=$(BENCH_SIZES) \
		-changes=$(BENCH_CHANGES) -go=$(GO) -out=test/bench/RESULTS.md $(BENCH_FLAGS)
	cd test/benchplot && $(GO) run . -in ../bench/curves.json -out ../bench

## faults: a mesh of local clusters (two controllers and a CoreDNS each) queried
## over UDP and TCP while faults are injected in a seeded random order, then an
## idle check and a wire fuzz; the report goes to test/faults/RESULTS.md. Bounded:
## FAULTS_DURATION of faults (default 15m; the whole run stays under 20 minutes).
FAULTS_DURATION ?= 15m
FAULTS_SEED     ?= 1
FAULTS_CLUSTERS ?= east,west,north
FAULTS_FLAGS    ?= -v
faults: tools build
	CGO_ENABLED=0 $(GO) build $(GO_BUILD_FLAGS) -o $(BIN)/faults ./test/faults/cmd/faults
	$(BIN)/faults -duration=$(FAULTS_DURATION) -seed=$(FAULTS_SEED) -clusters=$(FAULTS_CLUSTERS) \
		-out=test/faults/RESULTS.md $(FAULTS_FLAGS)

clean:
	rm -rf $(BIN)
