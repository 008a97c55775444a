// Strict third-party OAuth clients against Latchkey, driven by test/interop/interop_test.go.
//
// Usage: node flow.mjs <issuer> <redirect-base>
//
// Every step prints one JSON line on stdout: {"pass", "step", "ok", ...what it saw}. When a
// person is needed the script prints {"step":"authorize","url":…} and reads the address the
// browser ended at (the authorization response) as one line on stdin; the Go test plays the
// person. The libraries run with their defaults, which are strict; the one relaxation is
// allowInsecureRequests, because the test server is plain http on 127.0.0.1 and both libraries
// refuse http unless told. Nothing here checks what the libraries already check: a step is ok
// only when the library accepted the server's answer.
//
// Tokens are never printed; only their prefixes (lk_at_, lk_rt_), which is what the Go side
// needs to see that opaque, scanner-recognisable tokens came back.

import * as readline from 'node:readline';
import * as oauth from 'oauth4webapi';
import * as client from 'openid-client';
import * as jose from 'jose';

const [issuerArg, redirectBase] = process.argv.slice(2);
if (!issuerArg || !redirectBase) {
  console.error('usage: node flow.mjs <issuer> <redirect-base>');
  process.exit(2);
}
const issuer = new URL(issuerArg);
const insecure = { [oauth.allowInsecureRequests]: true };

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function describe(err) {
  return {
    name: err?.name,
    code: err?.code,
    message: err?.message,
    error: err?.error,
    error_description: err?.error_description,
    status: err?.status,
    cause: err?.cause instanceof Error ? err.cause.message : undefined,
  };
}

// step runs one step and reports what fn returns; a failure is reported and ends the script.
async function step(pass, name, fn) {
  try {
    const out = (await fn()) ?? {};
    // Members whose names start with _ are for the script itself (tokens, objects), not the log.
    const report = Object.fromEntries(Object.entries(out).filter(([k]) => !k.startsWith('_')));
    emit({ pass, step: name, ok: true, ...report });
    return out;
  } catch (err) {
    emit({ pass, step: name, ok: false, ...describe(err) });
    throw new Error(`${pass}/${name} failed`);
  }
}

// refused runs a step that must be refused (by the library or by the server); it is ok when
// fn throws, and the error says how.
async function refused(pass, name, fn) {
  let err;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  if (err === undefined) {
    emit({ pass, step: name, ok: false, message: 'expected a refusal, got success' });
    throw new Error(`${pass}/${name} was not refused`);
  }
  emit({ pass, step: name, ok: true, refused: true, ...describe(err) });
}

// browser hands the authorization URL to the person and waits for where they ended up;
// decision is what the person presses on the consent page, if one is shown.
async function browser(pass, url, name = 'authorize', decision = 'allow') {
  emit({ pass, step: name, ok: true, url: url.href, decision });
  const { value, done } = await lines.next();
  if (done || !value) throw new Error('stdin closed before the authorization response arrived');
  return new URL(value.trim());
}

function prefix(token) {
  if (typeof token !== 'string') return undefined;
  const m = /^([a-z]+_[a-z]+_)/.exec(token);
  return m ? m[1] : '(none)';
}

function withParam(url, name, value) {
  const u = new URL(url.href);
  if (value === undefined) u.searchParams.delete(name);
  else u.searchParams.set(name, value);
  return u;
}

// ---- pass 1: oauth4webapi, every step by hand --------------------------------------------

async function oauth4webapiPass() {
  const pass = 'oauth4webapi';
  const redirectUri = redirectBase + '/oauth4webapi';

  // Discovery both ways: OpenID Connect (issuer + /.well-known/openid-configuration) and
  // RFC 8414 path insertion (/.well-known/oauth-authorization-server + issuer path).
  // processDiscoveryResponse requires the document's issuer to equal the issuer asked for.
  const as = await step(pass, 'discovery-oidc', async () => {
    const as = await oauth.processDiscoveryResponse(
      issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oidc', ...insecure }));
    return {
      issuer: as.issuer,
      code_challenge_methods_supported: as.code_challenge_methods_supported,
      authorization_response_iss_parameter_supported: as.authorization_response_iss_parameter_supported,
      registration_endpoint: as.registration_endpoint,
      id_token_signing_alg_values_supported: as.id_token_signing_alg_values_supported,
      _as: as,
    };
  }).then((o) => o._as);
  await step(pass, 'discovery-oauth2', async () => {
    const as2 = await oauth.processDiscoveryResponse(
      issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
    return { issuer: as2.issuer, same_token_endpoint: as2.token_endpoint === as.token_endpoint };
  });

  // Dynamic registration: a public client (PKCE is its only proof) and a confidential one,
  // which plays a resource server that introspects.
  const pub = await step(pass, 'register-public', async () => {
    const response = await oauth.dynamicClientRegistrationRequest(as, {
      client_name: 'Interop public client (oauth4webapi)',
      redirect_uris: [redirectUri],
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    }, insecure);
    const cacheControl = response.headers.get('cache-control');
    const reg = await oauth.processDynamicClientRegistrationResponse(response);
    return {
      cache_control: cacheControl,
      client_id: reg.client_id,
      has_secret: reg.client_secret !== undefined,
      token_endpoint_auth_method: reg.token_endpoint_auth_method,
      has_registration_access_token: typeof reg.registration_access_token === 'string',
    };
  });
  const conf = await step(pass, 'register-confidential', async () => {
    const reg = await oauth.processDynamicClientRegistrationResponse(
      await oauth.dynamicClientRegistrationRequest(as, {
        client_name: 'Interop resource server (oauth4webapi)',
        token_endpoint_auth_method: 'client_secret_basic',
        grant_types: ['client_credentials'],
        response_types: [],
      }, insecure));
    return {
      client_id: reg.client_id,
      has_secret: typeof reg.client_secret === 'string',
      secret_prefix: prefix(reg.client_secret),
      client_secret_expires_at: reg.client_secret_expires_at,
      token_endpoint_auth_method: reg.token_endpoint_auth_method,
      _secret: reg.client_secret,
    };
  });
  const confSecret = conf._secret;
  const publicClient = { client_id: pub.client_id };
  const confClient = { client_id: conf.client_id };
  const confAuth = oauth.ClientSecretBasic(confSecret);

  // The person says no. The error comes back on the redirect with state and iss; the library
  // checks both before it reports the error, so a well-formed refusal is an
  // AuthorizationResponseError and anything else would be an OperationProcessingError.
  {
    const state = oauth.generateRandomState();
    const u = new URL(as.authorization_endpoint);
    u.search = new URLSearchParams({
      response_type: 'code', client_id: publicClient.client_id, redirect_uri: redirectUri,
      scope: 'openid', state,
      code_challenge: await oauth.calculatePKCECodeChallenge(oauth.generateRandomCodeVerifier()),
      code_challenge_method: 'S256',
    }).toString();
    const denied = await browser(pass, u, 'authorize-deny', 'deny');
    await refused(pass, 'auth-response-denied', async () =>
      oauth.validateAuthResponse(as, publicClient, denied, state));
  }

  // Authorization code with PKCE S256, state and nonce; max_age makes the library insist on
  // auth_time in the ID token.
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const nonce = oauth.generateRandomNonce();
  const maxAge = 600;
  const authURL = new URL(as.authorization_endpoint);
  authURL.search = new URLSearchParams({
    response_type: 'code',
    client_id: publicClient.client_id,
    redirect_uri: redirectUri,
    scope: 'openid email profile',
    state,
    nonce,
    max_age: String(maxAge),
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
  }).toString();
  const callback = await browser(pass, authURL);

  // The authorization response is checked for iss (RFC 9207) before anything else. The
  // library refuses a response with another issuer, and — because our metadata says
  // authorization_response_iss_parameter_supported — one without iss; so the genuine
  // response below passes only because our iss is exactly the discovered issuer.
  await refused(pass, 'auth-response-wrong-iss', async () =>
    oauth.validateAuthResponse(as, publicClient, withParam(callback, 'iss', 'https://attacker.example/team/demo'), state));
  await refused(pass, 'auth-response-missing-iss', async () =>
    oauth.validateAuthResponse(as, publicClient, withParam(callback, 'iss', undefined), state));
  await refused(pass, 'auth-response-wrong-state', async () =>
    oauth.validateAuthResponse(as, publicClient, callback, oauth.generateRandomState()));
  const params = await step(pass, 'auth-response', async () => {
    const params = oauth.validateAuthResponse(as, publicClient, callback, state);
    return { iss: callback.searchParams.get('iss'), code_prefix: prefix(params.get('code')), _params: params };
  }).then((o) => o._params);

  const tokens = await step(pass, 'token-code', async () => {
    const response = await oauth.authorizationCodeGrantRequest(as, publicClient, oauth.None(), params, redirectUri, verifier, insecure);
    const cacheControl = response.headers.get('cache-control');
    const res = await oauth.processAuthorizationCodeResponse(as, publicClient, response,
      { expectedNonce: nonce, maxAge, requireIdToken: true });
    const claims = oauth.getValidatedIdTokenClaims(res);
    return {
      cache_control: cacheControl,
      token_type: res.token_type,
      access_prefix: prefix(res.access_token),
      refresh_prefix: prefix(res.refresh_token),
      expires_in: res.expires_in,
      scope: res.scope,
      id_token: { iss: claims.iss, aud: claims.aud, sub: claims.sub, email: claims.email, name: claims.name, has_auth_time: typeof claims.auth_time === 'number', nonce_matches: claims.nonce === nonce },
      _res: res,
    };
  });
  const sub = tokens.id_token.sub;
  const first = tokens._res;

  // The library takes the ID token's claims from the token endpoint over TLS without checking
  // the signature; check it here against the published keys, as a relying party that keeps ID
  // tokens would.
  await step(pass, 'id-token-signature', async () => {
    const jwks = jose.createRemoteJWKSet(new URL(as.jwks_uri));
    const { payload, protectedHeader } = await jose.jwtVerify(first.id_token, jwks, {
      issuer: as.issuer, audience: publicClient.client_id,
    });
    return { alg: protectedHeader.alg, kid: protectedHeader.kid, sub: payload.sub };
  });

  await step(pass, 'userinfo', async () => {
    const info = await oauth.processUserInfoResponse(as, publicClient, sub,
      await oauth.userInfoRequest(as, publicClient, first.access_token, insecure));
    return { sub: info.sub, email: info.email, name: info.name };
  });

  const refreshed = await step(pass, 'refresh', async () => {
    const response = await oauth.refreshTokenGrantRequest(as, publicClient, oauth.None(), first.refresh_token, insecure);
    const cacheControl = response.headers.get('cache-control');
    const res = await oauth.processRefreshTokenResponse(as, publicClient, response);
    return {
      cache_control: cacheControl,
      access_prefix: prefix(res.access_token),
      refresh_prefix: prefix(res.refresh_token),
      access_rotated: res.access_token !== first.access_token,
      refresh_rotated: res.refresh_token !== first.refresh_token,
      scope: res.scope,
      _res: res,
    };
  }).then((o) => o._res);

  await step(pass, 'client-credentials', async () => {
    const res = await oauth.processClientCredentialsResponse(as, confClient,
      await oauth.clientCredentialsGrantRequest(as, confClient, confAuth, {}, insecure));
    return { token_type: res.token_type, access_prefix: prefix(res.access_token), has_refresh: res.refresh_token !== undefined };
  });

  // People's tokens are introspected by the resource server the admin declared; a
  // self-registered client may only introspect its own.
  const rsClient = { client_id: process.env.INTEROP_RS_ID };
  const rsAuth = oauth.ClientSecretBasic(process.env.INTEROP_RS_SECRET);
  const introspect = async (token, hint) => oauth.processIntrospectionResponse(as, rsClient,
    await oauth.introspectionRequest(as, rsClient, rsAuth, token,
      { additionalParameters: { token_type_hint: hint }, ...insecure }));

  await step(pass, 'introspect-active', async () => {
    const i = await introspect(refreshed.access_token, 'access_token');
    return { active: i.active, client_id: i.client_id, sub: i.sub, iss: i.iss, token_type: i.token_type, scope: i.scope, sub_matches: i.sub === sub, has_exp: typeof i.exp === 'number' };
  });

  // A public client revokes its own token (RFC 7009 with client authentication none).
  await step(pass, 'revoke-access', async () => {
    await oauth.processRevocationResponse(
      await oauth.revocationRequest(as, publicClient, oauth.None(), refreshed.access_token,
        { additionalParameters: { token_type_hint: 'access_token' }, ...insecure }));
    return {};
  });
  await step(pass, 'introspect-revoked', async () => {
    const i = await introspect(refreshed.access_token, 'access_token');
    return { active: i.active, keys: Object.keys(i).sort() };
  });
  await refused(pass, 'userinfo-revoked', async () =>
    oauth.processUserInfoResponse(as, publicClient, sub,
      await oauth.userInfoRequest(as, publicClient, refreshed.access_token, insecure)));

  // Revoking the refresh token ends the grant: the next refresh is invalid_grant.
  await step(pass, 'revoke-refresh', async () => {
    await oauth.processRevocationResponse(
      await oauth.revocationRequest(as, publicClient, oauth.None(), refreshed.refresh_token,
        { additionalParameters: { token_type_hint: 'refresh_token' }, ...insecure }));
    return {};
  });
  await refused(pass, 'refresh-after-revoke', async () =>
    oauth.processRefreshTokenResponse(as, publicClient,
      await oauth.refreshTokenGrantRequest(as, publicClient, oauth.None(), refreshed.refresh_token, insecure)));
}

// ---- pass 2: openid-client, the high-level API -------------------------------------------

async function openidClientPass() {
  const pass = 'openid-client';
  const redirectUri = redirectBase + '/openid-client';
  const opts = { algorithm: 'oauth2', execute: [client.allowInsecureRequests] };

  // Discovery (RFC 8414 path-insertion form) and registration in one call; a confidential
  // client that authenticates with client_secret_post, openid-client's default.
  const config = await step(pass, 'discovery-register', async () => {
    const config = await client.dynamicClientRegistration(issuer, {
      client_name: 'Interop confidential client (openid-client)',
      redirect_uris: [redirectUri],
      token_endpoint_auth_method: 'client_secret_post',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    }, undefined, opts);
    const md = config.clientMetadata();
    return {
      issuer: config.serverMetadata().issuer,
      client_id: md.client_id,
      has_secret: typeof md.client_secret === 'string',
      token_endpoint_auth_method: md.token_endpoint_auth_method,
      _config: config,
    };
  }).then((o) => o._config);
  const clientId = config.clientMetadata().client_id;

  // prompt=none before the person has allowed this client: the server answers at once with
  // consent_required, carrying state and iss, which the library checks before the error.
  {
    const state = client.randomState();
    const u = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri, scope: 'openid email', state, prompt: 'none',
      code_challenge: await client.calculatePKCECodeChallenge(client.randomPKCECodeVerifier()),
      code_challenge_method: 'S256',
    });
    const answer = await browser(pass, u, 'authorize-prompt-none');
    await refused(pass, 'code-grant-consent-required', async () =>
      client.authorizationCodeGrant(config, answer, { pkceCodeVerifier: client.randomPKCECodeVerifier(), expectedState: state }));
  }

  const verifier = client.randomPKCECodeVerifier();
  const state = client.randomState();
  const nonce = client.randomNonce();
  const authURL = client.buildAuthorizationUrl(config, {
    redirect_uri: redirectUri,
    scope: 'openid email',
    state,
    nonce,
    code_challenge: await client.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
  });
  const callback = await browser(pass, authURL);
  const checks = { pkceCodeVerifier: verifier, expectedState: state, expectedNonce: nonce };

  // openid-client checks iss before it sends the code anywhere, so these do not spend it.
  await refused(pass, 'code-grant-wrong-iss', async () =>
    client.authorizationCodeGrant(config, withParam(callback, 'iss', 'https://attacker.example/team/demo'), checks));
  await refused(pass, 'code-grant-missing-iss', async () =>
    client.authorizationCodeGrant(config, withParam(callback, 'iss', undefined), checks));

  const tokens = await step(pass, 'code-grant', async () => {
    const t = await client.authorizationCodeGrant(config, callback, checks);
    const claims = t.claims();
    return {
      token_type: t.token_type,
      access_prefix: prefix(t.access_token),
      refresh_prefix: prefix(t.refresh_token),
      scope: t.scope,
      id_token: { iss: claims.iss, aud: claims.aud, sub: claims.sub, email: claims.email, nonce_matches: claims.nonce === nonce },
      _t: t,
    };
  }).then((o) => o._t);
  const sub = tokens.claims().sub;

  await step(pass, 'userinfo', async () => {
    const info = await client.fetchUserInfo(config, tokens.access_token, sub);
    return { sub: info.sub, email: info.email };
  });

  const refreshed = await step(pass, 'refresh', async () => {
    const t = await client.refreshTokenGrant(config, tokens.refresh_token);
    return {
      access_prefix: prefix(t.access_token),
      refresh_rotated: t.refresh_token !== tokens.refresh_token,
      access_rotated: t.access_token !== tokens.access_token,
      _t: t,
    };
  }).then((o) => o._t);

  // The client introspects its own token (it is confidential, so it may).
  await step(pass, 'introspect-active', async () => {
    const i = await client.tokenIntrospection(config, refreshed.access_token);
    return { active: i.active, client_id: i.client_id, sub_matches: i.sub === sub, iss: i.iss };
  });

  // Revoking the refresh token ends the whole grant (RFC 7009 §2.1: the server may, and
  // Latchkey does, revoke the access tokens of the same grant).
  await step(pass, 'revoke-refresh', async () => {
    await client.tokenRevocation(config, refreshed.refresh_token, { token_type_hint: 'refresh_token' });
    return {};
  });
  await step(pass, 'introspect-after-revoke', async () => {
    const i = await client.tokenIntrospection(config, refreshed.access_token);
    return { active: i.active };
  });
  await refused(pass, 'refresh-after-revoke', async () =>
    client.refreshTokenGrant(config, refreshed.refresh_token));
}

try {
  await oauth4webapiPass();
  await openidClientPass();
  emit({ step: 'done', ok: true });
  process.exit(0);
} catch (err) {
  console.error(err?.stack ?? String(err));
  process.exit(1);
}
