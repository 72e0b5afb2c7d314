// Shared steps of the browser tests.
import { APIRequestContext, Page, expect } from '@playwright/test';
import { ADMIN_USER, ADMIN_PASSWORD } from '../global-setup';

export const url = () => process.env.GPUPLANE_URL!;

/** Signs in through the login form (a plain POST: works with or without JavaScript). */
export async function signIn(page: Page, next = '/', user = ADMIN_USER, password = ADMIN_PASSWORD) {
  await page.goto(url() + next);
  await expect(page).toHaveURL(/\/login\?next=/);
  await page.getByLabel('User name').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByTestId('signed-in-as')).toHaveText(user);
}

/**
 * Waits until the page's WebAssembly has hydrated it. A plain GET form (the
 * filters, the log search, the chart view) loads a new page from the server:
 * a click on a button that needs the hydrated page is lost before then.
 */
export async function hydrated(page: Page) {
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
}

/** The admin's bearer token header, for setting up and checking through the API. */
export const asAdmin = () => ({ authorization: `Bearer ${process.env.GPUPLANE_TOKEN}` });

/** Makes `project` (if need be) with each [user, role] a member, each user with `password`. */
export async function projectWith(request: APIRequestContext, project: string, members: [string, string][], password: string) {
  for (const [name] of members) {
    const created = await request.post(url() + '/api/v1/users', { headers: asAdmin(), data: { name, password } });
    expect([201, 409], await created.text()).toContain(created.status());
  }
  const made = await request.post(url() + '/api/v1/projects', { headers: asAdmin(), data: { name: project } });
  expect([201, 409], await made.text()).toContain(made.status());
  for (const [user, role] of members) {
    const member = await request.post(url() + `/api/v1/projects/${project}/members`, { headers: asAdmin(), data: { user, role } });
    expect(member.status(), await member.text()).toBe(200);
  }
}
