#!/usr/bin/env bash
# bases.sh ENGINE GO_IMAGE BASE_IMAGE ARCH...
# bases.sh --print-mirror
#
# Makes, on this machine, the two base images the Dockerfile builds on, for
# when no registry can be reached (`make image` with IMAGE_BASES=local):
#
#   GO_IMAGE    stands in for golang:<version>-bookworm: Debian bookworm
#               (minbase plus ca-certificates, debootstrap'd from the Debian
#               archive apt uses here, see below) with this machine's own Go
#               toolchain copied to /usr/local/go, and the golang image's
#               PATH, GOPATH and GOTOOLCHAIN. Its tag names the Go version,
#               which must be the one installed here: the image build then
#               compiles with the very compiler `make build` used, so it can
#               share its build cache.
#   BASE_IMAGE-ARCH
#               stands in for gcr.io/distroless/static-debian12:nonroot, one
#               image per ARCH (Go's names: amd64, arm64), whose config names
#               that architecture: no shell, no package manager; /etc/passwd
#               and /etc/group with root and nonroot (65532), nsswitch.conf,
#               services, CA certificates and time zones from this machine's
#               ca-certificates and tzdata, /tmp (1777), /home/nonroot (owned
#               by 65532); USER 65532, WORKDIR /home/nonroot, SSL_CERT_FILE.
#               These are files only, so one machine makes them for every
#               architecture; /etc/globalmirror-base names the architecture,
#               which keeps the images' layers distinct: buildah 1.28 (podman
#               4.3) matches a cached build step by its parent layer and
#               history, not by the base image's architecture, so with
#               identical layers an arm64 build would reuse the amd64 build's
#               steps, config and all.
#
# Each image is made only when the engine lacks it or holds one made by
# another version of its recipe (label org.globalmirror.base-recipe, a hash of
# the shell functions below that make it). The builder's root filesystem, the
# slow part (about a minute of debootstrap), is kept as a tarball in
# $BASES_CACHE (default ~/.cache/globalmirror/bases), keyed by Go version and
# recipe. ENGINE is podman, docker or buildah. debootstrap (`make image-deps`
# installs it) needs root; sudo is used when not root.
#
# debootstrap fetches from the Debian archive this machine's apt already uses:
# the first enabled `deb` source of a Debian suite (not -security) with the
# main component, in the order apt reads its sources (sources.list, then
# sources.list.d's *.list and *.sources files by name; one-line and deb822
# formats). DEBIAN_MIRROR, when set, is used instead. `bases.sh --print-mirror`
# prints the one it would use.
set -euo pipefail

say() { echo ">> bases: $*"; }
die() { echo "bases.sh: $*" >&2; exit 1; }

# Debian's suites and release names: a source of one of them (or of its
# -updates, -backports, ...) is the Debian archive.
debian_suites="oldoldstable oldstable stable testing unstable sid experimental buster bullseye bookworm trixie forky duke"

# apt_source_files prints the files apt reads its sources from, in its order.
apt_source_files() {
	local list=/etc/apt/sources.list parts=/etc/apt/sources.list.d/ f LC_ALL=C
	if command -v apt-config >/dev/null; then
		eval "$(apt-config shell list Dir::Etc::sourcelist/f parts Dir::Etc::sourceparts/d)"
	fi
	[ ! -f "$list" ] || echo "$list"
	for f in "${parts%/}"/*; do
		case $f in *.list | *.sources) [ ! -f "$f" ] || echo "$f" ;; esac
	done
}

# apt_sources FILE... prints one line per enabled `deb` source: URI, suite
# and components, from one-line (*.list) and deb822 (*.sources) files.
apt_sources() {
	local f
	for f in "$@"; do
		case $f in
		*.sources)
			awk '
				function flush(   nu, ns, uris, suites, i, j) {
					if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no") {
						nu = split(uri, uris, " "); ns = split(suite, suites, " ")
						for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print uris[i], suites[j], comps
					}
					types = uri = suite = comps = enabled = ""; last = ""
				}
				/^[ \t]*#/ { next }
				/^[ \t]*$/ { flush(); next }
				/^[ \t]/ {
					value = $0; gsub(/[ \t]+/, " ", value)
					if (last == "uris") uri = uri value
					else if (last == "suites") suite = suite value
					else if (last == "components") comps = comps value
					next
				}
				{
					name = tolower($0); sub(/:.*/, "", name)
					value = $0; sub(/^[^:]*:[ \t]*/, "", value); gsub(/[ \t]+/, " ", value)
					last = name
					if (name == "types") types = value
					else if (name == "uris") uri = value
					else if (name == "suites") suite = value
					else if (name == "components") comps = value
					else if (name == "enabled") enabled = value
				}
				END { flush() }
			' "$f"
			;;
		*)
			awk '
				{ sub(/#.*/, "") }
				$1 != "deb" { next }
				{
					i = 2
					if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
					if (i + 1 > NF) next
					line = $i " " $(i + 1)
					for (j = i + 2; j <= NF; j++) line = line " " $j
					print line
				}
			' "$f"
			;;
		esac
	done
}

# apt_debian_mirror prints the URI of the first Debian archive among apt's
# sources, or fails.
apt_debian_mirror() {
	local uri suite comps base
	while read -r uri suite comps; do
		case $suite in */* | *-security) continue ;; esac # the security archive
		case " $comps " in *" main "*) ;; *) continue ;; esac
		case $uri in http://* | https://* | ftp://* | file:/*) ;; *) continue ;; esac
		base=${suite%%-*}
		case " $debian_suites " in *" $base "*) echo "${uri%/}"; return 0 ;; esac
	done < <(apt_sources $(apt_source_files))
	return 1
}

# debian_mirror prints DEBIAN_MIRROR, or else the Debian archive apt uses.
debian_mirror() {
	if [ -n "${DEBIAN_MIRROR:-}" ]; then
		echo "$DEBIAN_MIRROR"
		return
	fi
	apt_debian_mirror || die "no Debian archive among apt's sources ($(apt_source_files | tr '\n' ' ' | sed 's/ $//')): want an enabled deb source of a Debian suite with the main component, or set DEBIAN_MIRROR to a Debian mirror's URL"
}

if [ "${1:-}" = --print-mirror ]; then
	debian_mirror
	exit
fi

usage="usage: bases.sh ENGINE GO_IMAGE BASE_IMAGE ARCH..."
engine=${1:?$usage}
go_image=${2:?$usage}
base_image=${3:?$usage}
shift 3
arches=("$@")
[ ${#arches[@]} -gt 0 ] || die "$usage"
cache=${BASES_CACHE:-$HOME/.cache/globalmirror/bases}
suite=bookworm
recipe_label=org.globalmirror.base-recipe
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo

# recipe_of REF prints the recipe label of an image, or nothing when it is missing.
recipe_of() {
	case $engine in
	buildah) buildah inspect --type image --format "{{ index .OCIv1.Config.Labels \"$recipe_label\" }}" "$1" 2>/dev/null || true ;;
	*) "$engine" image inspect --format "{{ index .Config.Labels \"$recipe_label\" }}" "$1" 2>/dev/null || true ;;
	esac
}

# recipe FUNCTION prints a hash of what makes an image: that function and import.
recipe() { declare -f "$1" import | sha256sum | cut -c1-12; }

# import TARBALL REF ARCH RECIPE CHANGE... makes an image of one layer from a
# root filesystem tarball, with Dockerfile-style config changes (ENV, USER,
# ...), for architecture ARCH (linux; empty: this machine's).
import() {
	local tarball=$1 ref=$2 arch=$3 recipe=$4; shift 4
	local changes=() c
	for c in "$@" "LABEL $recipe_label=$recipe"; do changes+=(--change "$c"); done
	case $engine in
	buildah)
		local ctr
		ctr=$(buildah from scratch)
		buildah add --quiet "$ctr" "$tarball" /
		[ -z "$arch" ] || buildah config --os linux --arch "$arch" "$ctr"
		for c in "$@" "LABEL $recipe_label=$recipe"; do
			case $c in
			"ENV "*) buildah config --env "${c#ENV }" "$ctr" ;;
			"USER "*) buildah config --user "${c#USER }" "$ctr" ;;
			"WORKDIR "*) buildah config --workingdir "${c#WORKDIR }" "$ctr" ;;
			"LABEL "*) buildah config --label "${c#LABEL }" "$ctr" ;;
			*) die "no buildah equivalent of $c" ;;
			esac
		done
		buildah commit --quiet --rm "$ctr" "$ref" >/dev/null
		;;
	podman) podman import --quiet ${arch:+--os linux --arch "$arch"} "${changes[@]}" "$tarball" "$ref" >/dev/null ;;
	*) "$engine" import ${arch:+--platform "linux/$arch"} "${changes[@]}" "$tarball" "$ref" >/dev/null ;;
	esac
}

make_builder() {
	local version
	version=$(sed -n 's/.*golang:\([0-9][^-]*\)-'"$suite"'$/\1/p' <<<"$go_image")
	[ -n "$version" ] || die "GO_IMAGE $go_image: want a tag golang:<version>-$suite"
	local goroot have
	goroot=$("${GO:-go}" env GOROOT) have=$("${GO:-go}" env GOVERSION)
	[ "$have" = "go$version" ] || die "the local builder copies this machine's Go toolchain, which is $have, but the Dockerfile pins golang:$version-$suite: install Go $version (or update GO_IMAGE in the Dockerfile)"
	local recipe tarball
	recipe=$(recipe make_builder)
	tarball=$cache/golang-$version-$suite-$recipe.tar
	if [ ! -s "$tarball" ]; then
		command -v debootstrap >/dev/null || die "debootstrap is missing: run make image-deps (or apt-get install debootstrap)"
		root=$(mktemp -d "${TMPDIR:-/tmp}/gm-builder.XXXXXX")
		trap '$sudo rm -rf "$root"' EXIT
		say "debootstrap $suite (minbase) from $mirror (about a minute)"
		$sudo debootstrap --variant=minbase --include=ca-certificates "$suite" "$root/rootfs" "$mirror" >"$root/debootstrap.log" 2>&1 ||
			die "debootstrap failed; its log:"$'\n'"$(tail -n 20 "$root/debootstrap.log")"
		# What the golang image adds on top of Debian: the toolchain at
		# /usr/local/go and a world-writable GOPATH; no apt lists or .debs.
		$sudo rm -rf "$root"/rootfs/var/cache/apt/archives/*.deb "$root"/rootfs/var/lib/apt/lists/*
		$sudo mkdir -p "$root/rootfs/usr/local" "$root/rootfs/go/src" "$root/rootfs/go/bin"
		$sudo chmod -R 1777 "$root/rootfs/go"
		$sudo cp -a "$goroot" "$root/rootfs/usr/local/go"
		mkdir -p "$cache"
		$sudo tar --numeric-owner -C "$root/rootfs" -cf "$tarball.tmp" .
		$sudo chown "$(id -u):$(id -g)" "$tarball.tmp"
		rm -f "$cache/golang-$version-$suite"-*.tar # other recipes'
		mv "$tarball.tmp" "$tarball"
		$sudo rm -rf "$root"
		trap - EXIT
	fi
	say "importing $go_image"
	import "$tarball" "$go_image" "" "$recipe" \
		"ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		"ENV GOLANG_VERSION=$version" "ENV GOTOOLCHAIN=local" "ENV GOPATH=/go" "WORKDIR /go"
}

# make_runtime ARCH makes $base_image-ARCH.
make_runtime() {
	local arch=$1 ref=$base_image-$1
	local certs=/etc/ssl/certs/ca-certificates.crt
	[ -s "$certs" ] || die "$certs is missing: install ca-certificates"
	stage=$(mktemp -d "${TMPDIR:-/tmp}/gm-static.XXXXXX")
	trap 'rm -rf "$stage" "$stage.tar"' EXIT
	mkdir -p "$stage"/{etc/ssl/certs,tmp,root,home/nonroot,usr/share}
	# distroless's users and groups.
	cat >"$stage/etc/passwd" <<-'PASSWD'
	root:x:0:0:root:/root:/sbin/nologin
	nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
	nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
	PASSWD
	cat >"$stage/etc/group" <<-'GROUP'
	root:x:0:
	nobody:x:65534:
	tty:x:5:
	staff:x:50:
	nonroot:x:65532:
	GROUP
	echo "hosts: files dns" >"$stage/etc/nsswitch.conf"
	echo "stand-in for gcr.io/distroless/static-debian12:nonroot, linux/$arch, made by globalmirror's build/images/bases.sh" >"$stage/etc/globalmirror-base"
	cp "$certs" "$stage/etc/ssl/certs/ca-certificates.crt"
	[ ! -f /etc/services ] || cp /etc/services "$stage/etc/services"
	[ ! -d /usr/share/zoneinfo ] || cp -a /usr/share/zoneinfo "$stage/usr/share/zoneinfo"
	chmod 1777 "$stage/tmp"
	chmod 700 "$stage/root" "$stage/home/nonroot"
	chmod -R u+rwX,go+rX,go-w "$stage/etc" "$stage/usr"
	# Owners are set in the archive, so this needs no root: everything is
	# root's but /home/nonroot.
	local tarball=$stage.tar
	tar --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -C "$stage" --exclude=./home/nonroot -cf "$tarball" .
	tar --numeric-owner --owner=65532 --group=65532 --mtime=@0 -C "$stage" -rf "$tarball" ./home/nonroot
	say "importing $ref"
	import "$tarball" "$ref" "$arch" "$(recipe make_runtime)" \
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		"ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
		"USER 65532" "WORKDIR /home/nonroot"
	rm -rf "$stage" "$tarball"
	trap - EXIT
}

if [ "$(recipe_of "$go_image")" = "$(recipe make_builder)" ]; then
	say "$go_image is up to date"
else
	mirror=$(debian_mirror) || exit 1 # make_builder debootstraps from it
	make_builder
fi
for arch in "${arches[@]}"; do
	if [ "$(recipe_of "$base_image-$arch")" = "$(recipe make_runtime)" ]; then
		say "$base_image-$arch is up to date"
	else
		make_runtime "$arch"
	fi
done
