package extauthz_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/extauthz"
)

// authority is a CA that issues the listener's and the gateways' certificates.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64

func newAuthority(t *testing.T, name string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &authority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key (PEM) for a server on 127.0.0.1 or a client.
func (a *authority) issue(t *testing.T, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}

func (a *authority) clientCert(t *testing.T, name string) tls.Certificate {
	t.Helper()
	c, k := a.issue(t, name, false)
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	// Written aside and renamed, as a mounted Secret's files change.
	if err := os.WriteFile(path+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// serveTLS starts the service with mutual TLS from files in dir.
func serveTLS(t *testing.T, s *stack.Stack, files *extauthz.TLSFiles) string {
	t.Helper()
	cfg, err := files.Config()
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, s, cfg)
}

// dial is a gateway calling Check with creds.
func dial(t *testing.T, addr string, creds credentials.TransportCredentials) authv3.AuthorizationClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

func gatewayTLS(serverCA *authority, certs ...tls.Certificate) credentials.TransportCredentials {
	pool := x509.NewCertPool()
	pool.AddCert(serverCA.cert)
	return credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12})
}

// TestExtAuthzMutualTLS: on a TLS listener only a gateway with a client certificate of the
// configured CA gets an answer; one without a certificate, with one of another CA, or speaking
// plaintext is refused in the handshake, before Check. Renewed files are served without a
// restart, and then the old CA's client certificates are refused.
func TestExtAuthzMutualTLS(t *testing.T) {
	s := stack.New(t, stack.Options{DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")})
	s.Connector.Proxy = &config.Proxy{BaseURL: s.GitHubURL, Rules: []config.ProxyRule{{Methods: []string{"GET"}, PathPrefix: "/user"}}}
	s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := s.AccessToken(stack.AliceEmail, stack.Agent)

	serverCA, gatewayCA, otherCA := newAuthority(t, "server CA"), newAuthority(t, "gateway CA"), newAuthority(t, "other CA")
	dir := t.TempDir()
	files := &extauthz.TLSFiles{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), ClientCAFile: filepath.Join(dir, "ca.crt")}
	clock := &testClock{now: time.Now()}
	files.Now = clock.Now
	crt, key := serverCA.issue(t, "latchkey", true)
	write(t, files.CertFile, crt)
	write(t, files.KeyFile, key)
	write(t, files.ClientCAFile, gatewayCA.pem)
	addr := serveTLS(t, s, files)
	ctx := context.Background()
	req := check("GET", "/user", alice, nil)

	allowed := func(t *testing.T, c authv3.AuthorizationClient) {
		t.Helper()
		resp, err := c.Check(ctx, req)
		if err != nil || codes.Code(resp.GetStatus().GetCode()) != codes.OK {
			t.Fatalf("the gateway's check: %v, %v", err, resp.GetStatus())
		}
	}
	refused := func(t *testing.T, c authv3.AuthorizationClient) {
		t.Helper()
		resp, err := c.Check(ctx, req)
		if err == nil {
			t.Fatalf("answered without a client certificate of the gateway CA: %v", resp)
		}
		if resp.GetOkResponse() != nil {
			t.Fatal("an OK answer reached a caller the listener should refuse")
		}
	}
	gateway := gatewayCA.clientCert(t, "gateway")
	t.Run("the gateway's certificate", func(t *testing.T) { allowed(t, dial(t, addr, gatewayTLS(serverCA, gateway))) })
	t.Run("no client certificate", func(t *testing.T) { refused(t, dial(t, addr, gatewayTLS(serverCA))) })
	t.Run("a certificate of another CA", func(t *testing.T) {
		refused(t, dial(t, addr, gatewayTLS(serverCA, otherCA.clientCert(t, "gateway"))))
	})
	t.Run("plaintext", func(t *testing.T) { refused(t, dial(t, addr, insecure.NewCredentials())) })

	t.Run("renewed files are served", func(t *testing.T) {
		newServerCA, newGatewayCA := newAuthority(t, "server CA 2"), newAuthority(t, "gateway CA 2")
		crt, key := newServerCA.issue(t, "latchkey", true)
		write(t, files.CertFile, crt)
		write(t, files.KeyFile, key)
		write(t, files.ClientCAFile, newGatewayCA.pem)
		clock.add(extauthz.ReloadCheck)
		allowed(t, dial(t, addr, gatewayTLS(newServerCA, newGatewayCA.clientCert(t, "gateway"))))
		refused(t, dial(t, addr, gatewayTLS(newServerCA, gateway)))

		// A half-written rotation keeps what was served.
		write(t, files.KeyFile, []byte("not a key"))
		clock.add(extauthz.ReloadCheck)
		allowed(t, dial(t, addr, gatewayTLS(newServerCA, newGatewayCA.clientCert(t, "gateway"))))
	})
}

// TestExtAuthzTLSFilesRequired: a listener is not configured from a missing or empty client
// CA: a TLS listener that verifies no client would answer anyone.
func TestExtAuthzTLSFilesRequired(t *testing.T) {
	ca := newAuthority(t, "server CA")
	dir := t.TempDir()
	crt, key := ca.issue(t, "latchkey", true)
	write(t, filepath.Join(dir, "tls.crt"), crt)
	write(t, filepath.Join(dir, "tls.key"), key)
	write(t, filepath.Join(dir, "empty.crt"), []byte("\n"))
	for name, f := range map[string]*extauthz.TLSFiles{
		"no client CA":    {CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")},
		"empty client CA": {CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), ClientCAFile: filepath.Join(dir, "empty.crt")},
		"missing key":     {CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "none.key"), ClientCAFile: filepath.Join(dir, "tls.crt")},
	} {
		if _, err := f.Config(); err == nil {
			t.Errorf("%s: configured", name)
		}
	}
}

// TestExtAuthzAnswersCarryNoSecrets: the upstream token appears in an answer only as the value
// of the header Envoy is told to set; a denied answer carries neither it nor the agent's token;
// no answer echoes the request body Envoy may forward; and nothing is logged with either token.
func TestExtAuthzAnswersCarryNoSecrets(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintln(&logs, prefix, args)
	}, funcr.Options{Verbosity: 10})
	s := stack.New(t, stack.Options{DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db"), Logger: logger})
	s.Connector.Proxy = &config.Proxy{BaseURL: s.GitHubURL, Rules: []config.ProxyRule{{Methods: []string{"GET"}, PathPrefix: "/user"}}}
	s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := s.AccessToken(stack.AliceEmail, stack.Agent)
	c := client(t, s)
	ctx := context.Background()
	const body = "body-marker-must-not-come-back"
	withBody := func(r *authv3.CheckRequest) *authv3.CheckRequest {
		r.GetAttributes().GetRequest().GetHttp().Body = body
		return r
	}

	resp, err := c.Check(ctx, withBody(check("GET", "/user", alice, nil)))
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("allowed call: %v %v", err, resp.GetStatus())
	}
	upstream := strings.TrimPrefix(resp.GetOkResponse().GetHeaders()[0].GetHeader().GetValue(), "Bearer ")
	if !strings.HasPrefix(upstream, "gho_") {
		t.Fatalf("no upstream token in the header: %v", resp.GetOkResponse().GetHeaders())
	}
	all := prototext.Format(resp)
	if n := strings.Count(all, upstream); n != 1 {
		t.Errorf("the upstream token appears %d times in the OK answer, want once (the header): %s", n, all)
	}
	if strings.Contains(all, body) || strings.Contains(all, alice) {
		t.Errorf("the OK answer echoes the request body or the agent's token: %s", all)
	}

	for name, req := range map[string]*authv3.CheckRequest{
		"call not allowed": check("DELETE", "/user/repos", alice, nil),
		"path escape":      check("GET", "/user/%2e%2e/orgs", alice, nil),
		"bad token":        check("GET", "/user", alice+"x", nil),
	} {
		resp, err := c.Check(ctx, withBody(req))
		if err != nil || resp.GetDeniedResponse() == nil {
			t.Fatalf("%s: %v %v", name, err, resp)
		}
		all := prototext.Format(resp)
		for what, secret := range map[string]string{"upstream token": upstream, "agent's token": alice, "request body": body} {
			if strings.Contains(all, secret) {
				t.Errorf("%s: the denied answer carries the %s: %s", name, what, all)
			}
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), upstream) || strings.Contains(logs.String(), alice) {
		t.Error("a token was logged")
	}
}
