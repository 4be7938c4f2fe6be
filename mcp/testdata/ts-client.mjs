// The TypeScript SDK client against sync: OAuth (ts-auth.mjs), then the
// tools.
// Usage: node ts-client.mjs <mcp url> <consent helper url> [client metadata url]
// With a client metadata URL the client identifies itself by that URL (a
// client ID metadata document) instead of registering dynamically.
import { Provider, connect } from "./ts-auth.mjs";

const [serverUrl, helperUrl, metadataUrl] = process.argv.slice(2);
const provider = new Provider(helperUrl, metadataUrl);
const client = await connect(serverUrl, provider);
// The SDK's callTool checks each result's structured content against the
// tool's output schema (listTools caches them) and throws on a mismatch:
// every tool called here is one whose schema the SDK accepted.
const called = new Set();
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args || {} });
  called.add(name);
  if (r.isError) throw new Error(name + " failed: " + r.content.map(c => c.text).join("\n"));
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
// The other tools' results, through the same check.
await call("sync_invoke_action", { action: "help", params: {} });
await call("sync_send_message", { body: "from typescript too" });
await call("sync_search", { q: "typescript" });
await call("sync_eval_cel", { expr: "has(state._shared.note)" });
await call("sync_help");
await call("sync_help", { key: "guide" });
await call("sync_wait", { condition: "true", timeout_ms: 1000 });
await call("sync_delete_view", { id: "has_note" });
await call("sync_delete_action", { id: "note" });
await call("sync_disembody");
console.log(JSON.stringify({ tools: tools.tools.length, note: ctx.state._shared.note, view: ctx.views.has_note,
  agent: ctx._session.agent, refresh: refreshed,
  client_id: provider.info && provider.info.client_id, called: [...called].sort() }));
await client.close();
