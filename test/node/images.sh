#!/usr/bin/env bash
# images.sh: what `make node-images` runs (the Makefile passes the variables).
#
# Writes to $OUT, as docker archives that containerd's `ctr images import`
# takes, the images the test node runs (no registry is reachable):
#
#   pause       the pod sandbox: test/cmd/pause, static, alone in the image.
#   client      Debian bookworm (glibc, getent) with test/cmd/resolve, linked
#               against glibc, for pods that resolve as applications do, and
#               pause as a command that waits.
#   coredns-stock
#               CoreDNS's own main (github.com/coredns/coredns), the version
#               the project builds on, without global, built as the official
#               image is (static, nonroot, setcap for port 53): the cluster
#               DNS a kubeadm cluster runs before globalmirror comes in.
#   controller, coredns
#               the project's images, as `make image` built them: their names
#               are manifest lists (linux/amd64 and linux/arm64), which podman
#               resolves to this machine's member, so the archive holds that
#               image under the list's name; each archive's config is checked
#               to be for this machine's architecture.
#
# Each archive comes with NAME.ref (the image's name) and NAME.id (its ID); an
# archive whose image did not change is not written again. The client image
# starts from the local Debian base `make image` made (build/images/bases.sh).
set -euo pipefail

: "${OUT:?}" "${IMAGE_REPO:?}" "${VERSION:?}" "${GO_IMAGE:?}" "${BASE_IMAGE:?}"
go=${GO:-go}
arch=$("$go" env GOARCH)
runtime=${CONTAINER_RUNTIME:-runc}
podman=(podman ${runtime:+--runtime "$runtime"})
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
tag=node-test

mkdir -p "$OUT"
stage=$(mktemp -d "${TMPDIR:-/tmp}/gm-node-images.XXXXXX")
trap 'rm -rf "$stage"' EXIT

(cd "$top" &&
	CGO_ENABLED=0 "$go" build -trimpath -buildvcs=false -ldflags '-s -w' -o "$stage/pause" ./test/cmd/pause &&
	CGO_ENABLED=1 "$go" build -trimpath -buildvcs=false -ldflags '-s -w' -o "$stage/resolve" ./test/cmd/resolve &&
	mkdir "$stage/stock" &&
	CGO_ENABLED=0 "$go" build -trimpath -buildvcs=false -ldflags '-s -w' -o "$stage/stock/coredns" github.com/coredns/coredns)

# pause: one file, made without a build.
tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$stage" -cf "$stage/pause.tar" ./pause
"${podman[@]}" import --quiet --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535' \
	"$stage/pause.tar" "localhost/globalmirror/pause:$tag" >/dev/null

# client: Debian without the Go toolchain of the builder base it comes from.
cat >"$stage/Containerfile" <<CONTAINERFILE
FROM $GO_IMAGE AS debian
RUN rm -rf /usr/local/go /go
FROM scratch
COPY --from=debian / /
COPY resolve /usr/local/bin/resolve
COPY pause /usr/local/bin/pause
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["/usr/local/bin/pause"]
CONTAINERFILE
"${podman[@]}" build --quiet --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network none \
	--tag "localhost/globalmirror/node-client:$tag" -f "$stage/Containerfile" "$stage" >/dev/null

# coredns-stock: setcap in a stage of the builder base, as the project's
# Dockerfile does (the layer installing it is cached after the first build).
cat >"$stage/stock/Containerfile" <<CONTAINERFILE
FROM $GO_IMAGE AS caps
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libcap2-bin >/dev/null \
    && rm -rf /var/lib/apt/lists/*
COPY coredns /coredns
RUN setcap cap_net_bind_service=+ep /coredns
FROM $BASE_IMAGE
COPY --from=caps /coredns /coredns
USER 65532:65532
EXPOSE 53/udp 53/tcp 9153
ENTRYPOINT ["/coredns"]
CONTAINERFILE
"${podman[@]}" build --quiet --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network host \
	--tag "localhost/globalmirror/coredns-stock:$tag" -f "$stage/stock/Containerfile" "$stage/stock" >/dev/null

save() {
	local name=$1 ref=$2 id
	id=$("${podman[@]}" image inspect --format '{{.Id}}' "$ref") ||
		{ echo "images.sh: $ref is missing (run make image)" >&2; exit 1; }
	if [ -s "$OUT/$name.tar" ] && [ "$(cat "$OUT/$name.id" 2>/dev/null)" = "$id" ]; then
		return
	fi
	rm -f "$OUT/$name.tar"
	"${podman[@]}" save --quiet --format docker-archive -o "$OUT/$name.tar.tmp" "$ref"
	local config
	config=$(tar -xOf "$OUT/$name.tar.tmp" manifest.json | sed -n 's/.*"Config":"\([^"]*\)".*/\1/p')
	if ! tar -xOf "$OUT/$name.tar.tmp" "$config" | grep -q '"architecture":"'"$arch"'"'; then
		echo "images.sh: $ref: saved an image whose config is not for $arch, this node's architecture" >&2
		exit 1
	fi
	mv "$OUT/$name.tar.tmp" "$OUT/$name.tar"
	echo "$ref" >"$OUT/$name.ref"
	echo "$id" >"$OUT/$name.id"
	echo ">> node image $name: $ref"
}
save pause "localhost/globalmirror/pause:$tag"
save client "localhost/globalmirror/node-client:$tag"
save coredns-stock "localhost/globalmirror/coredns-stock:$tag"
save controller "$IMAGE_REPO/globalmirror-controller:$VERSION"
save coredns "$IMAGE_REPO/globalmirror-coredns:$VERSION"
