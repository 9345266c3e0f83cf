#!/usr/bin/env bash
# build.sh: what `make image` runs (the Makefile passes the variables below).
#
# Builds $IMAGE_REPO/globalmirror-<target>:$VERSION for each target in
# $IMAGES from the Dockerfile, with $CONTAINER_ENGINE or else the first of
# docker, podman and buildah that works, and says why none does.
#
#   IMAGE_BASES=local     (default) the base images are made here by bases.sh,
#                         for machines that cannot reach a registry;
#   IMAGE_BASES=upstream  the Dockerfile's defaults, pulled from their registries.
#
# With podman and buildah the build runs with $CONTAINER_RUNTIME (runc: crun
# rejects hybrid cgroup hosts), explicit rlimits (runc cannot apply the
# engines' defaults there) and the host's network, and it uses this machine's
# Go module and build caches (mounted with -v, GOPROXY=off): compiled by the
# same toolchain with -trimpath, the packages `make build` compiled are cache
# hits. Docker builds use BuildKit's cache mounts instead.
set -euo pipefail

: "${IMAGE_REPO:?}" "${VERSION:?}" "${GO_BUILD_FLAGS:?}" "${GO_LDFLAGS:?}"
images=${IMAGES:-controller coredns}
go=${GO:-go}
runtime=${CONTAINER_RUNTIME-runc}
ulimits=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
here=$(cd "$(dirname "$0")" && pwd)

# broken ENGINE prints why the engine cannot build here, or nothing.
broken() {
	local out
	if ! command -v "$1" >/dev/null 2>&1; then echo "not installed"; return; fi
	if [ "$1" != docker ] && [ -n "$runtime" ] && ! command -v "$runtime" >/dev/null 2>&1; then
		echo "installed, but its runtime $runtime is not (install it, or set CONTAINER_RUNTIME= for the default)"
		return
	fi
	out=$(timeout 30 "$1" info 2>&1 >/dev/null) || echo "installed, but '$1 info' fails: $(head -n1 <<<"$out")"
}

engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
	why=""
	for e in docker podman buildah; do
		reason=$(broken $e)
		if [ -z "$reason" ]; then engine=$e; break; fi
		why+=$'\n'"  $e: $reason"
	done
	if [ -z "$engine" ]; then
		echo "make image: no working container engine, so no image was built:$why" >&2
		echo "Start a docker daemon, or install podman and runc (make image-deps), or set CONTAINER_ENGINE=<engine>." >&2
		exit 1
	fi

elif reason=$(broken "$engine") && [ -n "$reason" ]; then
	echo "make image: CONTAINER_ENGINE=$engine: $reason" >&2
	exit 1
fi

build=() args=()
case $engine in
docker) export DOCKER_BUILDKIT=1; build=(docker build) ;;
podman) build=(podman ${runtime:+--runtime "$runtime"} build "${ulimits[@]}" --network host) ;;
buildah) build=(buildah build --layers ${runtime:+--runtime "$runtime"} "${ulimits[@]}" --network host) ;;
*) echo "make image: CONTAINER_ENGINE=$engine: want docker, podman or buildah" >&2; exit 1 ;;
esac

case ${IMAGE_BASES:-local} in
local)
	go_image=localhost/globalmirror/$(sed -n 's/^ARG GO_IMAGE=\(golang:[^@ ]*\).*/\1/p' Dockerfile)
	base_image=localhost/globalmirror/static-debian12:nonroot
	start=$(date +%s)
	"$here/bases.sh" "$engine" "$go_image" "$base_image"
	echo ">> base images: $(($(date +%s) - start)) s"
	args+=(--build-arg GO_IMAGE="$go_image" --build-arg BASE_IMAGE="$base_image")
	;;
upstream) ;;
*) echo "make image: IMAGE_BASES=$IMAGE_BASES: want local or upstream" >&2; exit 1 ;;
esac

if [ "$engine" = docker ]; then
	[ -z "${GOPROXY:-}" ] || args+=(--build-arg GOPROXY="$GOPROXY")
else
	# Every module the build needs is then in the host's cache, so the
	# build itself fetches nothing.
	"$go" mod download
	args+=(-v "$("$go" env GOMODCACHE)":/var/cache/host-go-mod --build-arg GOMODCACHE=/var/cache/host-go-mod
		-v "$("$go" env GOCACHE)":/var/cache/host-go-build --build-arg GOCACHE=/var/cache/host-go-build
		--build-arg GOPROXY=off
		# Set by docker for every build, by these only with --platform.
		--build-arg TARGETOS="$("$go" env GOOS)" --build-arg TARGETARCH="$("$go" env GOARCH)")
fi

# id REF prints the image's ID, or nothing.
id() {
	case $engine in
	buildah) buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true ;;
	*) "$engine" image inspect --format '{{.Id}}' "$1" 2>/dev/null || true ;;
	esac
}

for t in $images; do
	ref=$IMAGE_REPO/globalmirror-$t:$VERSION
	echo ">> $engine build --target $t --tag $ref"
	old=$(id "$ref") start=$(date +%s)
	"${build[@]}" --target "$t" --tag "$ref" "${args[@]}" \
		--build-arg GO_BUILD_FLAGS="$GO_BUILD_FLAGS" --build-arg GO_LDFLAGS="$GO_LDFLAGS" .
	echo ">> $ref: built in $(($(date +%s) - start)) s"
	# The image this one replaces, unless something else still names or uses it.
	if [ -n "$old" ] && [ "$old" != "$(id "$ref")" ]; then
		"$engine" rmi "$old" >/dev/null 2>&1 || true
	fi
done
