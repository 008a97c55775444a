package ciba

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/trust"
)

// Delivery modes (CIBA Core §5). Push is not offered: it would hand tokens to an address
// instead of to an authenticated token request.
const (
	modePoll = "poll"
	modePing = "ping"
)

// notifyTimeout bounds one ping notification.
const notifyTimeout = 10 * time.Second

// sealPurpose binds sealed notification secrets to their use (secret.Keyring).
const sealPurpose = "ciba-notification"

func modeOf(c *config.Client) string {
	if c.BackchannelDeliveryMode == modePing && c.BackchannelNotificationEndpoint != "" {
		return modePing
	}
	return modePoll
}

func publicClient() *http.Client {
	c := netguard.Client(notifyTimeout, nil, trust.Roots())
	// A notification endpoint is the client's to say; where it redirects is not.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// pingSecrets are what a ping needs and the store must not hold in clear: the auth_req_id the
// notification names and the client_notification_token it carries.
type pingSecrets struct {
	AuthReqID string `json:"id"`
	Token     string `json:"token"`
}

// sealed is how the ping secrets are stored: the keyring key's id and what it sealed.
type sealed struct {
	KeyID  string `json:"k"`
	Sealed []byte `json:"s"`
}

// seal seals the ping secrets under the keyring's primary key.
func (a *Approvals) seal(id, token string) []byte {
	b, _ := json.Marshal(pingSecrets{AuthReqID: id, Token: token})
	var v sealed
	v.KeyID, v.Sealed = a.env.Keyring.Seal(sealPurpose, b)
	out, _ := json.Marshal(v)
	return out
}

func (f *flow) open(b []byte) (pingSecrets, bool) {
	var v sealed
	var s pingSecrets
	if json.Unmarshal(b, &v) != nil {
		return s, false
	}
	plain, err := f.env.Keyring.Open(sealPurpose, v.KeyID, v.Sealed)
	if err != nil || json.Unmarshal(plain, &s) != nil {
		return s, false
	}
	return s, true
}

// ping tells a ping client that the person answered (CIBA Core §10.2): a POST of the
// auth_req_id to its registered endpoint, with its client_notification_token as bearer token,
// in the background. A failed ping is logged; the client can still poll.
func (f *flow) ping(ctx context.Context, p *config.Project, a store.Approval) {
	c := p.Clients[a.ClientID]
	if a.DeliveryMode != modePing || c == nil || c.BackchannelNotificationEndpoint == "" {
		return
	}
	s, ok := f.open(a.NotificationToken)
	if !ok {
		f.env.Logger.Info("ping notification not sent: its secrets cannot be opened", "project", p.Key, "client", a.ClientID)
		return
	}
	body, _ := json.Marshal(map[string]string{"auth_req_id": s.AuthReqID})
	// The person's request ends before the ping does; the ping keeps its values (request id).
	bg := context.WithoutCancel(ctx)
	go func() {
		ctx, cancel := context.WithTimeout(bg, notifyTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BackchannelNotificationEndpoint, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := f.notify.Do(req)
		if err != nil {
			f.env.Logger.Info("ping notification failed", "project", p.Key, "client", a.ClientID, "error", err.Error())
			return
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			f.env.Logger.Info("ping notification refused", "project", p.Key, "client", a.ClientID, "status", resp.StatusCode)
		}
	}()
}
