// Passkeys on the sign-in and account pages (docs/passkeys.md). Served from Latchkey's own
// origin under script-src 'self'; the pages work without it, except for passkeys.
(function () {
  "use strict";

  function fromB64(s) {
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) s += "=";
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out.buffer;
  }
  function toB64(buf) {
    var bytes = new Uint8Array(buf), bin = "";
    for (var i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  // The page gives its sentences in its own language (data-msg-*); English when it does not.
  function msg(el, name, english) { return (el && el.dataset["msg" + name]) || english; }
  var box = document.querySelector("[data-passkey-signin], [data-passkey-enrol]");
  function post(url, body, csrf) {
    var headers = { "Content-Type": "application/json" };
    if (csrf) headers["X-CSRF-Token"] = csrf;
    return fetch(url, { method: "POST", credentials: "same-origin", headers: headers,
      body: JSON.stringify(body || {}) }).then(function (r) {
      return r.json().then(function (j) {
        if (!r.ok) { var e = new Error(j.message || msg(box, "Error", "Something went wrong.")); e.next = j["continue"]; throw e; }
        return j;
      });
    });
  }
  function show(el, text) { el.textContent = text; el.hidden = !text; }
  function credentialJSON(c) {
    var r = c.response, out = { id: c.id, rawId: toB64(c.rawId), type: c.type,
      authenticatorAttachment: c.authenticatorAttachment || undefined,
      clientExtensionResults: c.getClientExtensionResults ? c.getClientExtensionResults() : {},
      response: { clientDataJSON: toB64(r.clientDataJSON) } };
    if (r.attestationObject) {
      out.response.attestationObject = toB64(r.attestationObject);
      out.response.transports = r.getTransports ? r.getTransports() : [];
    } else {
      out.response.authenticatorData = toB64(r.authenticatorData);
      out.response.signature = toB64(r.signature);
      if (r.userHandle) out.response.userHandle = toB64(r.userHandle);
    }
    return out;
  }
  var supported = !!(window.PublicKeyCredential && navigator.credentials);

  // Sign-in: the autofill of the email field where the browser offers it (conditional
  // mediation), and the button everywhere.
  var signin = document.querySelector("[data-passkey-signin]");
  if (signin && supported) {
    var button = document.getElementById("passkey-button");
    var status = document.getElementById("passkey-status");
    var needs = document.getElementById("passkey-needs-script");
    if (needs) needs.hidden = true;
    button.hidden = false;
    var pending = null;
    // finishing: a credential is being sent. The autofill request and a press of the button
    // can both be answered at once; only the first one signs in, or the browser would hold
    // the second session while the page shows the first one's forms.
    var finishing = false;
    var run = function (mediation) {
      if (finishing) return;
      if (pending) pending.abort();
      var ctrl = new AbortController();
      pending = ctrl;
      return post(signin.dataset.options).then(function (opts) {
        var pk = opts.publicKey;
        pk.challenge = fromB64(pk.challenge);
        (pk.allowCredentials || []).forEach(function (c) { c.id = fromB64(c.id); });
        var req = { publicKey: pk, signal: ctrl.signal };
        if (mediation) req.mediation = mediation;
        return navigator.credentials.get(req);
      }).then(function (cred) {
        if (!cred || ctrl.signal.aborted || finishing) return null;
        finishing = true;
        show(status, "");
        return post(signin.dataset.finish, credentialJSON(cred)).then(function (j) { location.assign(j["continue"]); },
          function (e) { finishing = false; throw e; });
      }).catch(function (e) {
        if (ctrl.signal.aborted || (e && e.name === "AbortError")) return;
        if (e && e.name === "NotAllowedError") { show(status, msg(signin, "Cancelled", "Signing in with a passkey was cancelled.")); return; }
        show(status, e && e.message ? e.message : msg(signin, "Failed", "Signing in with a passkey did not work."));
      });
    };
    button.addEventListener("click", function () { run(""); });
    if (PublicKeyCredential.isConditionalMediationAvailable && document.getElementById("username")) {
      PublicKeyCredential.isConditionalMediationAvailable().then(function (ok) { if (ok) run("conditional"); });
    }
  }

  // Account: add a passkey.
  var enrol = document.querySelector("[data-passkey-enrol]");
  if (enrol && supported) {
    var add = document.getElementById("passkey-add");
    var estatus = document.getElementById("passkey-status");
    document.getElementById("passkey-needs-script").hidden = true;
    add.hidden = false;
    add.addEventListener("click", function () {
      show(estatus, "");
      var csrf = enrol.dataset.csrf;
      post(enrol.dataset.options, {}, csrf).then(function (opts) {
        var pk = opts.publicKey;
        pk.challenge = fromB64(pk.challenge);
        pk.user.id = fromB64(pk.user.id);
        (pk.excludeCredentials || []).forEach(function (c) { c.id = fromB64(c.id); });
        return navigator.credentials.create({ publicKey: pk });
      }).then(function (cred) {
        return post(enrol.dataset.finish, credentialJSON(cred), csrf);
      }).then(function (j) { location.assign(j["continue"]); }).catch(function (e) {
        if (e && e.next) { location.assign(e.next); return; }
        if (e && e.name === "NotAllowedError") { show(estatus, msg(enrol, "Cancelled", "Adding the passkey was cancelled.")); return; }
        if (e && e.name === "InvalidStateError") { show(estatus, msg(enrol, "Duplicate", "This device already holds one of your passkeys.")); return; }
        show(estatus, e && e.message ? e.message : msg(enrol, "Failed", "Adding the passkey did not work."));
      });
    });
  }
})();
