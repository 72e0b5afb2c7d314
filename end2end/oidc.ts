// A real OpenID Connect provider for the SSO tests: the npm package
// `oidc-provider` with its development login pages (any login, any
// password). The issuer is known first (its port), the client's redirect
// URI only once GPUPlane runs, so the provider is attached afterwards.
import http from 'node:http';
import { AddressInfo } from 'node:net';

export const OIDC_CLIENT_ID = 'gpuplane-e2e';
export const OIDC_CLIENT_SECRET = 'e2e-client-secret-0123456789';

export async function startIssuer(): Promise<{ issuer: string; attach: (gpuplaneUrl: string) => Promise<void>; close: () => void }> {
  let handler: http.RequestListener = (_req, res) => {
    res.statusCode = 503;
    res.end('not ready');
  };
  const server = http.createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    issuer,
    attach: async (gpuplaneUrl: string) => {
      const { default: Provider } = await import('oidc-provider');
      const provider = new Provider(issuer, {
        clients: [
          {
            client_id: OIDC_CLIENT_ID,
            client_secret: OIDC_CLIENT_SECRET,
            redirect_uris: [`${gpuplaneUrl}/auth/oidc/callback`],
            grant_types: ['authorization_code'],
            response_types: ['code'],
          },
        ],
        // The login typed on the dev page becomes the account: `alice` is
        // alice@example.com; a login with an @ is its own email address.
        async findAccount(_ctx: unknown, id: string) {
          const email = id.includes('@') ? id : `${id}@example.com`;
          return {
            accountId: id,
            async claims() {
              return { sub: id, email, email_verified: true, preferred_username: id.split('@')[0] };
            },
          };
        },
        claims: { email: ['email', 'email_verified'], profile: ['preferred_username'] },
        pkce: { required: () => true },
        features: { devInteractions: { enabled: true } },
      });
      handler = provider.callback();
    },
    close: () => server.close(),
  };
}
