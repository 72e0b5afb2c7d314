// Token management in the console: create (secret shown once), use, revoke.
import { test, expect } from '@playwright/test';
import { signIn, url } from './helpers';

test('a token made in the console works until it is revoked there', async ({ page, request }) => {
  await signIn(page, '/tokens');
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await page.getByLabel('Name').fill('e2e-console-token');
  await page.getByLabel('Scope').selectOption('read');
  await page.getByRole('button', { name: 'Create' }).click();
  const secret = (await page.getByTestId('new-token').textContent())!.trim();
  expect(secret).toMatch(/^gpp_/);

  const whoami = await request.get(url() + '/api/v1/auth/whoami', { headers: { authorization: `Bearer ${secret}` } });
  expect(whoami.status()).toBe(200);
  expect((await whoami.json()).scope).toBe('read');

  const row = page.getByTestId('token-table').locator('tr', { hasText: 'e2e-console-token' });
  await expect(row).toBeVisible();
  await page.screenshot({ path: 'artifacts/tokens.png', fullPage: true });
  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row).toHaveClass(/revoked/);

  const after = await request.get(url() + '/api/v1/auth/whoami', { headers: { authorization: `Bearer ${secret}` } });
  expect(after.status()).toBe(401);
  expect((await after.json()).error.code).toBe('invalid_token');
});

test('a token for an assistant comes with the MCP configuration to paste, and it works', async ({ page, request }) => {
  await signIn(page, '/tokens');
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await page.getByLabel('Assistant rights').selectOption('read');
  await page.getByRole('button', { name: 'Make assistant token' }).click();
  const stdio = JSON.parse((await page.getByTestId('mcp-stdio-config').textContent())!);
  const http = JSON.parse((await page.getByTestId('mcp-http-config').textContent())!);
  const server = stdio.mcpServers.gpuplane;
  expect(server.command).toBe('gpuctl');
  expect(server.args).toEqual(['mcp']);
  expect(server.env.GPUCTL_SERVER).toBe(url());
  const secret = server.env.GPUCTL_TOKEN;
  expect(secret).toMatch(/^gpp_/);
  expect(http.mcpServers.gpuplane.url).toBe(url() + '/mcp');
  expect(http.mcpServers.gpuplane.headers.Authorization).toBe(`Bearer ${secret}`);
  await page.screenshot({ path: 'artifacts/tokens-assistant.png', fullPage: true });

  // The snippet's token opens MCP with the read scope it was made with.
  const initialize = await request.post(http.mcpServers.gpuplane.url, {
    headers: { ...http.mcpServers.gpuplane.headers, accept: 'application/json, text/event-stream' },
    data: { jsonrpc: '2.0', id: 1, method: 'initialize', params: {
      protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'e2e', version: '1' } } },
  });
  expect(initialize.status()).toBe(200);
  // The answer may come as JSON or as one server-sent event.
  expect(await initialize.text()).toContain('"serverInfo":{"name":"gpuplane"');
  const whoami = await request.get(url() + '/api/v1/auth/whoami', { headers: { authorization: `Bearer ${secret}` } });
  expect((await whoami.json()).scope).toBe('read');
  const row = page.getByTestId('token-table').locator('tr', { hasText: 'assistant (MCP, read)' });
  await expect(row.first()).toBeVisible();
});
