// The TypeScript SDK client meets every kind of tool error: each must
// reach the model as an isError result whose text says what was wrong and
// what to do, never as an exception from callTool (the SDK validates
// structured content against the tool's output schema whenever it is
// present, and used to throw -32602 for every error).
// Usage: node ts-errors.mjs <mcp url> <consent helper url>
// Prints one JSON line: serverInfo, and per kind the text the model reads.
import { Provider, connect } from "./ts-auth.mjs";

const [serverUrl, helperUrl] = process.argv.slice(2);
const client = await connect(serverUrl, new Provider(helperUrl));
// As every host does: the list is where the SDK learns the output schemas
// it validates results against.
await client.listTools();

// attempt is what a host hands the model for one call.
const attempt = async (name, args) => {
  try {
    const r = await client.callTool({ name, arguments: args || {} });
    return { isError: Boolean(r.isError), text: (r.content || []).map(c => c.text).join("\n"),
      structured: r.structuredContent === undefined ? null : r.structuredContent };
  } catch (e) {
    return { threw: String(e && e.message || e) };
  }
};
const must = async (name, args) => {
  const r = await attempt(name, args);
  if (r.threw || r.isError) throw new Error(name + ": " + JSON.stringify(r));
  return r;
};

await must("sync_create_room", { room: "ts-errors" });
await must("sync_embody", { room: "ts-errors" });
await must("sync_register_action", { id: "claim", params: { n: { type: "number" } }, if: "params.n > 5",
  writes: [{ key: "claimed", value: "${params.n}" }] });

const errors = {
  bad_arguments: await attempt("sync_wait", { condition: "true", timeout: 5 }),
  not_found: await attempt("sync_invoke_action", { action: "nope" }),
  precondition: await attempt("sync_invoke_action", { action: "claim", params: { n: 1 } }),
  scope: await attempt("sync_read_context", { room: "elsewhere" }),
};
// More calls at once than the grant's burst: some are rate limited.
const burst = await Promise.all(Array.from({ length: 40 }, () => attempt("sync_lobby")));
errors.rate_limit = burst.find(r => r.isError) || burst.find(r => r.threw) || { missing: true };
const ok = burst.filter(r => !r.isError && !r.threw).length;

console.log(JSON.stringify({ serverInfo: client.getServerVersion(), errors, burst_ok: ok,
  burst_threw: burst.filter(r => r.threw).length }));
await client.close();
