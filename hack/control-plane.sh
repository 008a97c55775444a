#!/usr/bin/env bash
# Builds etcd and kube-apiserver (and kubectl) from Go modules served by the module proxy, because
# these machines cannot download release binaries. The result is cached outside the checkout so a
# fresh clone (CI) reuses it; bin/k8s inside the checkout links to the cache.
#
# Usage: hack/control-plane.sh            # prints the directory to use as KUBEBUILDER_ASSETS
#
# First build: etcd ~1-2 min, kube-apiserver 6-10 min on 2 cores. Later runs: instant.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.7.3}
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${LATCHKEY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/latchkey}/k8s-v${K8S_VERSION}-etcd-v${ETCD_VERSION}
link=$top/bin/k8s

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -modcacherw"
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
STAGING=v0.${K8S_VERSION#1.}

say() { printf 'control-plane: %s\n' "$*" >&2; }

mkdir -p "$cache" "$top/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Several callers may start at once (make test and make run, parallel CI steps): one builds,
# the others wait for it instead of writing the same files.
exec 9>"$cache/.lock"
if ! flock -n 9; then
  say "waiting for another build of the control plane to finish"
  flock 9
fi

# quiet runs a noisy step and shows its output only when it fails.
quiet() {
  if ! "$@" >"$work/step.log" 2>&1; then
    cat "$work/step.log" >&2
    say "failed: $*"
    return 1
  fi
}
started=$SECONDS

if [ ! -x "$cache/etcd" ]; then
  say "building etcd v$ETCD_VERSION from the module proxy (first time only, ~1-2 minutes)"
  mkdir -p "$work/etcd" && cd "$work/etcd"
  # etcd's server module has ../ replaces, so `go install` refuses it; a wrapper main builds.
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' > main.go
  printf 'module local/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > go.mod
  quiet go mod tidy
  go build -trimpath -ldflags="-s -w" -o "$cache/etcd.tmp" . && mv "$cache/etcd.tmp" "$cache/etcd"
fi

if [ ! -x "$cache/kube-apiserver" ] || [ ! -x "$cache/kubectl" ]; then
  say "building kube-apiserver and kubectl v$K8S_VERSION from the module proxy (first time only, ~6-10 minutes)"
  mkdir -p "$work/kas" && cd "$work/kas"
  KMOD=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  # k8s.io/kubernetes replaces its staging modules with ./staging paths; map each to the
  # published module at the matching v0.X.Y.
  { printf 'module local/kas\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
    awk -v v="$STAGING" '$2=="=>" && $3 ~ /^\.\/staging\// {print "\t" $1 " => " $1 " " v}' "$KMOD"
    echo ")"; } > go.mod
  quiet go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION"
  quiet go get "k8s.io/kubernetes/cmd/kubectl@v$K8S_VERSION"
  V=k8s.io/component-base/version; C=k8s.io/client-go/pkg/version
  LD="-s -w -X $V.gitVersion=v$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean"
  LD="$LD -X $C.gitVersion=v$K8S_VERSION -X $C.gitMajor=1 -X $C.gitMinor=$MINOR -X $C.gitTreeState=clean"
  if [ ! -x "$cache/kube-apiserver" ]; then
    go build -trimpath -ldflags="$LD" -o "$cache/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    mv "$cache/kube-apiserver.tmp" "$cache/kube-apiserver"
  fi
  if [ ! -x "$cache/kubectl" ]; then
    go build -trimpath -ldflags="$LD" -o "$cache/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
    mv "$cache/kubectl.tmp" "$cache/kubectl"
  fi
fi

if [ $((SECONDS - started)) -gt 5 ]; then
  say "built in $((SECONDS - started))s into $cache"
fi
ln -sfn "$cache" "$link"
echo "$link"
