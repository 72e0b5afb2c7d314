// The Projects page: a project's admin (no server admin) removes a member
// after a confirmation; the member's token limited to the project stops
// working at once; a plain member sees the members but no Remove button.
import { test, expect } from '@playwright/test';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { asAdmin, hydrated, signIn, url } from './helpers';

const SERVER = path.join(process.env.CARGO_TARGET_DIR ?? path.resolve(__dirname, '..', '..', 'target'), 'debug', 'gpuplane-server');

const PROJECT = 'e2e-team';
const LEAD = 'e2e-team-lead';
const MEMBER = 'e2e-team-member';
const PASSWORD = 'e2e-password-7788';

test('a project admin removes a member from the Projects page', async ({ page, browser, request }) => {
  for (const name of [LEAD, MEMBER]) {
    const created = await request.post(url() + '/api/v1/users', { headers: asAdmin(), data: { name, password: PASSWORD } });
    expect([201, 409], await created.text()).toContain(created.status());
  }
  const project = await request.post(url() + '/api/v1/projects', { headers: asAdmin(), data: { name: PROJECT } });
  expect([201, 409], await project.text()).toContain(project.status());
  for (const [user, role] of [[LEAD, 'admin'], [MEMBER, 'editor']]) {
    const member = await request.post(url() + `/api/v1/projects/${PROJECT}/members`, { headers: asAdmin(), data: { user, role } });
    expect(member.status(), await member.text()).toBe(200);
  }
  // The member's own token, limited to the project.
  const memberPage = await (await browser.newContext()).newPage();
  await signIn(memberPage, `/projects?project=${PROJECT}`, MEMBER, PASSWORD);
  await hydrated(memberPage);
  await expect(memberPage.getByTestId('members')).toContainText(LEAD);
  await expect(memberPage.getByTestId('remove-member')).toHaveCount(0);
  // A token of the member's (made on the host), then one limited to the project.
  const theirs = execFileSync(SERVER, ['--data-dir', process.env.GPUPLANE_DATA_DIR!, 'admin', 'create-token',
    '--user', MEMBER, '--scope', 'write'], { encoding: 'utf8' }).trim();
  const made = await request.post(url() + '/api/v1/tokens', {
    headers: { Authorization: `Bearer ${theirs}` },
    data: { name: 'ci', scope: 'read', project: PROJECT },
  });
  expect(made.status(), await made.text()).toBe(201);
  const limited = (await made.json()).secret;
  const before = await request.get(url() + '/api/v1/runs', { headers: { Authorization: `Bearer ${limited}` } });
  expect(before.status()).toBe(200);

  await signIn(page, `/projects?project=${PROJECT}`, LEAD, PASSWORD);
  await hydrated(page);
  await expect(page.locator(`tr[data-project="${PROJECT}"]`)).toContainText('admin');
  const row = page.locator(`li[data-member="${MEMBER}"]`);
  await expect(row).toContainText('editor');
  await row.getByTestId('remove-member').click();
  await expect(row.getByTestId('remove-confirm')).toContainText('share links');
  await row.getByTestId('confirm-remove').click();
  await expect(page.locator(`li[data-member="${MEMBER}"]`)).toHaveCount(0);
  await page.screenshot({ path: 'artifacts/projects.png', fullPage: true });

  const members = await (await request.get(url() + `/api/v1/projects/${PROJECT}/members`, { headers: asAdmin() })).json();
  expect(members.items.map((m: { user: string }) => m.user)).not.toContain(MEMBER);
  const audit = await (await request.get(url() + `/api/v1/audit?target=${PROJECT}`, { headers: asAdmin() })).json();
  expect(audit.items[0].actor).toBe(LEAD);
  expect(audit.items[0].detail).toContain(`removed ${MEMBER} (was editor)`);
  const after = await request.get(url() + '/api/v1/runs', { headers: { Authorization: `Bearer ${limited}` } });
  expect(after.status()).toBe(401);
});

test('a project admin sets what happens to jobs whose GPUs sit idle', async ({ page, request }) => {
  for (const name of [LEAD]) {
    const created = await request.post(url() + '/api/v1/users', { headers: asAdmin(), data: { name, password: PASSWORD } });
    expect([201, 409], await created.text()).toContain(created.status());
  }
  const project = await request.post(url() + '/api/v1/projects', { headers: asAdmin(), data: { name: PROJECT } });
  expect([201, 409], await project.text()).toContain(project.status());
  const member = await request.post(url() + `/api/v1/projects/${PROJECT}/members`, { headers: asAdmin(), data: { user: LEAD, role: 'admin' } });
  expect(member.status(), await member.text()).toBe(200);

  await signIn(page, `/projects?project=${PROJECT}`, LEAD, PASSWORD);
  await hydrated(page);
  const row = page.locator(`tr[data-project="${PROJECT}"]`);
  const form = page.getByTestId('set-idle-action');
  await form.locator('select[name="idle_action"]').selectOption('stop');
  await form.getByRole('button', { name: 'Save' }).click();
  await expect(row.getByTestId('idle-action')).toHaveText('stop');
  const listed = await (await request.get(url() + '/api/v1/projects', { headers: asAdmin() })).json();
  expect(listed.items.find((p: { name: string }) => p.name === PROJECT).idle_action).toBe('stop');
  await form.locator('select[name="idle_action"]').selectOption('warn');
  await form.getByRole('button', { name: 'Save' }).click();
  await expect(row.getByTestId('idle-action')).toHaveText('warn');
});
