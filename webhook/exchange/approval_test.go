package exchange_test

import (
	"context"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/ciba"
)

// approvalHarness is detailsHarness with Repo Helper also allowed the ciba grant: an exchange
// that asks for more than alice's token carries starts an approval instead of only refusing.
func approvalHarness(t *testing.T) *stack.Stack {
	t.Helper()
	h := detailsHarness(t)
	agent := h.Project.Clients[stack.Agent]
	agent.GrantTypes = append(slices.Clone(agent.GrantTypes), ciba.GrantType)
	return h
}

func exchangeDetails(h *stack.Stack, client, clientSecret, subject, details string) stack.Answer {
	return h.ExchangeForm(client, clientSecret, form(subject, func(f url.Values) { f.Set("authorization_details", details) }))
}

func pollCIBA(h *stack.Stack, id string) stack.Answer {
	return h.ExchangeForm(stack.Agent, stack.AgentSecret, url.Values{"grant_type": {ciba.GrantType}, "auth_req_id": {id}})
}

// approvalsPage signs email in and returns their browser on the "Waiting for you" page.
func approvalsPage(t *testing.T, h *stack.Stack, email, password string) (*stack.Browser, stack.Page) {
	t.Helper()
	b := h.Browser()
	b.MustSignIn(email, password)
	pg := b.MustGet(h.Issuer + ciba.PagePath)
	if pg.Status != 200 {
		t.Fatalf("%s's approvals page: %d", email, pg.Status)
	}
	return b, pg
}

// TestExchangeStartsApproval tells the story: Repo Helper's exchange asks for write on
// acme/api with alice's token that carries no GitHub details. It is answered approval_required
// with an auth_req_id; mallory cannot see or decide the request; alice approves it; the ciba
// poll returns alice's token carrying exactly those details, valid no longer than the
// approval; and the exchange repeated with it returns her GitHub token within them.
func TestExchangeStartsApproval(t *testing.T) {
	h := approvalHarness(t)
	subject := tokenWithDetails(t, h, "", time.Hour)
	want := "[" + ghDetail("read,write", repoAPI) + "]"

	refused := exchangeDetails(h, stack.Agent, stack.AgentSecret, subject, want)
	id := refused.Str("auth_req_id")
	if refused.Status != 400 || refused.Str("error") != ciba.CodeApprovalRequired || !strings.HasPrefix(id, ciba.PrefixAuthReqID) ||
		refused.Str("interval") != "5" || refused.Str("expires_in") != "600" || refused.Str("access_token") != "" ||
		refused.Str("approvals_uri") != h.Issuer+ciba.PagePath {
		t.Fatalf("exchange outside the approval: %d %s", refused.Status, refused.Raw)
	}
	if refused.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("approval_required carries an auth_req_id but Cache-Control is %q", refused.Header.Get("Cache-Control"))
	}
	if got := pollCIBA(h, id); got.Str("error") != "authorization_pending" {
		t.Fatalf("poll before the answer: %s", got.Raw)
	}

	// Mallory, signed in with her own session, neither sees nor decides alice's request.
	_, alicePage := approvalsPage(t, h, stack.AliceEmail, stack.AlicePassword)
	action, fields, ok := alicePage.Form("Approve")
	if !ok {
		t.Fatalf("alice's page has no Approve button: %s", alicePage.Text())
	}
	mallory, malloryPage := approvalsPage(t, h, stack.MalloryEmail, stack.MalloryPassword)
	if strings.Contains(malloryPage.Body, fields.Get("id")) || strings.Contains(malloryPage.Text(), stack.AgentName) {
		t.Fatal("mallory's page shows alice's request")
	}
	csrf := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindStringSubmatch(mallory.Account().Body)
	if csrf == nil {
		t.Fatal("mallory's account page has no form token")
	}
	forged := url.Values{"csrf_token": {csrf[1]}, "id": {fields.Get("id")}, "decision": {"approve"}}
	if res := mallory.MustPost(action, forged); !strings.Contains(res.Location(), "done=gone") {
		t.Fatalf("mallory's approval: %d %s", res.Status, res.Location())
	}
	h.Clock.Advance(ciba.Interval)
	if got := pollCIBA(h, id); got.Str("error") != "authorization_pending" {
		t.Fatalf("poll after mallory's try: %s", got.Raw)
	}

	alice, alicePage := approvalsPage(t, h, stack.AliceEmail, stack.AlicePassword)
	action, fields, _ = alicePage.Form("Approve")
	if res := alice.MustPost(action, fields); !strings.Contains(res.Location(), "done=approved") {
		t.Fatalf("alice's approval: %d %s", res.Status, res.Location())
	}
	h.Clock.Advance(ciba.Interval)
	tok := pollCIBA(h, id)
	if tok.Status != 200 || !strings.Contains(string(tok.Raw), `"authorization_details":`+want) {
		t.Fatalf("poll after approval: %d %s", tok.Status, tok.Raw)
	}
	stored, err := h.Store().GetToken(context.Background(), secret.Hash(tok.Str("access_token")))
	if err != nil || stored.Subject != h.PersonID(stack.AliceEmail) || stored.ClientID != stack.Agent {
		t.Fatalf("the approval's token: %+v %v", stored, err)
	}

	a := exchangeDetails(h, stack.Agent, stack.AgentSecret, tok.Str("access_token"), want)
	if a.Status != 200 || a.Str("access_token") != "gho_alice" || !strings.Contains(string(a.Raw), `"authorization_details":`+want) {
		t.Fatalf("exchange with the approval's token: %d %s", a.Status, a.Raw)
	}
	if in, _ := strconv.Atoi(a.Str("expires_in")); in <= 0 || in > 600 {
		t.Fatalf("expires_in = %q, want within the approval's 600 s", a.Str("expires_in"))
	}
}

// TestExchangeApprovalOnlyForDeclaredAgents: a self-registered client (even one whose stored
// registration names the ciba grant) and a declared agent without the grant get the plain
// refusal, and nobody is asked.
func TestExchangeApprovalOnlyForDeclaredAgents(t *testing.T) {
	h := detailsHarness(t)
	ctx := context.Background()
	if _, err := h.Store().UpdateClient(ctx, stack.ProjectKey, stack.Registered, func(c store.Client) (store.Client, error) {
		c.GrantTypes = append(c.GrantTypes, ciba.GrantType)
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	details := "[" + ghDetail("read", repoAPI) + "]"
	subject := tokenWithDetails(t, h, "", time.Hour)
	if a := exchangeDetails(h, stack.Agent, stack.AgentSecret, subject, details); a.Str("error") != "invalid_authorization_details" {
		t.Fatalf("declared agent without the ciba grant: %d %s", a.Status, a.Raw)
	}
	own := h.AccessToken(stack.AliceEmail, stack.Registered)
	if a := exchangeDetails(h, stack.Registered, stack.RegisteredSecret, own, details); a.Status != 400 || a.Str("error") == ciba.CodeApprovalRequired || a.Str("auth_req_id") != "" {
		t.Fatalf("self-registered client: %d %s", a.Status, a.Raw)
	}
	if n := h.CountRows("approval_requests"); n != 0 {
		t.Fatalf("%d approval requests started", n)
	}
}

// TestExchangeApprovalBlockedAgent: once alice blocked Repo Helper, its exchange outside her
// approval is access_denied at once, and no request is stored.
func TestExchangeApprovalBlockedAgent(t *testing.T) {
	h := approvalHarness(t)
	if err := h.Store().BlockClient(context.Background(), store.ApprovalBlock{
		Project: stack.ProjectKey, Subject: h.PersonID(stack.AliceEmail), ClientID: stack.Agent, CreatedAt: h.Clock.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	a := exchangeDetails(h, stack.Agent, stack.AgentSecret, tokenWithDetails(t, h, "", time.Hour), "["+ghDetail("read", repoAPI)+"]")
	if a.Str("error") != "access_denied" || a.Str("auth_req_id") != "" {
		t.Fatalf("blocked agent: %d %s", a.Status, a.Raw)
	}
	if n := h.CountRows("approval_requests"); n != 0 {
		t.Fatalf("%d approval requests started", n)
	}
}

// TestExchangeApprovalRateLimited: exchange-started requests spend the agent's approval
// allowance like /bc-authorize's: after ciba.ClientBurst of them the next is
// temporarily_unavailable (429) and nothing more is stored.
func TestExchangeApprovalRateLimited(t *testing.T) {
	h := approvalHarness(t)
	subject := tokenWithDetails(t, h, "", time.Hour)
	details := "[" + ghDetail("read", repoAPI) + "]"
	for i := range ciba.ClientBurst {
		if a := exchangeDetails(h, stack.Agent, stack.AgentSecret, subject, details); a.Str("error") != ciba.CodeApprovalRequired {
			t.Fatalf("request %d: %d %s", i+1, a.Status, a.Raw)
		}
	}
	a := exchangeDetails(h, stack.Agent, stack.AgentSecret, subject, details)
	if a.Status != 429 || a.Str("error") != "temporarily_unavailable" || a.Str("auth_req_id") != "" {
		t.Fatalf("request over the limit: %d %s", a.Status, a.Raw)
	}
	if n := h.CountRows("approval_requests"); n != ciba.ClientBurst {
		t.Fatalf("%d approval requests stored, want %d", n, ciba.ClientBurst)
	}
}
