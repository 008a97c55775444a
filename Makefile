# Latchkey — the two commands a newcomer needs are `make run` and `make test` (see README.md).

GO ?= go
export GOTOOLCHAIN := local
# Every module builds on its own, as the Dockerfile and `go get` build it; go.work is for editors
# and commands typed by hand.
export GOWORK := off
CONTROLLER_GEN := $(GO) tool controller-gen
# Generous: the controller tests start a real kube-apiserver and the end-to-end tests drive
# real browsers, on machines with two cores.
TEST_TIMEOUT ?= 45m
TESTFLAGS ?=
PKGS ?= ./...
K8S_VERSION ?= 1.37.2

# Every target that starts a control plane asks hack/control-plane.sh for it: the first time it
# builds etcd, kube-apiserver and kubectl from the module proxy (about 10 minutes on 2 cores),
# afterwards it only links bin/k8s to the cache in ~/.cache/latchkey.
CONTROL_PLANE = assets=$$(hack/control-plane.sh) && export KUBEBUILDER_ASSETS=$$assets

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# BUILD_VERSION is what `latchkey --version` prints for a local build: the commit (git describe),
# or "dev" outside a git checkout. `make image` and releases stamp VERSION instead.
BUILD_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build
build: ## Build bin/latchkey and the kubectl plugin bin/kubectl-latchkey (static, pure Go), stamped with the commit (`bin/latchkey --version`).
	@test -x bin/latchkey || echo "make: building bin/latchkey (the first build compiles every library: a few minutes; later builds take seconds)"
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(BUILD_VERSION)" -o bin/latchkey ./cmd/latchkey
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/kubectl-latchkey ./cmd/kubectl-latchkey

# REGISTRY is where releases are published, and the one place it is named: the image as
# $(REGISTRY)/latchkey:{appVersion}, the chart as oci://$(REGISTRY)/charts/latchkey. The chart's
# default image.repository is the same (the release test checks), and the release workflow asks
# this Makefile rather than naming it again.
REGISTRY ?= ghcr.io/latchkey-dev
# `make image` names the image the way the chart pulls it by default (values.yaml
# image.repository, tagged with Chart.yaml's appVersion), so `kind load image-archive` and then
# `helm install` need no --set image.*; set IMAGE and VERSION for another registry.
IMAGE ?= $(REGISTRY)/latchkey
VERSION ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"* *$$/\1/p' charts/latchkey/Chart.yaml)
PLATFORMS ?= linux/amd64,linux/arm64

# The builder comes from hack/tools, like Helm, so go-containerregistry stays out of go.mod.
.PHONY: image
image: ## Build bin/latchkey-image.tar, an OCI image archive (amd64 + arm64), without a Docker engine.
	cd hack/tools && $(GO) build -o ../../bin/latchkey-image-builder ./image
	bin/latchkey-image-builder -o bin/latchkey-image.tar -ref $(IMAGE):$(VERSION) -version $(VERSION) \
	  -licenses Apache-2.0 -platforms $(PLATFORMS) -go $(GO)

# Not part of `make test`, which runs the root and mcp modules only; about 25 s once both platforms'
# builds are cached, a few minutes the first time (the arm64 compile).
.PHONY: test-image
# Its first run compiles the server for two architectures from a cold cache (over ten minutes on
# 2 cores with the gRPC and Envoy packages), so it gets more than go test's default ten minutes.
test-image: ## Build the image twice and check it: user, entrypoint, files, same digest, the binary runs.
	cd hack/tools && $(GO) test -count=1 -timeout 40m ./image

# A release, as .github/workflows/release.yml makes it: the image archive, the packaged chart
# and an SPDX SBOM of the image's binary, in $(RELEASE_DIR), then a test that they agree with
# each other, with values.yaml and with the workflow. Nothing is pushed. About a minute once the
# image's builds are cached (a few minutes the first time), so it is its own CI step, not part
# of `make test`.
RELEASE_DIR ?= bin/release
CHART_VERSION := $(shell sed -n 's/^version: *"*\([^"]*\)"* *$$/\1/p' charts/latchkey/Chart.yaml)

.PHONY: release-dry-run
release-dry-run: ## Build what a release publishes (image archive, chart .tgz, SBOM) into bin/release without pushing, and check it.
	$(MAKE) --no-print-directory image
	cd hack/tools && $(GO) build -o ../../bin/latchkey-release ./release && $(GO) build -o ../../bin/helm helm.sh/helm/v3/cmd/helm
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	cp bin/latchkey-image.tar $(RELEASE_DIR)/latchkey-image.tar
	bin/latchkey-release chart -chart charts/latchkey -out $(RELEASE_DIR)
	bin/latchkey-release sbom -image $(RELEASE_DIR)/latchkey-image.tar -out $(RELEASE_DIR)/latchkey.spdx.json
	$(MAKE) --no-print-directory release-binaries
	cd hack/tools && LATCHKEY_RELEASE_DIR=$(abspath $(RELEASE_DIR)) $(GO) test -count=1 -timeout 40m -run TestRelease ./release

# The binaries a release publishes (docs/decisions/0068-release-binaries-and-krew.md):
# latchkey and the kubectl plugin for each platform `latchkey-release platforms` names
# (linux and darwin, amd64 and arm64), built as `make build` builds them (static, -trimpath) and
# stamped with VERSION, each in a tar.gz in $(RELEASE_DIR), with SHA256SUMS (which the workflow
# signs) and the krew manifest. The first run compiles every dependency for the two darwin
# platforms: several minutes on 2 cores; later runs only link.
RELEASE_URL ?= https://github.com/latchkey-dev/latchkey/releases/download/v$(VERSION)
RELEASE_BUILD_DIR ?= bin/release-build

.PHONY: release-binaries
release-binaries: ## Build latchkey and kubectl-latchkey for linux/darwin × amd64/arm64: archives, SHA256SUMS and the krew manifest in bin/release.
	cd hack/tools && $(GO) build -o ../../bin/latchkey-release ./release
	rm -rf $(RELEASE_BUILD_DIR)
	@for p in $$(bin/latchkey-release platforms); do os=$${p%/*}; arch=$${p#*/}; \
	  echo "make: building latchkey and kubectl-latchkey for $$p"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" \
	    -o $(RELEASE_BUILD_DIR)/$${os}_$${arch}/ ./cmd/latchkey ./cmd/kubectl-latchkey || exit 1; done
	bin/latchkey-release binaries -in $(RELEASE_BUILD_DIR) -out $(RELEASE_DIR) -version $(VERSION) -url $(RELEASE_URL)

# Run by the release workflow after release-dry-run, with registry credentials: pushes exactly
# the files the dry run made and checked, and writes their digests for signing.
.PHONY: release-push
release-push:
	bin/latchkey-release push -image $(RELEASE_DIR)/latchkey-image.tar -ref $(IMAGE):$(VERSION) > $(RELEASE_DIR)/image.digest
	bin/helm push $(RELEASE_DIR)/latchkey-$(CHART_VERSION).tgz oci://$(REGISTRY)/charts 2>&1 | tee $(RELEASE_DIR)/chart.push
	sed -n 's/^Digest: *//p' $(RELEASE_DIR)/chart.push > $(RELEASE_DIR)/chart.digest && test -s $(RELEASE_DIR)/chart.digest

# The release workflow reads the names it signs from here.
.PHONY: release-names
release-names:
	@echo "image=$(IMAGE)"
	@echo "chart=$(REGISTRY)/charts/latchkey"
	@echo "version=$(VERSION)"
	@echo "chart_version=$(CHART_VERSION)"
	@echo "release_url=$(RELEASE_URL)"

.PHONY: run
run: build ## Run Latchkey with a local control plane, SQLite under .latchkey/ and the demo project.
	$(DEV_BUILD) -o bin/latchkey-dev ./hack/dev
	@bin/latchkey-dev

# No etcd or kube-apiserver: `latchkey serve --config-dir config/samples` (docs/no-cluster.md).
# On a fresh machine the demo answers once Latchkey has compiled, not after the control plane's
# ten-minute build.
.PHONY: run-local
run-local: build-local ## Run Latchkey without a cluster: the demo project from config/samples' files, SQLite under .latchkey/local/.
	@bin/latchkey-dev -local

# The launcher is built with bin/latchkey's flags (CGO_ENABLED=0, -trimpath): with other flags
# every package it shares with latchkey (820 of them) is compiled a second time, with cgo.
DEV_BUILD = CGO_ENABLED=0 $(GO) build -trimpath

# What `make run-local` serves and nothing more: bin/latchkey and the launcher, in one `go build`
# so they share one compile of their common packages, without the kubectl plugin
# (docs/no-cluster.md, "Time to the first answer"). The latchkey_local tag leaves out what the
# demo without a cluster never uses: the Envoy external authorization server and the OTLP trace
# exporter, which link gRPC, and the launcher's control plane (decision 0084), and latchkey's
# cluster mode, which links client-go: this bin/latchkey serves `serve --config-dir` only
# (decision 0085). `make build`, `make run`, `make image` and the release never set it: they
# build every mode.
LOCAL_TAGS := latchkey_local
.PHONY: build-local
build-local:
	@test -x bin/latchkey || echo "make: building bin/latchkey and its launcher (the first build compiles every library: a few minutes; later builds take seconds)"
	@mkdir -p bin/.build-local
	$(DEV_BUILD) -tags "$(LOCAL_TAGS)" -ldflags "-X main.version=$(BUILD_VERSION)" -o bin/.build-local/ ./cmd/latchkey ./hack/dev
	mv bin/.build-local/latchkey bin/latchkey
	mv bin/.build-local/dev bin/latchkey-dev

.PHONY: control-plane
control-plane: ## Build (once) or reuse etcd, kube-apiserver and kubectl; prints their directory.
	@hack/control-plane.sh

# The MCP module (mcp/, its own go.mod) is tested first, with the versions its go.mod asks for,
# as an MCP server's author gets them after `go get`.
.PHONY: test
test: ## Run every test (real kube-apiserver + etcd; PostgreSQL when LATCHKEY_TEST_POSTGRES_DSN is set).
	cd mcp && $(GO) test -count=1 $(TESTFLAGS) ./...
	@$(CONTROL_PLANE) && echo "make: KUBEBUILDER_ASSETS=$$KUBEBUILDER_ASSETS" && \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)

# The fast tier, for the edit-test loop: -short makes every test that needs a control plane,
# Chromium, PostgreSQL or Node.js skip itself (internal/testenv), and nothing is started. It is
# not a substitute for `make test`, which CI runs.
.PHONY: test-short
test-short: ## Run the fast tier: unit, handler and SQLite store tests (-short; no control plane, browser, PostgreSQL or Node.js).
	cd mcp && $(GO) test -short -count=1 $(TESTFLAGS) ./...
	$(GO) test -short -count=1 -timeout 10m $(TESTFLAGS) $(PKGS)

.PHONY: bench
bench: ## Run the benchmarks.
	@$(CONTROL_PLANE) && $(GO) test -run '^$$' -bench . -benchmem -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: generate
generate: ## Generate deepcopy methods for the API types.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: ## Generate CRDs and RBAC into config/, and copy them into the chart.
	$(CONTROLLER_GEN) rbac:roleName=latchkey-manager crd \
	  paths="{./api/...,./controllers/...}" \
	  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	hack/chart-sync.sh

# Compares the generated files with what `generate manifests` produces now, rather than asking
# git, so it also works in a working tree with uncommitted changes. In a fresh clone (CI) it fails
# exactly when the committed files are stale.
.PHONY: verify-generated
verify-generated: ## Fail if `make generate manifests` would change anything.
	@before=$$(mktemp -d) && trap 'rm -rf "$$before"' EXIT && \
	  for d in api config charts; do [ ! -d $$d ] || cp -a $$d "$$before/"; done && \
	  $(MAKE) --no-print-directory generate manifests && \
	  changed=0 && for d in api config charts; do \
	    [ ! -d $$d ] || diff -ruN "$$before/$$d" $$d || changed=1; done && \
	  if [ $$changed = 1 ]; then \
	    echo "make: generated files were stale (diff above); they are now regenerated — review and commit them" >&2; exit 1; \
	  fi && echo "make: generated files are up to date"

# golangci-lint comes from hack/tools, pinned in its go.mod like Helm, so its many dependencies
# stay out of go.mod. The first `make lint` builds it (a few minutes on 2 cores) and its first
# run analyses every package (a few more); later runs reuse bin/golangci-lint and the analysis
# cache. Each module (the root, and mcp/ once it has a go.mod of its own) is linted from its own
# directory with the one .golangci.yml; GOWORK=off so a go.work does not merge them.
GOLANGCI_LINT := bin/golangci-lint
LINT_MODULES ?= . $(patsubst %/go.mod,%,$(wildcard mcp/go.mod))

$(GOLANGCI_LINT): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && GOWORK=off $(GO) build -o ../../$(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint (.golangci.yml: go vet, staticcheck, gosec, errcheck, …, gofmt/goimports) on every module; go vet on the latchkey_local build; gofmt on every Go file.
	@for m in $(LINT_MODULES); do echo "golangci-lint run in $$m"; \
	  (cd $$m && GOWORK=off $(CURDIR)/$(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done
	@echo "go vet -tags latchkey_local (the build make run-local makes, with its tests)"
	@GOWORK=off $(GO) vet -tags latchkey_local ./...
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')) && \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: lint-fix
lint-fix: $(GOLANGCI_LINT) ## Apply the formatters (gofmt, goimports with latchkey.dev imports last) to every module.
	@for m in $(LINT_MODULES); do \
	  (cd $$m && GOWORK=off $(CURDIR)/$(GOLANGCI_LINT) fmt --config $(CURDIR)/.golangci.yml ./...) || exit 1; done

# Helm comes from hack/tools, a module of its own, so its dependencies stay out of go.mod.
# test/install (run by `make test`) renders the same value sets and applies them with
# server-side dry-run to a real API server (the K8S_VERSION one).
#
# kubeconform checks every value set in charts/latchkey/ci against the schemas of each
# Kubernetes version the chart supports (Chart.yaml kubeVersion: the newest patch of each minor).
# hack/tools/kubeschema writes those schemas from the OpenAPI document in the k8s.io/kubernetes
# module of each version, and the HTTPRoute's from the Gateway API module: the first run
# downloads the modules (~25 MB each, about a minute), later runs reuse $(KUBE_SCHEMAS).
# ServiceMonitor is left to test/install. docs/decisions/0035.
KUBE_VERSIONS ?= 1.30.14 1.31.14 1.32.13 1.33.13 1.34.4 1.35.4 1.36.3 1.37.2
GATEWAY_API_VERSION ?= v1.6.3
KUBE_SCHEMAS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/latchkey/kubeschema
KUBECONFORM = bin/kubeconform -strict -skip ServiceMonitor \
  -schema-location '$(KUBE_SCHEMAS)/{{.NormalizedKubernetesVersion}}-standalone{{.StrictSuffix}}/{{.ResourceKind}}{{.KindSuffix}}.json' \
  -schema-location '$(KUBE_SCHEMAS)/crds/{{.ResourceKind}}{{.KindSuffix}}.json'
CHART_VALUES = $(wildcard charts/latchkey/ci/*-values.yaml)

.PHONY: chart-tools
chart-tools:
	cd hack/tools && $(GO) build -o ../../bin/helm helm.sh/helm/v3/cmd/helm && \
	  $(GO) build -o ../../bin/kubeconform github.com/yannh/kubeconform/cmd/kubeconform && \
	  $(GO) build -o ../../bin/kubeschema ./kubeschema && $(GO) build -o ../../bin/chart-docs ./chartdocs

.PHONY: chart-lint
chart-lint: chart-tools ## helm lint; kubeconform on every value set for each supported Kubernetes version; schema and README checks; render the kustomizations.
	@for f in $(CHART_VALUES); do bin/helm lint --strict --quiet charts/latchkey -f $$f >/dev/null || \
	  { bin/helm lint --strict charts/latchkey -f $$f; exit 1; }; done; echo "make: helm lint passes with $(notdir $(CHART_VALUES))"
	bin/kubeschema -out $(KUBE_SCHEMAS) -kubernetes "$(KUBE_VERSIONS)" \
	  -crd sigs.k8s.io/gateway-api@$(GATEWAY_API_VERSION)/config/crd/standard/gateway.networking.k8s.io_httproutes.yaml
	@for v in $(KUBE_VERSIONS); do for f in $(CHART_VALUES); do \
	  bin/helm template latchkey charts/latchkey --kube-version $$v --include-crds -f $$f | \
	    $(KUBECONFORM) -kubernetes-version $$v >/dev/null || { \
	    echo "make: charts/latchkey with $$f does not validate on Kubernetes $$v:" >&2; \
	    bin/helm template latchkey charts/latchkey --kube-version $$v --include-crds -f $$f | $(KUBECONFORM) -kubernetes-version $$v >&2; exit 1; }; \
	  done; echo "make: kubeconform: every value set validates on Kubernetes $$v"; done
	@bin/helm template latchkey charts/latchkey --kube-version $(K8S_VERSION) --set publicURL=https://latchkey.example.com \
	  --show-only templates/deployment.yaml | sed 's/^  revisionHistoryLimit:/  revisionHistoryLimt:/' | \
	  $(KUBECONFORM) -kubernetes-version $(K8S_VERSION) 2>&1 | grep -q "additional properties 'revisionHistoryLimt' not allowed" || { \
	  echo "make: kubeconform did not refuse a misspelled field (revisionHistoryLimt)" >&2; exit 1; }
	@if bin/helm template latchkey charts/latchkey --kube-version $(K8S_VERSION) \
	  --set publicURL=https://latchkey.example.com --set replicaCount=3 >/dev/null 2>&1; then \
	  echo "make: the chart rendered three replicas on SQLite; it must refuse" >&2; exit 1; fi
	@bin/helm template latchkey charts/latchkey --kube-version $(K8S_VERSION) \
	  --set publicURL=https://latchkey.example.com --set ingress.enabeld=true 2>&1 >/dev/null | \
	  grep -q "additional properties 'enabeld' not allowed" || { \
	  echo "make: values.schema.json did not refuse a misspelled value (ingress.enabeld)" >&2; exit 1; }
	@bin/chart-docs -check charts/latchkey
	@$(CONTROL_PLANE) && for d in default postgres prometheus; do \
	  $$KUBEBUILDER_ASSETS/kubectl kustomize config/$$d >/dev/null || exit 1; done
	@echo "make: chart and kustomizations render"

.PHONY: chart-docs
chart-docs: chart-tools ## Regenerate charts/latchkey/README.md from values.yaml and its comments.
	bin/chart-docs charts/latchkey

.PHONY: clean
clean: ## Remove build output (keeps .latchkey/, the demo's database and keys).
	rm -rf bin tmp cover.out cover.html *.coverprofile
