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

.PHONY: build
build: ## Build bin/latchkey and the kubectl plugin bin/kubectl-latchkey (static, pure Go).
	@test -x bin/latchkey || echo "make: building bin/latchkey (the first build compiles the Kubernetes libraries: a few minutes; later builds take seconds)"
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/latchkey ./cmd/latchkey
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/kubectl-latchkey ./cmd/kubectl-latchkey

# `make image` names the image the way the chart pulls it by default (values.yaml
# image.repository, tagged with Chart.yaml's appVersion), so `kind load image-archive` and then
# `helm install` need no --set image.*; set IMAGE and VERSION for a registry.
IMAGE ?= latchkey
VERSION ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"* *$$/\1/p' charts/latchkey/Chart.yaml)
PLATFORMS ?= linux/amd64,linux/arm64

# The builder comes from hack/tools, like Helm, so go-containerregistry stays out of go.mod.
.PHONY: image
image: ## Build bin/latchkey-image.tar, an OCI image archive (amd64 + arm64), without a Docker engine.
	cd hack/tools && $(GO) build -o ../../bin/latchkey-image-builder ./image
	bin/latchkey-image-builder -o bin/latchkey-image.tar -ref $(IMAGE):$(VERSION) -version $(VERSION) \
	  -platforms $(PLATFORMS) -go $(GO)

# Not part of `make test`, which runs the root and mcp modules only; about 25 s once both platforms'
# builds are cached, a few minutes the first time (the arm64 compile).
.PHONY: test-image
test-image: ## Build the image twice and check it: user, entrypoint, files, same digest, the binary runs.
	cd hack/tools && $(GO) test -count=1 ./image

.PHONY: run
run: build ## Run Latchkey with a local control plane, SQLite under .latchkey/ and the demo project.
	$(GO) build -o bin/latchkey-dev ./hack/dev
	@bin/latchkey-dev

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
lint: $(GOLANGCI_LINT) ## golangci-lint (.golangci.yml: go vet, staticcheck, gosec, errcheck, …, gofmt/goimports) on every module; gofmt on every Go file.
	@for m in $(LINT_MODULES); do echo "golangci-lint run in $$m"; \
	  (cd $$m && GOWORK=off $(CURDIR)/$(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')) && \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: lint-fix
lint-fix: $(GOLANGCI_LINT) ## Apply the formatters (gofmt, goimports with latchkey.dev imports last) to every module.
	@for m in $(LINT_MODULES); do \
	  (cd $$m && GOWORK=off $(CURDIR)/$(GOLANGCI_LINT) fmt --config $(CURDIR)/.golangci.yml ./...) || exit 1; done

# Helm comes from hack/tools, a module of its own, so its dependencies stay out of go.mod.
# test/install (run by `make test`) renders the same value sets and applies them with
# server-side dry-run to a real API server.
CHART_PG = --set publicURL=https://latchkey.example.com --set replicaCount=3 \
  --set database.existingSecret=latchkey-db --set keys.existingSecret=latchkey-keys \
  --set ingress.enabled=true --set metrics.serviceMonitor.enabled=true \
  --set networkPolicy.egress.enabled=true --set rbac.aggregateToDefaultRoles=true

.PHONY: chart-lint
chart-lint: ## helm lint and render the chart with its main value sets, check its schema refuses a typo; render the kustomizations.
	cd hack/tools && $(GO) build -o ../../bin/helm helm.sh/helm/v3/cmd/helm
	bin/helm lint --strict charts/latchkey --set publicURL=https://latchkey.example.com
	bin/helm lint --strict charts/latchkey $(CHART_PG)
	bin/helm template latchkey charts/latchkey --kube-version $(K8S_VERSION) --include-crds \
	  --set publicURL=https://latchkey.example.com >/dev/null
	bin/helm template latchkey charts/latchkey --kube-version $(K8S_VERSION) $(CHART_PG) >/dev/null
	bin/helm template latchkey charts/latchkey --kube-version $(K8S_VERSION) \
	  --set publicURL=https://latchkey.example.com --set persistence.enabled=true >/dev/null
	@if bin/helm template latchkey charts/latchkey --kube-version $(K8S_VERSION) \
	  --set publicURL=https://latchkey.example.com --set replicaCount=3 >/dev/null 2>&1; then \
	  echo "make: the chart rendered three replicas on SQLite; it must refuse" >&2; exit 1; fi
	@bin/helm template latchkey charts/latchkey --kube-version $(K8S_VERSION) \
	  --set publicURL=https://latchkey.example.com --set ingress.enabeld=true 2>&1 >/dev/null | \
	  grep -q "additional properties 'enabeld' not allowed" || { \
	  echo "make: values.schema.json did not refuse a misspelled value (ingress.enabeld)" >&2; exit 1; }
	@$(CONTROL_PLANE) && for d in default postgres prometheus; do \
	  $$KUBEBUILDER_ASSETS/kubectl kustomize config/$$d >/dev/null || exit 1; done
	@echo "make: chart and kustomizations render"

.PHONY: clean
clean: ## Remove build output (keeps .latchkey/, the demo's database and keys).
	rm -rf bin tmp cover.out cover.html *.coverprofile
