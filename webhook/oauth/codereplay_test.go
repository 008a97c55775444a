package oauth_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook"
)

// heldIssue holds the first token insert of a code redemption until released: the moment
// between spending a code and storing what it buys, where a replay finds nothing to revoke.
type heldIssue struct {
	webhook.Store
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (h *heldIssue) CreateTokens(ctx context.Context, tokens ...store.Token) error {
	if len(tokens) > 0 && tokens[0].CodeHash != nil {
		h.once.Do(func() {
			close(h.reached)
			<-h.release
		})
	}
	return h.Store.CreateTokens(ctx, tokens...)
}

// TestCodeReplayBeforeTokensStored: an attacker who stole a code replays it while the client's
// own redemption has spent the code but not yet stored its tokens, so the replay's revocation
// finds nothing. The client's redemption must still not hand out live tokens (RFC 6749
// §4.1.2): it sees the replay's mark after storing them and revokes them.
func TestCodeReplayBeforeTokensStored(t *testing.T) {
	t.Parallel()
	held := &heldIssue{reached: make(chan struct{}), release: make(chan struct{})}
	s := stack.New(t, stack.Options{Server: func(o *webhook.Options) {
		held.Store = o.Store
		o.Store = held
	}})
	pk := stack.NewPKCE()
	code, err := s.Browser().Authorize(stack.Agent, stack.AgentRedir, "openid read", stack.AliceEmail, stack.AlicePassword, pk)
	if err != nil {
		t.Fatal(err)
	}
	redeem := func() stack.Answer {
		return s.MustPost("/token", url.Values{
			"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {stack.AgentRedir}, "code_verifier": {pk.Verifier},
		}, stack.Agent, stack.AgentSecret)
	}
	first := make(chan stack.Answer)
	go func() { first <- redeem() }()
	<-held.reached
	if replay := redeem(); replay.Status != http.StatusBadRequest || replay.Str("error") != "invalid_grant" {
		t.Errorf("the replay: %d %s, want 400 invalid_grant", replay.Status, replay.Raw)
	}
	close(held.release)
	won := <-first
	if won.Status == http.StatusOK {
		t.Errorf("the redemption raced by a replay handed out tokens: %s", won.Raw)
	}
	if won.Status != http.StatusBadRequest || won.Str("error") != "invalid_grant" {
		t.Errorf("the raced redemption: %d %s, want 400 invalid_grant", won.Status, won.Raw)
	}
	live, err := s.Store().CountLiveTokens(context.Background(), stack.ProjectKey, s.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n := live[stack.Agent]; n != 0 {
		t.Errorf("%d tokens issued from the replayed code are live", n)
	}
}
