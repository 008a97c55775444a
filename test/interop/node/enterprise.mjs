// oauth4webapi, as a strict third-party client, against Latchkey's enterprise features: DPoP
// (RFC 9449) with server nonces, private_key_jwt and client_secret_jwt (RFC 7523 §2.2), and
// pushed authorization requests (RFC 9126). Driven by test/interop/enterprise_test.go, with
// the same conventions as flow.mjs: one JSON line per step, the Go test plays the person when
// a step prints an authorization URL, tokens are never printed.
//
// Usage: node enterprise.mjs <issuer> <redirect-uri>
// Environment: INTEROP_PKJ_ID, INTEROP_PKJ_KEY (the private JWK of that client),
// INTEROP_HS_ID, INTEROP_HS_SECRET (a client_secret_jwt client), INTEROP_RS_ID,
// INTEROP_RS_SECRET (a resource server that introspects).

import * as readline from 'node:readline';
import * as oauth from 'oauth4webapi';
import * as jose from 'jose';

const [issuerArg, redirectUri] = process.argv.slice(2);
const issuer = new URL(issuerArg);
const insecure = { [oauth.allowInsecureRequests]: true };
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const env = process.env;

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function describe(err) {
  return { name: err?.name, code: err?.code, message: err?.message, error: err?.error, error_description: err?.error_description, status: err?.status };
}

async function step(name, fn) {
  try {
    const out = (await fn()) ?? {};
    emit({ pass: 'enterprise', step: name, ok: true, ...Object.fromEntries(Object.entries(out).filter(([k]) => !k.startsWith('_'))) });
    return out;
  } catch (err) {
    emit({ pass: 'enterprise', step: name, ok: false, ...describe(err) });
    throw new Error(`${name} failed`);
  }
}

async function refused(name, fn) {
  let err;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  emit({ pass: 'enterprise', step: name, ok: err !== undefined, refused: err !== undefined, ...describe(err) });
  if (err === undefined) throw new Error(`${name} was not refused`);
}

// withNonce runs a DPoP request, and once more when the server asks for a nonce: the DPoP
// handle has taken the nonce from the DPoP-Nonce header (RFC 9449 §8).
async function withNonce(fn) {
  try {
    return { res: await fn(), retried: false };
  } catch (err) {
    if (!oauth.isDPoPNonceError(err)) throw err;
    return { res: await fn(), retried: true };
  }
}

async function main() {
  const as = await step('discovery', async () => {
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
    return {
      dpop_signing_alg_values_supported: as.dpop_signing_alg_values_supported,
      token_endpoint_auth_methods_supported: as.token_endpoint_auth_methods_supported,
      token_endpoint_auth_signing_alg_values_supported: as.token_endpoint_auth_signing_alg_values_supported,
      pushed_authorization_request_endpoint: as.pushed_authorization_request_endpoint,
      _as: as,
    };
  }).then((o) => o._as);

  const jwk = JSON.parse(env.INTEROP_PKJ_KEY);
  const privateKey = { key: await jose.importJWK(jwk, 'ES256'), kid: jwk.kid };
  const pkj = { client_id: env.INTEROP_PKJ_ID };
  const pkjAuth = oauth.PrivateKeyJwt(privateKey);
  const keyPair = await oauth.generateKeyPair('ES256');
  const jkt = await jose.calculateJwkThumbprint(await jose.exportJWK(keyPair.publicKey));
  const dpop = oauth.DPoP(pkj, keyPair);

  // client_credentials, authenticated with private_key_jwt, bound with DPoP; the Project
  // requires nonces, so the first answer is use_dpop_nonce and the library signs again.
  const cc = await step('client-credentials-dpop', async () => {
    const { res, retried } = await withNonce(async () => oauth.processClientCredentialsResponse(as, pkj,
      await oauth.clientCredentialsGrantRequest(as, pkj, pkjAuth, {}, { DPoP: dpop, ...insecure })));
    return { token_type: res.token_type, nonce_retry: retried, _res: res };
  }).then((o) => o._res);

  const rs = { client_id: env.INTEROP_RS_ID };
  const rsAuth = oauth.ClientSecretBasic(env.INTEROP_RS_SECRET);
  await step('introspect-cnf', async () => {
    const i = await oauth.processIntrospectionResponse(as, rs, await oauth.introspectionRequest(as, rs, rsAuth, cc.access_token, insecure));
    return { active: i.active, token_type: i.token_type, jkt_matches: i.cnf?.jkt === jkt };
  });

  // client_secret_jwt: HS256 under the client secret, which is never sent.
  await step('client-secret-jwt', async () => {
    const hs = { client_id: env.INTEROP_HS_ID };
    const res = await oauth.processClientCredentialsResponse(as, hs,
      await oauth.clientCredentialsGrantRequest(as, hs, oauth.ClientSecretJwt(env.INTEROP_HS_SECRET), {}, insecure));
    return { token_type: res.token_type };
  });

  // A pushed authorization request, authenticated with private_key_jwt and carrying a DPoP
  // proof, which binds the code to the key (RFC 9449 §10.1); the browser gets only client_id
  // and request_uri.
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const par = await step('pushed-authorization-request', async () => {
    const challenge = await oauth.calculatePKCECodeChallenge(verifier);
    const { res, retried } = await withNonce(async () => oauth.processPushedAuthorizationResponse(as, pkj,
      await oauth.pushedAuthorizationRequest(as, pkj, pkjAuth, {
        response_type: 'code', redirect_uri: redirectUri, scope: 'openid', state,
        code_challenge: challenge, code_challenge_method: 'S256',
      }, { DPoP: dpop, ...insecure })));
    return { request_uri_prefix: res.request_uri.slice(0, 34), expires_in: res.expires_in, nonce_retry: retried, _res: res };
  }).then((o) => o._res);
  const authURL = new URL(as.authorization_endpoint);
  authURL.search = new URLSearchParams({ client_id: pkj.client_id, request_uri: par.request_uri }).toString();
  emit({ pass: 'enterprise', step: 'authorize', ok: true, url: authURL.href, decision: 'allow' });
  const { value } = await lines.next();
  const callback = new URL(value.trim());
  const params = oauth.validateAuthResponse(as, pkj, callback, state);

  // Whoever intercepts the code holds another key: the code is refused to them, and not spent.
  const thief = oauth.DPoP(pkj, await oauth.generateKeyPair('ES256'));
  await refused('token-code-other-key-refused', async () => withNonce(async () => oauth.processAuthorizationCodeResponse(as, pkj,
    await oauth.authorizationCodeGrantRequest(as, pkj, pkjAuth, params, redirectUri, verifier, { DPoP: thief, ...insecure }))));

  const tokens = await step('token-code-dpop', async () => {
    const { res, retried } = await withNonce(async () => oauth.processAuthorizationCodeResponse(as, pkj,
      await oauth.authorizationCodeGrantRequest(as, pkj, pkjAuth, params, redirectUri, verifier, { DPoP: dpop, ...insecure })));
    return { token_type: res.token_type, has_refresh: typeof res.refresh_token === 'string', nonce_retry: retried, _res: res };
  }).then((o) => o._res);

  await step('userinfo-dpop', async () => {
    const { res } = await withNonce(async () => oauth.processUserInfoResponse(as, pkj, oauth.skipSubjectCheck,
      await oauth.userInfoRequest(as, pkj, tokens.access_token, { DPoP: dpop, ...insecure })));
    return { has_sub: typeof res.sub === 'string' };
  });
  // Without the key the token is nothing: as a bearer token, userinfo refuses it.
  await refused('userinfo-bearer-refused', async () => oauth.processUserInfoResponse(as, pkj, oauth.skipSubjectCheck,
    await oauth.userInfoRequest(as, pkj, tokens.access_token, insecure)));

  await step('refresh-dpop', async () => {
    const { res } = await withNonce(async () => oauth.processRefreshTokenResponse(as, pkj,
      await oauth.refreshTokenGrantRequest(as, pkj, pkjAuth, tokens.refresh_token, { DPoP: dpop, ...insecure })));
    return { token_type: res.token_type, refresh_rotated: res.refresh_token !== tokens.refresh_token };
  });

  // The request_uri was spent: asking again shows the person a page, not a code.
  emit({ pass: 'enterprise', step: 'authorize-reused', ok: true, url: authURL.href, decision: 'allow' });
  await lines.next();
}

try {
  await main();
  emit({ step: 'done', ok: true });
  process.exit(0);
} catch (err) {
  console.error(err?.stack ?? String(err));
  process.exit(1);
}
