#!/usr/bin/env bash
# modfile.sh VERSION: writes kube-apiserver-VERSION.mod (and .sum) for the
# release VERSION of k8s.io/kubernetes: its staging modules replaced by their
# published versions, as the release's own go.mod replaces them by paths.
set -euo pipefail
cd "$(dirname "$0")"
v=$1; staging=v0.${v#v1.}
mod=kube-apiserver-$v.mod
gomod=$(go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
{
	printf 'module github.com/globalmirror/globalmirror/test/tools/apiserver\n\ngo 1.26.0\n\n'
	printf 'require (\n\tk8s.io/component-base %s\n\tk8s.io/kubernetes %s\n)\n\nreplace (\n' "$staging" "$v"
	sed -n '/^replace (/,/^)/p' "$gomod" | sed -n 's#^\t\(k8s.io/[^ ]*\) => ./staging/.*#\t\1 => \1 '"$staging"'#p'
	printf ')\n'
} > "$mod"
go mod tidy -modfile="$mod"
