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
