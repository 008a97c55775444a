// An MCP client built on the TypeScript SDK (@modelcontextprotocol/sdk, protocol 2025-11-25),
// driven by test/e2e/mcp_test.go:
//
//   node client.mjs <mcp-url> <access-token> [tool]
//
// It connects with the bearer token, declaring URL elicitation, and calls the tool (default
// list_repositories). It reports on stdout, one JSON object a line:
//
//   {"event":"connected","protocolVersion":"2025-11-25","server":{...}}
//   {"event":"url_elicitation_required","code":-32042,"message":"...","elicitations":[...]}
//   {"event":"result","isError":false,"structuredContent":{...},"content":[...]}
//   {"event":"error","code":...,"message":"..."}
//
// After url_elicitation_required it waits for one line on stdin: "retry" calls the tool again
// (the person has opened the link), anything else or end of input stops. That is how a host
// shows the link and retries once the person says they are done.
import { createInterface } from 'node:readline';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, McpError, UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';

const [url, token, tool = 'list_repositories'] = process.argv.slice(2);
if (!url || !token) {
  console.error('usage: node client.mjs <mcp-url> <access-token> [tool]');
  process.exit(2);
}

const report = (event) => process.stdout.write(JSON.stringify(event) + '\n');

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function nextLine() {
  const { value, done } = await lines.next();
  return done ? null : value.trim();
}

const client = new Client(
  { name: 'latchkey-e2e-typescript', version: '1.0.0' },
  { capabilities: { elicitation: { url: {} } } },
);
// Relayed connect links arrive as -32042 errors, never as requests; one arriving here is
// reported so the test can fail on it.
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  report({ event: 'elicitation_request', params: request.params });
  return { action: 'decline' };
});

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});

let status = 0;
try {
  await client.connect(transport);
  report({ event: 'connected', protocolVersion: transport.protocolVersion, server: client.getServerVersion() });
  for (let attempt = 0; ; attempt++) {
    try {
      const result = await client.callTool({ name: tool, arguments: {} });
      report({ event: 'result', isError: result.isError === true, structuredContent: result.structuredContent, content: result.content });
      break;
    } catch (err) {
      if (!(err instanceof UrlElicitationRequiredError) || attempt >= 5) {
        throw err;
      }
      // err.message carries the SDK's "MCP error -32042: " prefix; data is the wire's.
      report({ event: 'url_elicitation_required', code: err.code, message: err.message, elicitations: err.elicitations });
      if ((await nextLine()) !== 'retry') {
        break;
      }
    }
  }
} catch (err) {
  report({ event: 'error', code: err instanceof McpError ? err.code : null, message: String(err?.message ?? err) });
  status = 1;
} finally {
  await client.close().catch(() => {});
}
process.exit(status);
