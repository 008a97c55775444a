package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
)

// authenticator gives p a virtual platform authenticator that holds discoverable credentials
// and verifies its person, as a phone or laptop with a screen lock does.
func authenticator(t *testing.T, p *testbrowser.Profile) webauthn.AuthenticatorID {
	t.Helper()
	if _, err := chromedp.Call(p.Ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	res, err := chromedp.Call(p.Ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
		Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21,
			Transport: webauthn.AuthenticatorTransportInternal, HasResidentKey: true, HasUserVerification: true,
			IsUserVerified: true, AutomaticPresenceSimulation: true,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.AuthenticatorID
}

func credentials(t *testing.T, p *testbrowser.Profile, id webauthn.AuthenticatorID) []*webauthn.Credential {
	t.Helper()
	res, err := chromedp.Call(p.Ctx, webauthn.GetCredentials, webauthn.GetCredentialsParams{AuthenticatorID: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.Credentials
}

// clickPasskey presses "Sign in with a passkey" without waiting on the node afterwards: the
// browser may already be answering the page's conditional request, which navigates away.
var clickPasskey = chromedp.Evaluate[chromedp.Void](`document.getElementById("passkey-button").click()`)

// presence turns the authenticator's automatic answer on or off: with it on, the virtual
// authenticator also answers the page's conditional (autofill) request at once.
func presence(t *testing.T, p *testbrowser.Profile, id webauthn.AuthenticatorID, on bool) {
	t.Helper()
	if _, err := chromedp.Call(p.Ctx, webauthn.SetAutomaticPresenceSimulation,
		webauthn.SetAutomaticPresenceSimulationParams{AuthenticatorID: id, Enabled: on}); err != nil {
		t.Fatal(err)
	}
}

// cloneCredential is the part of WebAuthn.Credential a copied key needs; this Chromium refuses
// the CMTG fields cdproto always sends.
type cloneCredential struct {
	CredentialID         []byte  `json:"credentialId"`
	IsResidentCredential bool    `json:"isResidentCredential"`
	RpID                 string  `json:"rpId"`
	PrivateKey           []byte  `json:"privateKey"`
	UserHandle           []byte  `json:"userHandle"`
	SignCount            float64 `json:"signCount"`
}

type cloneParams struct {
	AuthenticatorID webauthn.AuthenticatorID `json:"authenticatorId"`
	Credential      cloneCredential          `json:"credential"`
}

var addCredential = cdp.Command[cloneParams, cdp.Empty]{Method: webauthn.CommandAddCredential}

func signInWithPassword(p *testbrowser.Profile, issuer, email, password string) {
	p.Open(issuer + "/sign-in")
	p.Fill("username", email)
	p.Fill("password", password)
	p.Press("Sign in")
	p.WaitFor("Your account")
}

// The passkey stories in Chromium with its virtual authenticator: Alice enrols a passkey after
// a recent password sign-in, signs out, signs in with it, and removes it. A copy of her
// credential with a lower signature counter (a cloned authenticator) is refused; her passkey
// is refused at another project on the same host; enrolling without a recent sign-in is
// refused.
func TestPasskeysInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	h := stack.New(t, stack.Options{Audit: true, FrontHost: "127.0.0.1", PublicHost: "localhost"})
	other := *h.Project
	other.Key, other.Name, other.DisplayName, other.Issuer = "team/other", "other", "Other Team", h.Front.URL+"/team/other"
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{stack.ProjectKey: h.Project, other.Key: &other}, Version: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	alice := testbrowser.New(t, ctx, "alice's browser")
	auth := authenticator(t, alice)

	// Enrol.
	signInWithPassword(alice, h.Issuer, stack.AliceEmail, stack.AlicePassword)
	alice.WaitFor("Add a passkey")
	alice.Press("Add a passkey")
	alice.WaitFor("The passkey was added")
	if n := len(credentials(t, alice, auth)); n != 1 {
		t.Fatalf("the authenticator holds %d credentials, want 1", n)
	}
	if n := h.CountRows("passkeys"); n != 1 {
		t.Fatalf("%d passkeys stored, want 1", n)
	}

	// Sign out, then in with the passkey.
	alice.Open(h.Issuer + "/sign-out")
	alice.Press("Sign out")
	alice.WaitFor("You are signed out")
	presence(t, alice, auth, false)
	alice.Open(h.Issuer + "/sign-in")
	alice.WaitFor("Sign in with a passkey")
	if !testbrowser.Eval[bool](alice, `document.getElementById("username").autocomplete === "username webauthn"`) {
		t.Error("the email field does not offer passkeys in its autofill")
	}
	alice.Screenshot(consentShots, "sign-in-passkey.png")
	presence(t, alice, auth, true)
	alice.Do(clickPasskey)
	alice.WaitFor("Your account")

	// The same credential on another project on this host: unknown there.
	alice.Open(other.Issuer + "/sign-in")
	alice.Do(clickPasskey)
	if text := alice.WaitFor("not one of this project's"); strings.Contains(text, "Your account") {
		t.Fatal("signed in to another project with Alice's passkey")
	}

	// A cloned authenticator: the same private key in another browser, its counter behind.
	creds := credentials(t, alice, auth)
	clone := testbrowser.New(t, ctx, "the clone")
	cloneAuth := authenticator(t, clone)
	o := creds[0]
	c := cloneCredential{CredentialID: o.CredentialID, IsResidentCredential: true, RpID: o.RpID,
		PrivateKey: o.PrivateKey, UserHandle: o.UserHandle, SignCount: 0}
	if _, err := chromedp.Call(clone.Ctx, addCredential, cloneParams{AuthenticatorID: cloneAuth, Credential: c}); err != nil {
		t.Fatal(err)
	}
	presence(t, clone, cloneAuth, false)
	clone.Open(h.Issuer + "/sign-in")
	clone.WaitFor("Sign in with a passkey")
	// The button, rather than waiting on the autofill request: under load that request may not
	// have started when the authenticator begins answering, and is then never answered.
	// Whichever is answered first signs in (passkey.js sends one credential only).
	presence(t, clone, cloneAuth, true)
	clone.Do(clickPasskey)
	clone.WaitFor("signature counter went backwards")
	if clone.Location() != h.Issuer+"/sign-in" {
		t.Fatalf("the clone moved on to %s", clone.Location())
	}

	// Enrolling again without a recent sign-in: sent to sign in first, nothing added.
	h.Clock.Advance(20 * time.Minute)
	presence(t, alice, auth, false)
	alice.Open(h.Issuer + "/account")
	alice.Press("Add a passkey")
	alice.WaitFor("For your security, sign in again")
	if n := h.CountRows("passkeys"); n != 1 {
		t.Fatalf("%d passkeys stored after a stale enrolment, want 1", n)
	}

	// Remove, after a fresh sign-in with the passkey, from the account page opened afresh: its
	// form then carries the session the sign-in left, whatever page the sign-in landed on.
	presence(t, alice, auth, true)
	alice.Do(clickPasskey)
	alice.WaitFor("Your account")
	alice.Open(h.Issuer + "/account")
	alice.WaitFor("Your account")
	alice.Press("Remove")
	alice.WaitFor("The passkey was removed")
	if n := h.CountRows("passkeys"); n != 0 {
		t.Fatalf("%d passkeys stored after removing, want 0", n)
	}
	alice.Open(h.Issuer + "/sign-out")
	alice.Press("Sign out")
	alice.WaitFor("You are signed out")
	alice.Open(h.Issuer + "/sign-in")
	alice.WaitFor("not one of this project's")
}
