#!/usr/bin/env bash
# Builds Ory Hydra v2.3.0, the peer bench runs beside the real binary (bench -hydra bin/hydra,
# hack/bench/hydra.go), into bin/hydra: from its module source, with its SQLite driver (the
# `sqlite` build tag, CGO), so that it stores its clients and tokens in a SQLite file as
# Latchkey does in those runs. Nothing in make test or CI needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
version=v2.3.0
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=1
src=$(go mod download -json "github.com/ory/hydra/v2@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/." "$work"
chmod -R u+w "$work"
# The module's zip leaves out the nested client module its go.mod replaces with a directory;
# the version it requires comes from the module proxy instead.
sed -i '/^replace github.com\/ory\/hydra-client-go/d' "$work/go.mod"
mkdir -p bin
(cd "$work" && go build -tags sqlite,sqlite_omit_load_extension -o "$OLDPWD/bin/hydra" .)
echo "bin/hydra: Ory Hydra $version"
