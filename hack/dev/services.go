package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
)

// The demo's other two services, beside the fake GitHub: a Linear-shaped OAuth service
// (internal/upstream/fakeoauth, declared by the linear preset in config/samples) and a service
// that issues API keys (docs/api-key-connectors.md). Their addresses are the ones the sample
// Connectors name.
const (
	fakeLinearAddr = "127.0.0.1:8092"
	keyServiceAddr = "127.0.0.1:8093"

	linearConnector    = "linear"
	linearClientID     = "latchkey-demo-linear"
	linearClientSecret = "demo-linear-secret"
	// keyServiceCheckPath is the check call of the keyservice Connector.
	keyServiceCheckPath = "/api/me"
)

// keyAccount is an account at the demo key service and the key the demo prints for it.
type keyAccount struct {
	ID         int
	Username   string
	Name       string
	Key        string
	DemoPerson string
}

// demoKeys are the key service's keys; make run prints them, since a person pastes one on
// Latchkey's key page to connect.
var demoKeys = []keyAccount{
	{2001, "alice-keys", "Alice", "lk_demo_alice_4f9a2c7e1b3d", "alice@example.com"},
	{2002, "mallory-keys", "Mallory", "lk_demo_mallory_8d3e6b0a5c9f", "mallory@example.com"},
}

// keyService answers GET /api/me with the account of the key in X-Api-Key, and 401 for any
// other key, as the "current user" endpoint of a service with API keys does.
func keyService() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+keyServiceCheckPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		got := r.Header.Get("X-Api-Key")
		for _, a := range demoKeys {
			if subtle.ConstantTimeCompare([]byte(got), []byte(a.Key)) == 1 {
				_ = json.NewEncoder(w).Encode(map[string]any{"id": a.ID, "username": a.Username, "name": a.Name})
				return
			}
		}
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"message":"invalid API key"}`))
	})
	return mux
}

// fakeLinear is the fakeoauth Linear shape for the demo Connector default at callbackURL, with a
// sign-in page of its own: the fake itself only knows sessions a test hands it, so a person in a
// browser picks an account here first.
func fakeLinear(callbackURL string) http.Handler {
	fake := fakeoauth.New(fakeoauth.Options{
		Shape: fakeoauth.Linear, ClientID: linearClientID, ClientSecret: linearClientSecret, RedirectURI: callbackURL,
		AccessTokenTTL: 24 * time.Hour,
		Accounts: []fakeoauth.Account{
			{ID: "lin-alice", Login: "alice-linear", Name: "Alice", Email: "alice-linear@example.com"},
			{ID: "lin-mallory", Login: "mallory-linear", Name: "Mallory", Email: "mallory-linear@example.com"},
		},
	})
	authorize := fakeoauth.PathsOf(fakeoauth.Linear).Authorize
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/sign-in" && r.Method == http.MethodPost:
			login, next := r.FormValue("login"), r.FormValue("next")
			if (login != "alice-linear" && login != "mallory-linear") || !strings.HasPrefix(next, authorize+"?") {
				http.Error(w, "unknown account", http.StatusBadRequest)
				return
			}
			http.SetCookie(w, fake.SessionCookie(login))
			http.Redirect(w, r, next, http.StatusSeeOther)
		case r.URL.Path == authorize && !hasCookie(r, "fake_session"):
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_ = linearSignIn.Execute(w, r.URL.RequestURI())
		default:
			fake.ServeHTTP(w, r)
		}
	})
}

var linearSignIn = template.Must(template.New("").Parse(`<!doctype html><title>Fake Linear</title>
<h1>Fake Linear</h1><p>Sign in to approve Latchkey's access as:</p>
<form method="post" action="/sign-in"><input type="hidden" name="next" value="{{.}}">
<button name="login" value="alice-linear">alice-linear</button>
<button name="login" value="mallory-linear">mallory-linear</button></form>`))

func hasCookie(r *http.Request, name string) bool {
	_, err := r.Cookie(name)
	return err == nil
}

// demoCallback is the callback of the sample Connector name of the demo Project at issuer.
func demoCallback(issuer, name string) string {
	return issuer + config.CallbackPath(demoNamespace, name)
}

// startDemoServices starts the fake Linear and the key service for the demo Project at issuer.
func startDemoServices(issuer string) (stop func(), err error) {
	stopLinear, err := serveOn(fakeLinearAddr, "fake Linear", fakeLinear(demoCallback(issuer, linearConnector)))
	if err != nil {
		return nil, err
	}
	stopKeys, err := serveOn(keyServiceAddr, "fake key service", keyService())
	if err != nil {
		stopLinear()
		return nil, err
	}
	return func() { stopKeys(); stopLinear() }, nil
}

func serveOn(addr, name string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	say("%s listening on http://%s", name, addr)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// printDemoServices tells a newcomer how to connect the two other services.
func printDemoServices() {
	fmt.Printf("Fake Linear at http://%s (Connect Linear, then pick alice-linear or mallory-linear)\n", fakeLinearAddr)
	fmt.Printf("Fake key service at http://%s (Connect Key Service, then paste a demo key):\n", keyServiceAddr)
	for _, a := range demoKeys {
		fmt.Printf("  %s  key: %s\n", a.DemoPerson, a.Key)
	}
}
