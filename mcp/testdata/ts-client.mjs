// The TypeScript SDK client against sync: OAuth (discovery, dynamic
// registration, PKCE with resource, consent, token), then the tools.
// Usage: node ts-client.mjs <mcp url> <consent helper url> [client metadata url]
// With a client metadata URL the client identifies itself by that URL (a
// client ID metadata document) instead of registering dynamically.
// The consent helper (run by the Go test) performs the consent step in the
// signed-in user's browser session, on the real pages, and returns the code.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [serverUrl, helperUrl, metadataUrl] = process.argv.slice(2);
const redirect = "http://localhost:1/callback";

class Provider {
  get redirectUrl() { return redirect; }
  get clientMetadataUrl() { return metadataUrl; }
  get clientMetadata() {
    return { client_name: "TS SDK test", redirect_uris: [redirect], grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"], token_endpoint_auth_method: "none" };
  }
  state() { return "ts-state-0123456789"; }
  clientInformation() { return this.info; }
  saveClientInformation(info) { this.info = info; }
  tokens() { return this.saved; }
  saveTokens(tokens) { this.saved = tokens; }
  saveCodeVerifier(v) { this.verifier = v; }
  codeVerifier() { return this.verifier; }
  async redirectToAuthorization(url) {
    const res = await fetch(helperUrl + "?url=" + encodeURIComponent(url.toString()));
    if (!res.ok) throw new Error("consent helper: " + res.status + " " + (await res.text()));
    this.code = (await res.json()).code;
  }
}

const provider = new Provider();
const client = new Client({ name: "ts-test", version: "1.0.0" });
let transport = new StreamableHTTPClientTransport(new URL(serverUrl), { authProvider: provider });
try {
  await client.connect(transport);
} catch (e) {
  if (!(e instanceof UnauthorizedError)) throw e;
  await transport.finishAuth(provider.code);
  transport = new StreamableHTTPClientTransport(new URL(serverUrl), { authProvider: provider });
  await client.connect(transport);
}
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args || {} });
  if (r.isError) throw new Error(name + " failed: " + JSON.stringify(r.structuredContent));
  return r.structuredContent;
};
const tools = await client.listTools();
await call("sync_lobby");
await call("sync_create_room", { room: "ts-lab" });
await call("sync_embody", { room: "ts-lab" });
await call("sync_register_action", { id: "note", params: { text: { type: "string" } },
  writes: [{ key: "note", value: "${params.text}" }] });
await call("sync_register_view", { id: "has_note", expr: "has(state._shared.note)" });
await call("sync_invoke_action", { action: "note", params: { text: "from typescript" } });
const ctx = await call("sync_read_context");
// Outlive the access token (the test server issues short ones), then call
// again: the SDK must refresh with its refresh token to get through.
const before = provider.saved && provider.saved.access_token;
await new Promise(r => setTimeout(r, Number(process.env.SYNC_TS_OUTLIVE_MS || 0)));
await call("sync_lobby");
const refreshed = Boolean(provider.saved && provider.saved.access_token && provider.saved.access_token !== before);
console.log(JSON.stringify({ tools: tools.tools.length, note: ctx.state._shared.note, view: ctx.views.has_note,
  agent: ctx._session.agent, refresh: refreshed,
  client_id: provider.info && provider.info.client_id }));
await client.close();
