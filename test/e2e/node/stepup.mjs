// An MCP client built on the TypeScript SDK (@modelcontextprotocol/sdk) that authorizes itself
// with the SDK's own OAuth support, driven by test/e2e/mcp_stepup_test.go:
//
//   node stepup.mjs <mcp-url> <client-id> <redirect-uri> <tool>...
//
// The client is registered already (client-id, a public client). Whenever the SDK wants the
// person to authorize (the first 401, and a 403 insufficient_scope: step-up), it reports
//
//   {"event":"authorize","url":"https://…/authorize?…"}
//
// and waits for one line on stdin: the redirect URI the browser came back to. It then finishes
// the authorization and goes on. It calls each tool in turn and reports
//
//   {"event":"result","tool":"…","isError":false,"text":"…"}
//   {"event":"error","tool":"…","message":"…"}
//
// It keeps no refresh token: SDK 1.32 refreshes instead of authorizing again when it holds one,
// which cannot add a scope.
import { createInterface } from 'node:readline';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, clientID, redirectURI, ...tools] = process.argv.slice(2);
if (!url || !clientID || !redirectURI || tools.length === 0) {
  console.error('usage: node stepup.mjs <mcp-url> <client-id> <redirect-uri> <tool>...');
  process.exit(2);
}

const report = (event) => process.stdout.write(JSON.stringify(event) + '\n');
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function nextLine() {
  const { value, done } = await lines.next();
  return done ? null : value.trim();
}

let tokens;
let verifier;
const provider = {
  get redirectUrl() { return redirectURI; },
  get clientMetadata() {
    return { client_name: 'latchkey-e2e-typescript', redirect_uris: [redirectURI], grant_types: ['authorization_code'], token_endpoint_auth_method: 'none' };
  },
  clientInformation: () => ({ client_id: clientID }),
  tokens: () => tokens,
  saveTokens: (t) => { tokens = { access_token: t.access_token, token_type: t.token_type, scope: t.scope }; },
  redirectToAuthorization: (u) => { report({ event: 'authorize', url: u.toString() }); },
  saveCodeVerifier: (v) => { verifier = v; },
  codeVerifier: () => verifier,
};

// authorize has the person authorize in their browser and finishes with the code it brought back.
async function authorize(transport) {
  const back = await nextLine();
  if (!back) throw new Error('no authorization response');
  const code = new URL(back).searchParams.get('code');
  if (!code) throw new Error('authorization refused: ' + back);
  await transport.finishAuth(code);
}

const client = new Client({ name: 'latchkey-e2e-typescript', version: '1.0.0' });
let transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
let status = 0;
try {
  try {
    await client.connect(transport);
  } catch (err) {
    if (!(err instanceof UnauthorizedError)) throw err;
    await authorize(transport);
    transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
    await client.connect(transport);
  }
  for (const tool of tools) {
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await client.callTool({ name: tool, arguments: {} });
        report({ event: 'result', tool, isError: result.isError === true, text: result.content?.[0]?.text ?? '' });
        break;
      } catch (err) {
        if (!(err instanceof UnauthorizedError) || attempt >= 2) {
          report({ event: 'error', tool, message: String(err?.message ?? err) });
          status = 1;
          break;
        }
        await authorize(transport);
      }
    }
  }
} catch (err) {
  report({ event: 'error', message: String(err?.message ?? err) });
  status = 1;
} finally {
  await client.close().catch(() => {});
}
process.exit(status);
