package netguard

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"time"
)

// ErrRedirect is returned (wrapped) when a server answers a Client with a redirect: the address
// checked and named is the one fetched, never another it points to.
var ErrRedirect = errors.New("redirect refused")

// ErrTooLarge is returned by ReadAtMost for a body longer than its limit.
var ErrTooLarge = errors.New("response body larger than the limit")

// Client is an HTTP client for fetching a document at a URL someone else chose (a client's
// metadata document or key set): it dials only what al permits, never through a proxy, follows
// no redirect, trusts roots (the system's when nil), and gives each exchange timeout. Callers
// may wrap its Transport (tracing) before use.
func Client(timeout time.Duration, al Allowed, roots *x509.CertPool) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil, // a proxy would dial for us, past the address check
			DialContext:            Dialer(timeout, al).DialContext,
			TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:    timeout,
			ResponseHeaderTimeout:  timeout,
			MaxIdleConns:           16,
			MaxIdleConnsPerHost:    2,
			IdleConnTimeout:        30 * time.Second,
			MaxResponseHeaderBytes: 16 << 10,
			ForceAttemptHTTP2:      true,
		},
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return ErrRedirect },
	}
}

// ReadAtMost reads r to its end, or ErrTooLarge once it has more than limit bytes: a server
// that sends without end costs at most limit+1 bytes of memory.
func ReadAtMost(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, ErrTooLarge
	}
	return b, nil
}
