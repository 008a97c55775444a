package events_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
)

// verifyStandardWebhook is a receiver's verifier written from the Standard Webhooks
// specification (https://www.standardwebhooks.com, "Verifying webhook authenticity"), not
// from Latchkey's signing code: the secret is "whsec_" + base64(key); the signed content is
// id + "." + timestamp + "." + body; the signature header holds space-separated
// "v1,<base64 HMAC-SHA256>" entries, any of which may match; timestamps more than tolerance
// away from now are refused.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("bad timestamp")
	}
	if math.Abs(now.Sub(time.Unix(sec, 0)).Seconds()) > tolerance.Seconds() {
		return errors.New("timestamp out of tolerance")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	expected := mac.Sum(nil)
	for _, vs := range strings.Split(sigs, " ") {
		version, sig, ok := strings.Cut(vs, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, expected) {
			return nil
		}
	}
	return errors.New("no matching signature")
}

type capture struct {
	mu   sync.Mutex
	hdr  []http.Header
	body [][]byte
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.hdr = append(c.hdr, r.Header.Clone())
	c.body = append(c.body, b)
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func TestDeliveriesVerifyAsStandardWebhooks(t *testing.T) {
	oldKey := bytes.Repeat([]byte{0x11}, 32)
	newKey := bytes.Repeat([]byte{0x22}, 24)
	oldSecret := "whsec_" + base64.StdEncoding.EncodeToString(oldKey)
	newSecret := "whsec_" + base64.StdEncoding.EncodeToString(newKey)
	otherSecret := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x33}, 32))

	// The sink's Secret holds the new and the old secret while receivers move over.
	keys, err := events.ParseSinkSecret([]byte(newSecret + "\n" + oldSecret + "\n"))
	if err != nil || len(keys) != 2 {
		t.Fatalf("ParseSinkSecret: %v %v", keys, err)
	}

	f := newFixture(t, 0)
	c := &capture{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	f.project.EventSinks = []config.EventSink{{Name: "siem", URL: srv.URL, HMACKey: keys[0], Keys: keys}}
	f.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{f.project.Key: f.project}})
	ctx := context.Background()
	if err := f.emitter.Emit(ctx, f.project, events.Event{Type: events.RefreshReuse, Actor: "client:c1", Subject: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.deliverer().DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c.body) != 1 {
		t.Fatalf("%d deliveries", len(c.body))
	}
	h, body, now := c.hdr[0], c.body[0], f.clock.Now()
	const tolerance = 5 * time.Minute

	// Receivers with either secret accept; one with another secret does not.
	for _, s := range []string{newSecret, oldSecret} {
		if err := verifyStandardWebhook(s, h, body, now, tolerance); err != nil {
			t.Errorf("a receiver holding %s… refused the delivery: %v", s[:10], err)
		}
	}
	if verifyStandardWebhook(otherSecret, h, body, now, tolerance) == nil {
		t.Error("a receiver with another secret accepted the delivery")
	}
	// webhook-id is the CloudEvents id, the same on every attempt, for deduplication.
	if !strings.Contains(string(body), `"id":"`+h.Get("webhook-id")+`"`) {
		t.Errorf("webhook-id %q is not the event's id in %s", h.Get("webhook-id"), body)
	}

	// Tampering with the body, the timestamp or the id is refused.
	tampered := bytes.Replace(body, []byte("alice"), []byte("bobby"), 1)
	if verifyStandardWebhook(newSecret, h, tampered, now, tolerance) == nil {
		t.Error("a tampered body verified")
	}
	h2 := h.Clone()
	ts, _ := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	h2.Set("webhook-timestamp", strconv.FormatInt(ts+1, 10))
	if verifyStandardWebhook(newSecret, h2, body, now, tolerance) == nil {
		t.Error("a tampered timestamp verified")
	}
	h3 := h.Clone()
	h3.Set("webhook-id", "another-id")
	if verifyStandardWebhook(newSecret, h3, body, now, tolerance) == nil {
		t.Error("a tampered id verified")
	}
	// A delivery captured and replayed an hour later is refused by its timestamp.
	if verifyStandardWebhook(newSecret, h, body, now.Add(time.Hour), tolerance) == nil {
		t.Error("a replay an hour later verified")
	}
	// The legacy header is still sent, signed with the first key.
	if !verify(keys[0], body, h.Get(events.SignatureHeader)) {
		t.Errorf("legacy %s does not verify", events.SignatureHeader)
	}
}

func TestParseSinkSecret(t *testing.T) {
	raw := []byte("a raw key of at least thirty-two bytes!!")
	for _, tc := range []struct {
		name  string
		value string
		keys  int
		ok    bool
	}{
		{"raw key, as before", string(raw), 1, true},
		{"raw key too short", "short", 0, false},
		{"one whsec", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 24)), 1, true},
		{"two whsec", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + " whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 24)), 2, true},
		{"whsec too short", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16)), 0, false},
		{"whsec not base64", "whsec_***", 0, false},
		{"whsec then raw", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 24)) + " nope", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := events.ParseSinkSecret([]byte(tc.value))
			if (err == nil) != tc.ok || len(keys) != tc.keys {
				t.Fatalf("keys %d, err %v", len(keys), err)
			}
		})
	}
	if keys, _ := events.ParseSinkSecret(raw); !bytes.Equal(keys[0], raw) {
		t.Fatal("a raw key is not used as is")
	}
}
