// Single sign-on against a real OpenID Connect provider (npm oidc-provider):
// the authorization code flow with PKCE, a user provisioned on first sign-in,
// and a user from a domain that is not allowed turned away.
import { test, expect, Page } from '@playwright/test';
import { url } from './helpers';

async function signInAtProvider(page: Page, login: string) {
  await page.goto(url() + '/tokens');
  await expect(page).toHaveURL(/\/login\?next=/);
  await page.getByTestId('sso').click();
  // The provider's development login page: any login and password.
  await page.locator('input[name=login]').fill(login);
  await page.locator('input[name=password]').fill('anything');
  await page.locator('button[type=submit]').click();
  // Its consent page.
  await page.locator('button[type=submit]').click();
}

test('a new user signs in through SSO and lands where they were going', async ({ page }) => {
  await signInAtProvider(page, 'sso-alice');
  await expect(page).toHaveURL(url() + '/tokens');
  await expect(page.getByTestId('signed-in-as')).toHaveText('sso-alice');
  await expect(page.getByRole('heading', { name: 'API tokens' })).toBeVisible();
  await page.screenshot({ path: 'artifacts/sso-signed-in.png' });
});

test('a user outside the allowed domains is refused', async ({ page }) => {
  await signInAtProvider(page, 'mallory@evil.test');
  await expect(page).toHaveURL(/\/login\?error=sso/);
  await expect(page.getByTestId('login-message')).toHaveText('Single sign-on did not complete; try again.');
  await expect(page.getByTestId('signed-in-as')).toHaveCount(0);
});
