package webhook_test

import (
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// The recognised-apps tests moved to webhook/consent, webhook/oauth and webhook/register; these
// helpers stay for the files of this package that still use them, and go with harness_test.go.

// text is the page as a person reads it.
func (p page) text() string { return p.sp().Text() }

// docSite is an app's web site on 127.0.0.1 (https), serving client ID metadata documents.
type docSite struct {
	ts    *httptest.Server
	mu    sync.Mutex
	docs  map[string][]byte
	pool  *x509.CertPool
	extra map[string]http.HandlerFunc
}

func newDocSite(t *testing.T) *docSite {
	s := &docSite{docs: map[string][]byte{}, extra: map[string]http.HandlerFunc{}}
	s.ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		doc, h := s.docs[r.URL.Path], s.extra[r.URL.Path]
		s.mu.Unlock()
		switch {
		case h != nil:
			h(w, r)
		case doc != nil:
			w.Header().Set("Content-Type", "application/json")
			w.Write(doc)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.ts.Close)
	s.pool = x509.NewCertPool()
	s.pool.AddCert(s.ts.Certificate())
	return s
}

// serve publishes a document at path; fields override the defaults ("client_id" defaults to
// the document's own URL).
func (s *docSite) serve(path string, fields map[string]any) string {
	id := s.ts.URL + path
	doc := map[string]any{
		"client_id": id, "client_name": "Claude Code", "redirect_uris": []string{"http://127.0.0.1/callback"},
		"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"},
		"client_uri": "https://claude.ai/",
	}
	for k, v := range fields {
		if v == nil {
			delete(doc, k)
		} else {
			doc[k] = v
		}
	}
	b, _ := json.Marshal(doc)
	s.mu.Lock()
	s.docs[path] = b
	s.mu.Unlock()
	return id
}
