# syntax=docker/dockerfile:1
# Latchkey's image for those with a Docker engine (BuildKit):
#   docker build -t latchkey:0.1.0 --build-arg VERSION=0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/latchkey:0.1.0 --build-arg VERSION=0.1.0 --push .
# `make image` builds the equivalent image without an engine (hack/tools/image), and that is the
# one `make test-image` checks; this file is kept minimal because nothing here can run it.

# Compiles on the build machine's platform for the target's: a pure-Go binary cross-compiles,
# so a multi-platform build needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# go.mod replaces the MCP module (latchkey.dev/latchkey/mcp) with ./mcp; cmd/latchkey imports
# none of it, but the module graph reads its go.mod.
COPY go.mod go.sum ./
COPY mcp/go.mod ./mcp/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/latchkey ./cmd/latchkey

# CA certificates (upstream OAuth services, OIDC issuers, event sinks are HTTPS), /etc/passwd
# with nonroot 65532, a writable /tmp; nothing else, not even a shell.
FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="latchkey" \
      org.opencontainers.image.description="OAuth 2.1 authorization server for AI agents, run as a Kubernetes operator" \
      org.opencontainers.image.url="https://latchkey.dev" \
      org.opencontainers.image.source="https://latchkey.dev/latchkey" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/latchkey /latchkey
# The chart and config/manager run it as 65532 with runAsNonRoot.
USER 65532:65532
ENTRYPOINT ["/latchkey"]
