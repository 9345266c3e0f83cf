# syntax=docker/dockerfile:1
#
# Two images from one build: `--target controller` and `--target coredns`.
# `make image` builds both with the flags `make build` uses (GO_BUILD_FLAGS,
# GO_LDFLAGS); the ARG defaults below are the same values for a plain
# `docker build`.
#
# Base images are pinned by tag. No registry was reachable where this file was
# written, so their digests could not be looked up: release builds should pin
# them, e.g. --build-arg GO_IMAGE=golang:1.26.8-bookworm@sha256:<digest>.
# Where no registry is reachable, `make image` makes stand-ins for both
# locally (build/images/bases.sh) and passes them as GO_IMAGE and BASE_IMAGE.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot
ARG GO_BUILD_FLAGS="-trimpath -buildvcs=false"
ARG GO_LDFLAGS="-s -w"
# The Go module and build caches are the cache mounts below by default, which
# BuildKit keeps from one build to the next. `make image` with podman or
# buildah points them instead at this machine's own caches, mounted into the
# build (-v), so that the image build reuses what `make build` compiled: with
# the same compiler (GO_IMAGE) and -trimpath the build cache hits.
ARG GOMODCACHE=/go/pkg/mod
ARG GOCACHE=/root/.cache/go-build

# Compile on the build machine's platform and cross-compile for the target's:
# the binaries are pure Go (CGO_ENABLED=0), so no emulation is needed.
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
# setcap, for the CoreDNS binary below; installed before the sources are
# copied so that this layer stays cached.
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libcap2-bin >/dev/null \
    && rm -rf /var/lib/apt/lists/*
ENV CGO_ENABLED=0 GOFLAGS=-mod=readonly
# Build arguments reach the go commands as the environment of each RUN, not
# through ENV: podman and buildah rebuild a RUN whose arguments changed, but
# keep a cached ENV set from a changed argument (buildah issue 5501), which
# would build with stale flags.
ARG GOPROXY
ARG GOMODCACHE
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .

# Both binaries in one go build, as `make build` builds them; each image's
# build then reuses this stage.
FROM build AS binaries
ARG TARGETOS
ARG TARGETARCH
ARG GOPROXY
ARG GOMODCACHE
ARG GOCACHE
ARG GO_BUILD_FLAGS
ARG GO_LDFLAGS
# setcap lets the non-root CoreDNS bind port 53, as the official CoreDNS image
# does. The container must be allowed NET_BIND_SERVICE, or the kernel will not
# execute the binary at all (the chart always allows it).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS="${TARGETOS}" GOARCH="${TARGETARCH}" \
    go build ${GO_BUILD_FLAGS} -ldflags "${GO_LDFLAGS}" -o /out/ ./controller/cmd/globalmirror-controller ./build/coredns \
    && setcap cap_net_bind_service=+ep /out/coredns

FROM ${BASE_IMAGE} AS controller
COPY --from=binaries /out/globalmirror-controller /globalmirror-controller
# distroless's nonroot user; numeric so that runAsNonRoot can verify it.
USER 65532:65532
# /metrics, /healthz, /readyz
EXPOSE 8080
ENTRYPOINT ["/globalmirror-controller"]

FROM ${BASE_IMAGE} AS coredns
COPY --from=binaries /out/coredns /coredns
USER 65532:65532
# DNS; 9153 is the prometheus plugin's metrics port.
EXPOSE 53/udp 53/tcp 9153
ENTRYPOINT ["/coredns"]
