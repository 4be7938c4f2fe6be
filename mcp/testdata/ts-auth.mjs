// The TypeScript SDK client's sign-in against sync, shared by the scripts:
// OAuth (discovery, dynamic registration or a client metadata document,
// PKCE with resource, consent, token). The consent helper (run by the Go
// test) performs the consent step in the signed-in user's browser
// session, on the real pages, and returns the code.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const redirect = "http://localhost:1/callback";

export class Provider {
  constructor(helperUrl, metadataUrl) { this.helperUrl = helperUrl; this.metadataUrl = metadataUrl; }
  get redirectUrl() { return redirect; }
  get clientMetadataUrl() { return this.metadataUrl; }
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
    const res = await fetch(this.helperUrl + "?url=" + encodeURIComponent(url.toString()));
    if (!res.ok) throw new Error("consent helper: " + res.status + " " + (await res.text()));
    this.code = (await res.json()).code;
  }
}

// connect signs in (once, through the consent helper) and returns the
// connected client.
export async function connect(serverUrl, provider) {
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
  return client;
}
