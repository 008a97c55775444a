// Package extauthz is Envoy's external authorization service (ext_authz v3 over gRPC,
// envoy.service.auth.v3.Authorization/Check) for gateways that forward an agent's calls to a
// connected service themselves: Envoy, agentgateway and others that speak it. It decides each
// call through the token proxy's Gate (webhook/proxy), so a gateway and the proxy make the same
// decision, and answers OK with a header mutation that sets the person's upstream credential,
// or Denied with the proxy's problem details as status and body (docs/token-proxy.md, "Envoy
// external authorization").
//
// The call names its Project and Connector in the route's context extensions
// (ContextProject, ContextConnector), which only the gateway's administrator writes; a
// request header (HeaderProject, HeaderConnector) is read only where the route sets none, for
// gateways without context extensions.
package extauthz

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/webhook/proxy"
)

// Where a call names its Project ("namespace/name") and its Connector (token-exchange audience).
const (
	ContextProject   = "latchkey.dev/project"
	ContextConnector = "latchkey.dev/connector"
	HeaderProject    = "x-latchkey-project"
	HeaderConnector  = "x-latchkey-connector"
)

// Server answers Check.
type Server struct {
	authv3.UnimplementedAuthorizationServer

	config  *config.Holder
	gate    *proxy.Gate
	tally   *proxy.Tally
	metrics *metrics.Metrics
}

// New returns the service deciding through the proxy's gate and counting into its tally.
func New(h *config.Holder, p *proxy.Handler, m *metrics.Metrics) *Server {
	return &Server{config: h, gate: p.Gate(), tally: p.Tally(), metrics: m}
}

// Serve answers Check on ln until ctx ends, then stops gracefully. With tlsConfig (TLSFiles)
// every connection is mutual TLS; nil serves plaintext, for a sidecar on loopback.
func (s *Server) Serve(ctx context.Context, ln net.Listener, tlsConfig *tls.Config) error {
	var opts []grpc.ServerOption
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	gs := grpc.NewServer(opts...)
	authv3.RegisterAuthorizationServer(gs, s)
	stop := context.AfterFunc(ctx, gs.GracefulStop)
	defer stop()
	return gs.Serve(ln)
}

// Check decides one call.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	attrs := req.GetAttributes()
	hr := attrs.GetRequest().GetHttp()
	header := headers(hr)
	ext := attrs.GetContextExtensions()
	name := func(ctxKey, hdr string) string {
		if v := ext[ctxKey]; v != "" {
			return v
		}
		return header.Get(hdr)
	}
	snap := s.config.Load()
	var p *config.Project
	if snap != nil {
		p = snap.Project(name(ContextProject, HeaderProject))
	}
	if p == nil {
		return denied(&proxy.Problem{Code: "unknown_project", Status: http.StatusNotFound, Title: "No such project",
			Detail: "the route names no project of this Latchkey (context extension " + ContextProject + ")"}), nil
	}
	connector := name(ContextConnector, HeaderConnector)
	path, _, _ := strings.Cut(hr.GetPath(), "?")
	scheme := hr.GetScheme()
	if scheme == "" {
		scheme = "https"
	}
	pass, pr := s.gate.Decide(ctx, proxy.Call{
		Project: p, Connector: connector, Method: hr.GetMethod(), Path: path,
		HTU: scheme + "://" + hr.GetHost() + path, Header: header,
	})
	label := "other"
	if c := p.ConnectorsByAudience[connector]; c != nil {
		label = c.Key
	}
	if pr != nil {
		s.metrics.ProxyRequest(label, 0, true, 0)
		return denied(pr), nil
	}
	s.metrics.ProxyRequest(label, proxy.Gateway, false, 0)
	s.tally.Add(ctx, p.Key, pass.Subject, pass.Agent, pass.Connector.Key, proxy.Gateway, s.gate.Now())
	return allowed(pass), nil
}

// headers reads the call's headers, sent as a map, or as a header map when the gateway
// encodes raw headers.
func headers(hr *authv3.AttributeContext_HttpRequest) http.Header {
	h := http.Header{}
	for k, v := range hr.GetHeaders() {
		h.Add(k, v)
	}
	if len(h) == 0 {
		for _, kv := range hr.GetHeaderMap().GetHeaders() {
			v := kv.GetValue()
			if v == "" {
				v = string(kv.GetRawValue())
			}
			h.Add(kv.GetKey(), v)
		}
	}
	return h
}

// allowed sets the person's credential, overwriting whatever the agent sent in that header,
// and removes the agent's own credentials and cookies before the call goes on.
func allowed(pass proxy.Pass) *authv3.CheckResponse {
	remove := []string{"dpop", "cookie", "proxy-authorization", HeaderProject, HeaderConnector}
	if !strings.EqualFold(pass.HeaderName, "Authorization") {
		remove = append(remove, "authorization")
	}
	return &authv3.CheckResponse{
		Status: &status.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			Headers: []*corev3.HeaderValueOption{{
				Header:       &corev3.HeaderValue{Key: strings.ToLower(pass.HeaderName), Value: pass.HeaderValue},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			}},
			HeadersToRemove: remove,
		}},
	}
}

// denied answers the agent with the problem, as the proxy would.
func denied(pr *proxy.Problem) *authv3.CheckResponse {
	code := codes.PermissionDenied
	if pr.Status == http.StatusUnauthorized {
		code = codes.Unauthenticated
	}
	hs := []*corev3.HeaderValueOption{
		header("content-type", "application/problem+json"),
		header("cache-control", "no-store"),
	}
	if pr.Challenge != "" {
		hs = append(hs, header("www-authenticate", pr.Challenge))
	}
	return &authv3.CheckResponse{
		Status: &status.Status{Code: int32(code), Message: pr.Code},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(pr.Status)}, //nolint:gosec // G115: an HTTP status, 400 to 504
			Headers: hs,
			Body:    string(pr.Body()),
		}},
	}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
