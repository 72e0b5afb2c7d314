// The admin console: users, quotas, node policies, nodes and agent tokens managed from
// /admin through the API as the signed-in admin, and every change read back
// in the audit log at /admin/audit.
import { test, expect } from '@playwright/test';
import { asAdmin, signIn, url } from './helpers';
import { ADMIN_USER, NODE } from '../global-setup';

test('an admin manages users, quotas, nodes and agent tokens and reads the audit log', async ({ page, request }) => {
  await signIn(page, '/admin');
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByRole('link', { name: 'Admin' })).toBeVisible();

  // A user, made admin, then disabled.
  const users = page.getByTestId('users');
  await users.getByLabel('Name').fill('e2e-newcomer');
  await users.getByLabel(/^Password/).fill('e2e-password-9012');
  await users.getByRole('button', { name: 'Create user' }).click();
  const row = users.locator('tr[data-user="e2e-newcomer"]');
  await expect(row).toContainText('active (password)');
  await row.getByRole('button', { name: 'Make admin' }).click();
  await expect(row).toContainText('server admin');
  await row.getByRole('button', { name: 'Disable' }).click();
  await expect(row).toContainText('disabled');
  // Bad input comes back with its field.
  await users.getByLabel('Name').fill('e2e-short');
  await users.getByLabel(/^Password/).fill('short');
  await users.getByLabel(/^Password/).evaluate((input: HTMLInputElement) => input.removeAttribute('minlength'));
  await users.getByRole('button', { name: 'Create user' }).click();
  await expect(users.getByTestId('change-error')).toHaveText('password: must have at least 8 characters');

  // A quota for that user, then removed.
  const quotas = page.getByTestId('admin-quotas');
  await quotas.getByLabel('For').selectOption('user');
  await quotas.getByLabel('Name').fill('e2e-newcomer');
  await quotas.getByLabel('GPUs at once').fill('2');
  await quotas.getByRole('button', { name: 'Set quota' }).click();
  const quota = quotas.getByRole('row', { name: /user e2e-newcomer/ });
  await expect(quota).toContainText('0/2 GPUs');
  await quota.getByRole('button', { name: 'Remove' }).click();
  await expect(quota).toHaveCount(0);

  // A project bound to labelled nodes with docker granted, then unbound.
  const created = await request.post(url() + '/api/v1/projects', { headers: asAdmin(), data: { name: 'e2e-bound' } });
  expect(created.status()).toBe(201);
  const policies = page.getByTestId('admin-node-policies');
  await policies.getByLabel('Project').fill('e2e-bound');
  await policies.getByLabel('Labels').fill('e2e-team=bound');
  await policies.getByLabel('Runners').fill('process,docker');
  await policies.getByRole('button', { name: 'Set policy' }).click();
  const policy = policies.locator('tr[data-project="e2e-bound"]');
  await expect(policy).toContainText('e2e-team=bound');
  await expect(policy).toContainText('docker, process');
  await policies.getByLabel('Runners').fill('process,root');
  await policies.getByRole('button', { name: 'Set policy' }).click();
  await expect(policies.getByTestId('change-error')).toContainText('root');
  await policy.getByRole('button', { name: 'Remove' }).click();
  await expect(policy).toHaveCount(0);

  // The node drained, relabelled and undrained.
  const node = page.getByTestId('admin-nodes').locator(`tr[data-node="${NODE}"]`);
  await node.getByRole('button', { name: 'Drain' }).click();
  await expect(node).toContainText(/DRAIN(ING|ED)/);
  await node.getByLabel('Label changes').fill('e2e-pool=night');
  await node.getByRole('button', { name: 'Change labels' }).click();
  await expect(node).toContainText('e2e-pool=night');
  await node.getByLabel('Label changes').fill('e2e-pool-');
  await node.getByRole('button', { name: 'Change labels' }).click();
  await expect(node).not.toContainText('e2e-pool');
  await node.getByRole('button', { name: 'Undrain' }).click();
  await expect(node).toContainText('ONLINE');

  // An agent token: its secret shown once, then revoked.
  const tokens = page.getByTestId('agent-tokens');
  await tokens.getByLabel('Name').fill('e2e-spare');
  await tokens.getByRole('button', { name: 'Create agent token' }).click();
  await expect(tokens.getByTestId('new-agent-token-secret')).toHaveText(/^gpp_/);
  const spare = tokens.getByRole('row', { name: /e2e-spare/ });
  await spare.getByRole('button', { name: 'Revoke' }).click();
  await expect(spare).toContainText('revoked');
  await page.screenshot({ path: 'artifacts/admin.png', fullPage: true });

  // All of it in the audit log, as the admin through the console.
  await page.goto(url() + `/admin/audit?actor=${ADMIN_USER}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  const log = page.getByTestId('audit');
  for (const action of ['user.create', 'user.admin', 'user.disable', 'quota.set', 'quota.clear',
    'node.drain', 'node.labels', 'node.undrain', 'agent_token.create', 'agent_token.revoke',
    'project.node_policy', 'project.node_policy_clear']) {
    await expect(log.getByRole('row', { name: new RegExp(action.replace('.', '\\.')) }).first()).toBeVisible();
  }
  await page.getByLabel('Action').selectOption('user.disable');
  await page.getByRole('button', { name: 'Filter' }).click();
  await expect(page).toHaveURL(/action=user.disable/);
  await expect(log.getByRole('row')).toHaveCount(2);
  await expect(log).toContainText('e2e-newcomer');
  await page.screenshot({ path: 'artifacts/audit.png', fullPage: true });

  // The disabled user cannot sign in; the API agrees with the page.
  const listed = await (await request.get(url() + '/api/v1/users', { headers: asAdmin() })).json();
  const newcomer = listed.items.find((u: { name: string }) => u.name === 'e2e-newcomer');
  expect(newcomer.is_admin).toBe(true);
  expect(newcomer.disabled_at).not.toBeNull();
});
