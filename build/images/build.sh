#!/usr/bin/env bash
# build.sh: what `make image` runs (the Makefile passes the variables below).
#
# Builds $IMAGE_REPO/globalmirror-<target>:$VERSION for each target in
# $IMAGES from the Dockerfile, with $CONTAINER_ENGINE or else the first of
# docker, podman and buildah that works, and says why none does.
#
# Each is built for every platform of $PLATFORMS (default linux/amd64
# linux/arm64) as $IMAGE_REPO/globalmirror-<target>:$VERSION-<arch>, one
# build per platform: the build stage runs on this machine's platform and
# cross-compiles (pure Go), and only the final stage, files copied onto the
# base, is the target's, so no emulation is needed. With podman and buildah
# the name without -<arch> is then a manifest list of those images, made
# afresh each time (engines resolve it to this machine's member for run,
# inspect and save); with docker, which keeps no local manifest lists, it
# tags this machine's member, and the list is made in the registry on push.
# One build per platform rather than `build --platform a,b --manifest`:
# buildah 1.28 (podman 4.3, Debian 12) resolves FROM --platform=$BUILDPLATFORM
# to the target's platform there, and its layer cache reuses steps across
# platforms.
#
#   PUSH=1                then pushes each list, with every member, to
#                         $IMAGE_REPO (podman/buildah: manifest push --all;
#                         docker: the members' tags, then docker manifest).
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
platforms=${PLATFORMS:-linux/amd64 linux/arm64}
push=${PUSH:-}
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

arches=()
for p in $platforms; do
	case $p in
	linux/*/*) echo "make image: PLATFORMS: $p: variants are not supported" >&2; exit 1 ;;
	linux/?*) arches+=("${p#linux/}") ;;
	*) echo "make image: PLATFORMS: $p: want linux/<arch>" >&2; exit 1 ;;
	esac
done
[ ${#arches[@]} -gt 0 ] || { echo "make image: PLATFORMS is empty" >&2; exit 1; }
host_arch=$("$go" env GOARCH)

# base[ARCH] is the final stage's base image for ARCH, given as BASE_IMAGE;
# empty: the Dockerfile's default, which docker resolves per --platform.
declare -A base=()
case ${IMAGE_BASES:-local} in
local)
	go_image=localhost/globalmirror/$(sed -n 's/^ARG GO_IMAGE=\(golang:[^@ ]*\).*/\1/p' Dockerfile)
	base_image=localhost/globalmirror/static-debian12:nonroot
	start=$(date +%s)
	"$here/bases.sh" "$engine" "$go_image" "$base_image" "${arches[@]}"
	echo ">> base images: $(($(date +%s) - start)) s"
	args+=(--build-arg GO_IMAGE="$go_image")
	for a in "${arches[@]}"; do base[$a]=$base_image-$a; done
	;;
upstream)
	# podman and buildah build without --platform (see above), so each
	# architecture's base is pulled here and named by its ID.
	if [ "$engine" != docker ]; then
		upstream_base=$(sed -n 's/^ARG BASE_IMAGE=\([^ ]*\).*/\1/p' Dockerfile)
		for a in "${arches[@]}"; do
			base[$a]=$("$engine" pull --quiet --os linux --arch "$a" "$upstream_base" | tail -n1)
		done
	fi
	;;
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
		--build-arg GOPROXY=off)
fi

# id REF prints the image's ID, or nothing.
id() {
	case $engine in
	buildah) buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true ;;
	*) "$engine" image inspect --format '{{.Id}}' "$1" 2>/dev/null || true ;;
	esac
}

# Per architecture: docker builds for that --platform (BuildKit runs the
# build stage on $BUILDPLATFORM); podman and buildah build on this machine's
# platform, given the target as TARGETOS/TARGETARCH (which docker sets
# itself) and the base of that architecture, whose config the image keeps.
olds=()
for a in "${arches[@]}"; do
	pargs=(--build-arg TARGETOS=linux --build-arg TARGETARCH="$a")
	[ "$engine" != docker ] || pargs=(--platform "linux/$a")
	[ -z "${base[$a]:-}" ] || pargs+=(--build-arg BASE_IMAGE="${base[$a]}")
	for t in $images; do
		ref=$IMAGE_REPO/globalmirror-$t:$VERSION-$a
		echo ">> $engine build --target $t --tag $ref (linux/$a)"
		old=$(id "$ref") start=$(date +%s)
		"${build[@]}" --target "$t" --tag "$ref" "${args[@]}" "${pargs[@]}" \
			--build-arg GO_BUILD_FLAGS="$GO_BUILD_FLAGS" --build-arg GO_LDFLAGS="$GO_LDFLAGS" .
		echo ">> $ref: built in $(($(date +%s) - start)) s"
		[ -z "$old" ] || [ "$old" = "$(id "$ref")" ] || olds+=("$old")
	done
done

for t in $images; do
	ref=$IMAGE_REPO/globalmirror-$t:$VERSION
	case $engine in
	docker)
		if [[ " ${arches[*]} " == *" $host_arch "* ]]; then docker tag "$ref-$host_arch" "$ref"; fi
		if [ -n "$push" ]; then
			for a in "${arches[@]}"; do docker push "$ref-$a"; done
			docker manifest rm "$ref" >/dev/null 2>&1 || true
			docker manifest create "$ref" "${arches[@]/#/$ref-}"
			docker manifest push "$ref"
		fi
		;;
	*)
		# The name may hold an earlier list or, from before lists, an image.
		"$engine" manifest rm "$ref" >/dev/null 2>&1 || "$engine" rmi "$ref" >/dev/null 2>&1 || true
		"$engine" manifest create "$ref" >/dev/null
		for a in "${arches[@]}"; do "$engine" manifest add "$ref" "containers-storage:$ref-$a" >/dev/null; done
		echo ">> $ref: manifest list of ${platforms// /, }"
		if [ -n "$push" ]; then
			echo ">> $engine manifest push --all $ref"
			"$engine" manifest push --all "$ref" "docker://$ref"
		fi
		;;
	esac
done

# The images these replace, unless something else still names or uses them.
for old in "${olds[@]}"; do "$engine" rmi "$old" >/dev/null 2>&1 || true; done
