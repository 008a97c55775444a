package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"latchkey.dev/latchkey/examples/repohelper"
	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/internal/testenv"
	latchkey "latchkey.dev/latchkey/mcp"
	"latchkey.dev/latchkey/test/stack"
)

// A connect link relayed through MCP works only if the client shows the link to the person and
// then retries by itself. These tests watch that happen, with real MCP clients (the Go SDK on both
// protocol versions, the TypeScript SDK through Node) against Repo Helper and a real Latchkey, the
// person acting in their own browser.

// elicited is one URL elicitation shown by the Go client, and how the test tells the client's
// handler that the person has finished.
type elicited struct {
	params *sdk.ElicitParams
	done   chan struct{}
}

// personInTheLoop is an elicitation handler that hands the link to the test goroutine (which
// acts as the person) and returns only once the person has finished.
func personInTheLoop(shown chan<- elicited) func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	return func(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
		e := elicited{params: req.Params, done: make(chan struct{})}
		select {
		case shown <- e:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-e.done:
			return &sdk.ElicitResult{Action: "accept"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

type callResult struct {
	res *sdk.CallToolResult
	err error
}

// callAsPerson calls the tool while the test acts as the person for every link the client
// shows; openLink returns once the person has finished with the link.
func callAsPerson(t *testing.T, cs *sdk.ClientSession, shown chan elicited, openLink func(p *sdk.ElicitParams)) (res *sdk.CallToolResult, links []*sdk.ElicitParams, err error) {
	t.Helper()
	out := make(chan callResult, 1)
	go func() {
		r, err := callList(t.Context(), cs)
		out <- callResult{r, err}
	}()
	for {
		select {
		case e := <-shown:
			links = append(links, e.params)
			openLink(e.params)
			close(e.done)
		case r := <-out:
			return r.res, links, r.err
		}
	}
}

// MCP 2026-07-28: the Go client declares URL elicitation; Repo Helper answers input_required
// with the link; the client's handler gets the URL; alice opens it in her browser, passes the
// checks and connects GitHub; the handler returns; the SDK retries by itself and gets alice's
// repositories.
func TestMCPGoClientInputRequired(t *testing.T) {
	s := newMCPStack(t)
	alice := s.alice()
	token := alice.AgentToken(t)
	refusal := s.Refusal(t, token) // what Latchkey tells Repo Helper before alice connects

	shown := make(chan elicited)
	cs := s.GoClient(t, token, mcpClientOpts{version: latchkey.ProtocolInputRequired, elicit: personInTheLoop(shown)})
	res, links, err := callAsPerson(t, cs, shown, func(p *sdk.ElicitParams) {
		wantDone(t, alice.OpenLink(t, p.URL))
	})
	wantRepos(t, res, err)
	if len(links) != 1 {
		t.Fatalf("the client showed %d links, want 1", len(links))
	}
	want := sdk.ElicitParams{Mode: "url", URL: refusal["connect_uri"].(string), Message: refusal["connect_message"].(string)}
	if got := *links[0]; got.Mode != want.Mode || got.URL != want.URL || got.Message != want.Message || got.ElicitationID != "" {
		t.Errorf("elicitation = %+v\nwant %+v (no elicitationId in 2026-07-28)", got, want)
	}
	wantAliceConnected(t, s)

	// Now connected and allowed: the next call runs straight through.
	res, links, err = callAsPerson(t, cs, shown, func(*sdk.ElicitParams) { t.Error("asked again after connecting") })
	wantRepos(t, res, err)
	if len(links) != 0 {
		t.Errorf("shown %d more links", len(links))
	}
}

// The same story with the person in a real browser (Chromium, a fresh profile): the link is
// opened there, Latchkey asks her to sign in, GitHub is another site, and the callback lands in
// the browser that started it, carrying the SameSite=Lax binding cookie.
func TestMCPGoClientInputRequiredInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	s := newMCPStack(t)
	alice := s.alice()
	token := alice.AgentToken(t) // the agent was authorised earlier, in another browser
	browser := testbrowser.New(t, t.Context(), "alice's browser")
	alice.signInAtGitHub(browser)

	shown := make(chan elicited)
	cs := s.GoClient(t, token, mcpClientOpts{version: latchkey.ProtocolInputRequired, elicit: personInTheLoop(shown)})
	res, links, err := callAsPerson(t, cs, shown, func(p *sdk.ElicitParams) {
		t.Logf("last page: %s", alice.openLinkInChromium(browser, p.URL))
	})
	wantRepos(t, res, err)
	if len(links) != 1 {
		t.Errorf("the client showed %d links, want 1", len(links))
	}
	wantAliceConnected(t, s)
}

// MCP 2025-11-25: the tool call fails with -32042 carrying the link exactly as Latchkey made it
// (connect_id as elicitationId); asking again gives the same link; alice opens it and connects;
// the client calls again and gets the repositories. The Go SDK does not act on -32042 by itself,
// so the test is the host here: it shows the link and calls again.
func TestMCPGoClientURLElicitationError(t *testing.T) {
	s := newMCPStack(t)
	alice := s.alice()
	token := alice.AgentToken(t)
	refusal := s.Refusal(t, token)

	var asked atomic.Int32
	cs := s.GoClient(t, token, mcpClientOpts{version: latchkey.ProtocolURLElicitationError,
		elicit: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked.Add(1) // 2025-11-25 relays by error; a request here would be a bug
			return &sdk.ElicitResult{Action: "decline"}, nil
		}})

	_, err := callList(t.Context(), cs)
	rpcErr, e := urlElicitation(t, err)
	wantElicitation(t, e, refusal)
	if rpcErr.Message != refusal["connect_message"] {
		t.Errorf("error message = %q, want the person's sentence %q", rpcErr.Message, refusal["connect_message"])
	}

	_, err = callList(t.Context(), cs)
	_, again := urlElicitation(t, err)
	if again["elicitationId"] != e["elicitationId"] || again["url"] != e["url"] {
		t.Errorf("asking again gave another link: %v, first %v", again, e)
	}

	wantDone(t, alice.OpenLink(t, e["url"].(string)))
	res, err := callList(t.Context(), cs)
	wantRepos(t, res, err)
	wantAliceConnected(t, s)
	if n := asked.Load(); n != 0 {
		t.Errorf("the server sent %d elicitation requests to a 2025-11-25 client", n)
	}
}

// The TypeScript SDK (@modelcontextprotocol/sdk 1.32.2, MCP 2025-11-25) as the client, run
// through Node: it receives the -32042 error as a typed UrlElicitationRequiredError and reports
// the link; the test, as alice, opens it and connects, then tells the script to call again.
func TestMCPTypeScriptClient(t *testing.T) {
	script := nodeClient(t)
	s := newMCPStack(t)
	alice := s.alice()
	token := alice.AgentToken(t)
	refusal := s.Refusal(t, token)

	cmd := exec.CommandContext(t.Context(), "node", script, s.MCPURL, token)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("node client: %v\n%s", err, stderr.String())
		}
	}()

	var events []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var ev struct {
			Event             string           `json:"event"`
			ProtocolVersion   string           `json:"protocolVersion"`
			Code              int              `json:"code"`
			Message           string           `json:"message"`
			Elicitations      []map[string]any `json:"elicitations"`
			IsError           bool             `json:"isError"`
			StructuredContent json.RawMessage  `json:"structuredContent"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("node client said %q: %v", sc.Text(), err)
		}
		events = append(events, ev.Event)
		switch ev.Event {
		case "connected":
			if ev.ProtocolVersion != latchkey.ProtocolURLElicitationError {
				t.Errorf("negotiated MCP %s, want %s", ev.ProtocolVersion, latchkey.ProtocolURLElicitationError)
			}
		case "url_elicitation_required":
			if ev.Code != -32042 || len(ev.Elicitations) != 1 {
				t.Fatalf("node client: %s", sc.Text())
			}
			wantElicitation(t, ev.Elicitations[0], refusal)
			wantDone(t, alice.OpenLink(t, ev.Elicitations[0]["url"].(string)))
			if _, err := io.WriteString(stdin, "retry\n"); err != nil {
				t.Fatal(err)
			}
		case "result":
			if ev.IsError {
				t.Fatalf("tool error: %s", sc.Text())
			}
			wantJSON(t, ev.StructuredContent)
		default:
			t.Fatalf("node client: %s\n%s", sc.Text(), stderr.String())
		}
	}
	if want := []string{"connected", "url_elicitation_required", "result"}; !slices.Equal(events, want) {
		t.Errorf("events = %v, want %v\n%s", events, want, stderr.String())
	}
	wantAliceConnected(t, s)
}

// A requestState is good only for the person it was issued to, unedited, and briefly. Each
// refusal is a JSON-RPC invalid-params error; the tool does not run and nothing is connected.
func TestMCPRequestStateRefused(t *testing.T) {
	s := newMCPStack(t)
	alice, mallory := s.alice(), s.mallory()
	aliceToken, malloryToken := alice.AgentToken(t), mallory.AgentToken(t)
	aliceCS := s.GoClient(t, aliceToken, mcpClientOpts{version: latchkey.ProtocolInputRequired, noRetry: true})
	malloryCS := s.GoClient(t, malloryToken, mcpClientOpts{version: latchkey.ProtocolInputRequired, noRetry: true})

	first, err := callList(t.Context(), aliceCS)
	if err != nil || !first.NeedsInput() || first.RequestState == "" {
		t.Fatalf("first call = %+v, %v; want input_required with a requestState", first, err)
	}
	link := first.InputRequests[latchkey.InputKey].(*sdk.ElicitParams).URL

	retry := func(cs *sdk.ClientSession, state string) (*sdk.CallToolResult, error) {
		return cs.CallTool(t.Context(), &sdk.CallToolParams{
			Name:           repohelper.ToolName,
			Arguments:      map[string]any{},
			InputResponses: sdk.InputResponseMap{latchkey.InputKey: &sdk.ElicitResult{Action: "accept"}},
			RequestState:   state,
		})
	}
	refused := func(t *testing.T, res *sdk.CallToolResult, err error, why string) {
		t.Helper()
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, why) {
			t.Fatalf("retry = %+v, %v; want invalid params: %s", res, err, why)
		}
	}

	// Alice connects, so a state that were accepted would now return her repositories.
	wantDone(t, alice.OpenLink(t, link))

	t.Run("another person replays it", func(t *testing.T) {
		res, err := retry(malloryCS, first.RequestState)
		refused(t, res, err, "another person")
	})
	t.Run("edited", func(t *testing.T) {
		res, err := retry(aliceCS, flipStateByte(t, first.RequestState))
		refused(t, res, err, "not authentic")
	})
	t.Run("expired", func(t *testing.T) {
		second, err := callList(t.Context(), malloryCS) // mallory's own, fresh state
		if err != nil || !second.NeedsInput() {
			t.Fatalf("mallory's call = %+v, %v; want input_required", second, err)
		}
		s.Clock.Advance(latchkey.DefaultStateTTL)
		res, err := retry(malloryCS, second.RequestState)
		refused(t, res, err, "expired")
	})
	if cs := s.Connections(stack.MalloryEmail); len(cs) != 0 {
		t.Errorf("mallory has %d connections, want none", len(cs))
	}

	// None of that touched alice's connection: a fresh call of hers runs with her GitHub token.
	res, err := callList(t.Context(), aliceCS)
	wantRepos(t, res, err)
}

// flipStateByte edits one byte inside a sealed requestState, keeping it well-formed.
func flipStateByte(t *testing.T, state string) string {
	t.Helper()
	prefix, body, ok := strings.Cut(state, ".")
	if !ok {
		t.Fatalf("requestState %q has no version prefix", state)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x01
	return prefix + "." + base64.RawURLEncoding.EncodeToString(raw)
}

// wantAliceConnected checks what ended up stored: one GitHub connection for alice, named as
// GitHub names her account.
func wantAliceConnected(t *testing.T, s *mcpStack) {
	t.Helper()
	cs := s.Connections(stack.AliceEmail)
	if len(cs) != 1 || cs[0].AccountName != stack.AliceLogin || cs[0].Connector != s.Connector.Key {
		t.Errorf("alice's connections = %+v, want one to %s as %s", cs, s.Connector.Key, stack.AliceLogin)
	}
}

// The walkthrough's client, `repo-helper call`, run as a program: it prints an address to sign
// in, the person signs in; it prints the connect link, the person connects and presses Enter; it
// prints the repositories. Here the agent is Repo Helper itself (the token is issued to it), as
// in `make run`.
func TestMCPWalkthroughClient(t *testing.T) {
	testenv.SkipShort(t, "the go command to build repo-helper, which it runs as a program")
	goTool, err := exec.LookPath("go")
	needTool(t, "the go command", err)
	bin := t.TempDir() + "/repo-helper"
	build := exec.CommandContext(t.Context(), goTool, "build", "-o", bin, "latchkey.dev/latchkey/examples/repohelper/cmd/repo-helper")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building repo-helper: %v\n%s", err, out)
	}
	for _, version := range []string{latchkey.ProtocolInputRequired, latchkey.ProtocolURLElicitationError} {
		t.Run(version, func(t *testing.T) {
			s := newMCPStack(t)
			alice := s.alice()
			cmd := exec.CommandContext(t.Context(), bin, "call",
				"-issuer", s.Issuer, "-mcp", s.MCPURL, "-redirect", s.ServerRedirect, "-protocol", version)
			cmd.Env = append(cmd.Environ(), "REPO_HELPER_CLIENT_ID="+mcpServerClientID, "REPO_HELPER_CLIENT_SECRET="+mcpServerSecret)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var addresses []string
			var printed strings.Builder
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				line := sc.Text()
				printed.WriteString(line + "\n")
				addr, ok := strings.CutPrefix(line, "    http")
				if !ok {
					continue
				}
				addresses = append(addresses, "http"+addr)
				switch len(addresses) {
				case 1: // sign in, which ends at the program's loopback listener
					if pg := alice.walk(t, addresses[0]); !strings.Contains(pg.Body, "Signed in") {
						t.Fatalf("sign-in ended at %s: %s", pg.URL, pg.Text())
					}
				case 2: // the connect link
					wantDone(t, alice.OpenLink(t, addresses[1]))
					io.WriteString(stdin, "\n")
				}
			}
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("repo-helper call: %v\n%s%s", err, printed.String(), stderr.String())
			}
			out := printed.String()
			for _, want := range []string{
				"Connected to Repo Helper with MCP " + version,
				"Repo Helper says: Open this link to connect your GitHub account and let Repo Helper use it.",
				"Repositories of " + stack.AliceLogin + " at GitHub:",
				stack.AliceLogin + "/diary",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if len(addresses) != 2 || !strings.HasPrefix(addresses[1], s.Issuer+"/account/services/link/") {
				t.Errorf("addresses shown = %v, want a sign-in address and one connect link", addresses)
			}
			wantAliceConnected(t, s)
		})
	}
}
