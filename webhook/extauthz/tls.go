package extauthz

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// ReloadCheck is how often, at most, a handshake looks whether the certificate files changed.
// Checking costs three stats; a renewed certificate (cert-manager rewrites a mounted Secret's
// files in place) is served within this long, without a restart.
const ReloadCheck = 10 * time.Second

// TLSFiles is the listener's mutual TLS: its serving certificate and key, and the CA that
// signs the gateway's client certificates. A client without a certificate that CA verifies
// does not complete the handshake, so it never reaches Check. The files are read again when
// they change; a change that does not load (a half-written rotation) keeps what was served.
type TLSFiles struct {
	CertFile, KeyFile, ClientCAFile string
	Log                             logr.Logger
	// Now is the clock of the reload check; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	checked time.Time
	stamp   string
	cfg     *tls.Config
}

// Config loads the files and returns the server TLS configuration, which reloads them on a
// later handshake once they change. It fails when they do not load now: the server does not
// start with a listener nobody could authenticate to.
func (f *TLSFiles) Config() (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" || f.ClientCAFile == "" {
		return nil, errors.New("a TLS listener needs a certificate, its key and the CA of the clients' certificates")
	}
	if f.Now == nil {
		f.Now = time.Now
	}
	if f.Log.GetSink() == nil {
		f.Log = logr.Discard()
	}
	cfg, stamp, err := f.load()
	if err != nil {
		return nil, err
	}
	f.cfg, f.stamp, f.checked = cfg, stamp, f.Now()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The first handshake's own settings come from GetConfigForClient; these are what
		// the listener says it requires.
		ClientAuth:         tls.RequireAndVerifyClientCert,
		NextProtos:         []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.current(), nil },
	}, nil
}

// current is the configuration to serve, reloaded first when ReloadCheck has passed and the
// files changed.
func (f *TLSFiles) current() *tls.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.Now()
	if now.Sub(f.checked) < ReloadCheck {
		return f.cfg
	}
	f.checked = now
	stamp, err := f.fileStamp()
	if err != nil || stamp == f.stamp {
		return f.cfg
	}
	cfg, stamp, err := f.load()
	if err != nil {
		f.Log.Error(err, "the ext_authz listener's TLS files changed but do not load; serving the previous certificate")
		return f.cfg
	}
	f.cfg, f.stamp = cfg, stamp
	f.Log.Info("reloaded the ext_authz listener's TLS files")
	return f.cfg
}

// fileStamp names the files' current versions by size and modification time.
func (f *TLSFiles) fileStamp() (string, error) {
	var s string
	for _, p := range []string{f.CertFile, f.KeyFile, f.ClientCAFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

func (f *TLSFiles) load() (*tls.Config, string, error) {
	stamp, err := f.fileStamp()
	if err != nil {
		return nil, "", err
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, "", fmt.Errorf("ext_authz serving certificate: %w", err)
	}
	pem, err := os.ReadFile(f.ClientCAFile)
	if err != nil {
		return nil, "", fmt.Errorf("ext_authz client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, "", fmt.Errorf("ext_authz client CA %s holds no PEM certificate", f.ClientCAFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		NextProtos:   []string{"h2"},
	}, stamp, nil
}
