// Package issuercheck answers "does this Latchkey installation serve?" from the outside, as
// `latchkey check-issuer` for the chart's `helm test` hook and for an admin after an install:
// the server is ready (database reachable, configuration compiled), and each named Project's
// issuer publishes its metadata under its own name and its keys.
//
// It reads only public endpoints and sends no credential, so the test Pod needs no
// service-account token and no Secret.
package issuercheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Options say where to look.
type Options struct {
	// PublicURL is the installation's public URL (the chart's publicURL): issuers are
	// {PublicURL}/{namespace}/{project}.
	PublicURL string
	// Via, when set, is the address requests are sent to instead of PublicURL's scheme and host
	// (the Service, from inside the cluster); paths and the issuer names expected are unchanged,
	// and the Host header stays PublicURL's.
	Via string
	// Projects are "namespace/name" of the Projects whose issuers must answer.
	Projects []string
	// Client makes the requests; it should have a timeout.
	Client *http.Client
}

// Result is one check's outcome.
type Result struct {
	What string
	Err  error
}

// maxBody bounds what is read of an answer: metadata and key sets are a few kilobytes.
const maxBody = 1 << 20

// Run runs every check, each independent of the others' outcome, and returns their results in
// order: readiness first, then per Project its metadata and its key set.
func Run(ctx context.Context, o Options) ([]Result, error) {
	public, err := url.Parse(strings.TrimSuffix(o.PublicURL, "/"))
	if err != nil || (public.Scheme != "https" && public.Scheme != "http") || public.Host == "" {
		return nil, fmt.Errorf("public URL %q: want http(s)://host[/path]", o.PublicURL)
	}
	var via *url.URL
	if o.Via != "" {
		via, err = url.Parse(o.Via)
		if err != nil || (via.Scheme != "https" && via.Scheme != "http") || via.Host == "" || strings.Trim(via.Path, "/") != "" {
			return nil, fmt.Errorf("via %q: want http(s)://host[:port] without a path", o.Via)
		}
	}
	for _, p := range o.Projects {
		ns, name, ok := strings.Cut(p, "/")
		if !ok || ns == "" || name == "" || strings.ContainsAny(name, "/?#") {
			return nil, fmt.Errorf("project %q: want namespace/name", p)
		}
	}
	c := checker{public: public, via: via, client: o.Client}
	if c.client == nil {
		c.client = http.DefaultClient
	}

	results := []Result{{"server ready (" + public.String() + "/-/readyz)", c.ready(ctx)}}
	for _, p := range o.Projects {
		issuer := public.String() + "/" + p
		jwks, err := c.metadata(ctx, issuer)
		results = append(results, Result{"issuer " + issuer + " publishes its metadata", err})
		if err != nil {
			continue
		}
		results = append(results, Result{"issuer " + issuer + " publishes its keys", c.keys(ctx, jwks)})
	}
	return results, nil
}

type checker struct {
	public, via *url.URL
	client      *http.Client
}

// get fetches u (a URL under the public URL), through via when set.
func (c checker) get(ctx context.Context, u string) (*http.Response, error) {
	target, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	if target.Scheme != c.public.Scheme || target.Host != c.public.Host {
		// An endpoint elsewhere would be fetched from wherever the metadata pointed: refuse.
		return nil, fmt.Errorf("%s is not under the public URL %s", u, c.public)
	}
	host := target.Host
	if c.via != nil {
		target.Scheme, target.Host = c.via.Scheme, c.via.Host
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Host = host
	req.Header.Set("Accept", "application/json")
	return c.client.Do(req)
}

func (c checker) ready(ctx context.Context) error {
	resp, err := c.get(ctx, c.public.String()+"/-/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// metadata checks the issuer's RFC 8414 document and returns its jwks_uri.
func (c checker) metadata(ctx context.Context, issuer string) (string, error) {
	var md struct {
		Issuer            string   `json:"issuer"`
		AuthorizeEndpoint string   `json:"authorization_endpoint"`
		TokenEndpoint     string   `json:"token_endpoint"`
		JWKSURI           string   `json:"jwks_uri"`
		PKCEMethods       []string `json:"code_challenge_methods_supported"`
	}
	if err := c.getJSON(ctx, issuer+"/.well-known/oauth-authorization-server", &md); err != nil {
		return "", err
	}
	switch {
	case md.Issuer != issuer:
		// The Project answers under another name: publicURL differs from the server's
		// --public-url, and every client would refuse its tokens (RFC 8414 §3.3).
		return "", fmt.Errorf("the metadata names the issuer %q, want %q (is publicURL the server's --public-url?)", md.Issuer, issuer)
	case !strings.HasPrefix(md.AuthorizeEndpoint, issuer+"/") || !strings.HasPrefix(md.TokenEndpoint, issuer+"/"):
		return "", fmt.Errorf("endpoints %q and %q are not under the issuer", md.AuthorizeEndpoint, md.TokenEndpoint)
	case !slices.Contains(md.PKCEMethods, "S256"):
		return "", errors.New("code_challenge_methods_supported lacks S256")
	case md.JWKSURI == "":
		return "", errors.New("no jwks_uri")
	}
	return md.JWKSURI, nil
}

func (c checker) keys(ctx context.Context, jwks string) error {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := c.getJSON(ctx, jwks, &set); err != nil {
		return err
	}
	if set.Keys == nil {
		return errors.New(`the key set has no "keys"`)
	}
	return nil
}

func (c checker) getJSON(ctx context.Context, u string, v any) error {
	resp, err := c.get(ctx, u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", u, resp.StatusCode)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return fmt.Errorf("%s: Content-Type %q, want application/json", u, mt)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	return nil
}
