// Passkey ceremonies: the server sends WebAuthn options (base64url), the
// browser's authenticator answers, the answer goes back as JSON.
"use strict";
const b64u = {
  enc(buf) { let s = ""; for (const b of new Uint8Array(buf)) s += String.fromCharCode(b); return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""); },
  dec(str) { str = str.replace(/-/g, "+").replace(/_/g, "/"); while (str.length % 4) str += "="; const bin = atob(str); const out = new Uint8Array(bin.length); for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i); return out.buffer; },
};
async function post(url, body) {
  const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {}), credentials: "same-origin" });
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.message || j.error || ("the server answered " + r.status));
  return j;
}
function creationOptions(o) {
  const p = o.publicKey; p.challenge = b64u.dec(p.challenge); p.user.id = b64u.dec(p.user.id);
  (p.excludeCredentials || []).forEach(c => { c.id = b64u.dec(c.id); });
  return p;
}
function requestOptions(o) {
  const p = o.publicKey; p.challenge = b64u.dec(p.challenge);
  (p.allowCredentials || []).forEach(c => { c.id = b64u.dec(c.id); });
  return p;
}
function attestation(c) {
  return { id: c.id, rawId: b64u.enc(c.rawId), type: c.type, clientExtensionResults: c.getClientExtensionResults(),
    response: { clientDataJSON: b64u.enc(c.response.clientDataJSON), attestationObject: b64u.enc(c.response.attestationObject),
      transports: c.response.getTransports ? c.response.getTransports() : [] } };
}
function assertion(c) {
  return { id: c.id, rawId: b64u.enc(c.rawId), type: c.type, clientExtensionResults: c.getClientExtensionResults(),
    response: { clientDataJSON: b64u.enc(c.response.clientDataJSON), authenticatorData: b64u.enc(c.response.authenticatorData),
      signature: b64u.enc(c.response.signature), userHandle: c.response.userHandle ? b64u.enc(c.response.userHandle) : null } };
}
function explain(e) {
  if (e && e.name === "NotAllowedError") return "The passkey request was cancelled or timed out. Try again.";
  if (e && e.name === "InvalidStateError") return "This device already holds a passkey for this account.";
  return (e && e.message) || String(e);
}
async function register(begin, finish, body) {
  const opts = await post(begin, body);
  const cred = await navigator.credentials.create({ publicKey: creationOptions(opts) });
  return post(finish, attestation(cred));
}
let autofillAbort = null; // the pending conditional (autofill) request
async function signin() {
  if (autofillAbort) { autofillAbort.abort(); autofillAbort = null; }
  const opts = await post("/webauthn/login/begin");
  const cred = await navigator.credentials.get({ publicKey: requestOptions(opts) });
  return post("/webauthn/login/finish", assertion(cred));
}
// Conditional mediation: where the browser supports it, the passkey is
// offered in the username field's autofill once the field is focused.
// sameOrigin keeps a post-sign-in destination on this site (the server
// checks it too): anything that resolves elsewhere goes to the account.
function sameOrigin(next) {
  try {
    if (typeof next !== "string" || !next.startsWith("/") || /[\u0000-\u001f\u007f\\]/.test(next)) return "/account";
    const u = new URL(next, location.origin);
    return u.origin === location.origin ? u.pathname + u.search + u.hash : "/account";
  } catch (e) {
    return "/account";
  }
}
async function autofill(next) {
  if (!window.PublicKeyCredential || !PublicKeyCredential.isConditionalMediationAvailable) return;
  if (!(await PublicKeyCredential.isConditionalMediationAvailable())) return;
  autofillAbort = new AbortController();
  try {
    const opts = await post("/webauthn/autofill/begin");
    const cred = await navigator.credentials.get({ publicKey: requestOptions(opts), mediation: "conditional", signal: autofillAbort.signal });
    await post("/webauthn/autofill/finish", assertion(cred));
    location.assign(sameOrigin(next));
  } catch (e) {
    if (e.name !== "AbortError") console.debug("autofill sign-in:", e);
  }
}
function showCodes(el, codes) {
  el.hidden = false;
  el.querySelector("pre").textContent = codes.join("\n");
}
document.addEventListener("DOMContentLoaded", () => {
  const err = document.getElementById("error");
  const fail = e => { if (err) err.textContent = explain(e); };
  const on = (id, fn) => { const el = document.getElementById(id); if (el) el.addEventListener("click", ev => { ev.preventDefault(); if (err) err.textContent = ""; fn(el).catch(fail); }); };
  on("signin", async el => { await signin(); location.assign(sameOrigin(el.dataset.next || "/account")); });
  const sb = document.getElementById("signin"), field = document.getElementById("autofill");
  if (sb && field) field.addEventListener("focus", () => autofill(sb.dataset.next || "/account"), { once: true });
  on("signup", async el => {
    const res = await register("/webauthn/signup/begin", "/webauthn/signup/finish",
      { username: document.getElementById("username").value, invite: el.dataset.invite });
    document.getElementById("signup-form").hidden = true;
    showCodes(document.getElementById("codes"), res.recovery_codes);
  });
  on("recover", async () => {
    await register("/webauthn/recover/begin", "/webauthn/add/finish",
      { username: document.getElementById("username").value, code: document.getElementById("code").value });
    location.assign("/account");
  });
  on("add-passkey", async () => { await register("/webauthn/add/begin", "/webauthn/add/finish"); location.reload(); });
  // Copy buttons (recovery codes, a new room token): the text of the
  // element they name, with a word that it worked.
  document.addEventListener("click", async ev => {
    const b = ev.target.closest && ev.target.closest("button[data-copy]");
    if (!b) return;
    const src = document.getElementById(b.dataset.copy), said = document.querySelector(`[data-copied="${b.dataset.copy}"]`);
    try {
      await navigator.clipboard.writeText(src.textContent.trim());
      if (said) said.textContent = "Copied.";
    } catch (e) {
      getSelection().selectAllChildren(src);
      if (said) said.textContent = "Selected: copy with your keyboard.";
    }
  });
});
