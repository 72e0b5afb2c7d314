// Job actions in the console: an editor of the job's project cancels (after
// a confirmation), retries with changes, changes the priority, holds and
// releases, and submits an edited copy; the OOM advice comes back on an
// unchanged retry; a viewer sees no buttons. Every change is audited as the
// editor's, through the console. A two-node job (with a second agent of its
// own) shows its members and each rank's output.
import { test, expect, APIRequestContext, Page } from '@playwright/test';
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { asAdmin, projectWith, signIn, url } from './helpers';

const PROJECT = 'e2e-actions';
const EDITOR = 'e2e-editor';
const VIEWER = 'e2e-viewer';
const PASSWORD = 'e2e-password-5678';

test.beforeAll(async ({ request }) => {
  await projectWith(request, PROJECT, [[EDITOR, 'editor'], [VIEWER, 'viewer']], PASSWORD);
});

async function submit(request: APIRequestContext, spec: object) {
  const submitted = await request.post(url() + '/api/v1/jobs', { headers: asAdmin(), data: { project: PROJECT, ...spec } });
  expect(submitted.status(), await submitted.text()).toBe(201);
  return (await submitted.json()).id as string;
}

async function job(request: APIRequestContext, id: string) {
  return (await request.get(url() + `/api/v1/jobs/${id}`, { headers: asAdmin() })).json();
}

async function cancel(request: APIRequestContext, id: string) {
  await request.post(url() + `/api/v1/jobs/${id}/cancel`, { headers: asAdmin(), data: { confirm: true } });
}

async function openAs(page: Page, id: string, user: string) {
  await signIn(page, `/jobs/${id}`, user, PASSWORD);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByTestId('attempts').or(page.getByText('Not dispatched yet.'))).toBeVisible();
}

test('an editor cancels and retries from the console; a viewer sees no buttons', async ({ page, browser, request }) => {
  const id = await submit(request, { name: 'console-cancel', command: ['sleep', '300'] });
  let retriedAs = '';
  try {
    await expect.poll(async () => (await job(request, id)).status).toBe('RUNNING');

    const viewer = await (await browser.newContext()).newPage();
    await openAs(viewer, id, VIEWER);
    await expect(viewer.getByTestId('status').first()).toHaveText('RUNNING');
    await expect(viewer.getByTestId('job-actions')).toHaveCount(0);
    await viewer.goto(url() + '/admin');
    await expect(viewer.getByTestId('admins-only')).toHaveText('This page is for server admins.');
    await expect(viewer.getByRole('link', { name: 'Admin' })).toHaveCount(0);

    await openAs(page, id, EDITOR);
    const actions = page.getByTestId('job-actions');
    await actions.getByRole('button', { name: 'Cancel job…' }).click();
    await expect(page.getByTestId('cancel-confirm')).toContainText('Cancel console-cancel?');
    await page.getByRole('button', { name: 'Yes, cancel it' }).click();
    await expect.poll(async () => (await job(request, id)).status).toBe('CANCELLED');
    await page.reload();
    await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
    await expect(page.getByTestId('status').first()).toHaveText('CANCELLED');

    // The admin's job, changed by the editor: a new job of the editor's, which the page opens.
    await page.getByLabel(/Changes for the retry/).fill('env.E2E_RETRY=1\n');
    await page.getByRole('button', { name: 'Retry', exact: true }).click();
    await expect(page).not.toHaveURL(new RegExp(id));
    const copy = page.url().split('/jobs/')[1];
    retriedAs = copy;
    const retried = await job(request, copy);
    expect(retried.spec.env.E2E_RETRY).toBe('1');
    expect(retried.submitted_by).toBe(EDITOR);
    expect(['QUEUED', 'DISPATCHING', 'RUNNING']).toContain(retried.status);
    expect((await job(request, id)).status).toBe('CANCELLED');
    await page.screenshot({ path: 'artifacts/job-actions.png', fullPage: true });

    const audit = await (await request.get(url() + `/api/v1/audit?target=${id}`, { headers: asAdmin() })).json();
    expect(audit.items.map((e: { actor: string; action: string; token: string; detail: string }) => [e.actor, e.action, e.token, e.detail]))
      .toEqual([[EDITOR, 'job.retry', 'console', `retried with changes as new job ${copy}`], [EDITOR, 'job.cancel', 'console', 'was RUNNING']]);
  } finally {
    await cancel(request, id);
    if (retriedAs) await cancel(request, retriedAs);
  }
});

test('an editor reorders, holds and releases a queued job and submits an edited copy', async ({ page, request }) => {
  // A selector no node matches keeps it queued.
  const id = await submit(request, { name: 'console-queue', command: ['true'], node_selector: { pool: 'nowhere' } });
  try {
    await openAs(page, id, EDITOR);
    await page.getByLabel('Priority (higher runs first)').fill('7');
    await page.getByRole('button', { name: 'Set priority' }).click();
    await expect.poll(async () => (await job(request, id)).priority).toBe(7);

    await page.getByRole('button', { name: 'Hold in queue' }).click();
    await expect(page.getByTestId('queued-reason')).toContainText(`held by ${EDITOR}`);
    await page.getByRole('button', { name: 'Release' }).click();
    await expect(page.getByTestId('queued-reason')).not.toContainText('held by');
    expect((await job(request, id)).held).toBe(false);

    await page.getByRole('button', { name: 'Submit a copy with edits…' }).click();
    const editor = page.getByLabel('Job spec (JSON, as the API takes it)');
    const spec = JSON.parse(await editor.inputValue());
    expect(spec.name).toBe('console-queue');
    spec.name = 'console-copy';
    spec.node_selector = {};
    await editor.fill(JSON.stringify(spec, null, 2));
    await page.getByRole('button', { name: 'Submit copy' }).click();
    await expect(page).not.toHaveURL(new RegExp(id));
    await expect(page.locator('h1')).toContainText('console-copy');
    const copy = page.url().split('/jobs/')[1];
    await expect.poll(async () => (await job(request, copy)).status).toBe('SUCCEEDED');
    expect((await job(request, copy)).submitted_by).toBe(EDITOR);
  } finally {
    await cancel(request, id);
  }
});

test('retrying an out-of-memory failure unchanged shows the advice; forcing it retries', async ({ page, request }) => {
  const id = await submit(request, {
    name: 'console-oom',
    command: ['sh', '-c', "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1"],
    max_attempts: 1,
  });
  await expect.poll(async () => (await job(request, id)).failure_reason).toBe('OOM');
  // The run page says it failed at the top, with the first thing to try.
  const runId = (await job(request, id)).run_id;
  await signIn(page, `/runs/${runId}`, EDITOR, PASSWORD);
  const banner = page.getByTestId('failure-banner');
  await expect(banner).toContainText('Failed:');
  await expect(banner).toContainText('out of memory');
  await expect(banner).toContainText('First thing to try:');
  await expect(page.getByTestId('run-gpus')).toHaveText('none');
  await page.screenshot({ path: 'artifacts/run-failed.png', fullPage: true });
  await banner.getByRole('link').click();
  await expect(page).toHaveURL(/tab=diagnosis/);
  await expect(page.getByTestId('diagnosis')).toContainText('What to do');
  await page.goto(url() + `/jobs/${id}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await page.getByRole('button', { name: 'Retry', exact: true }).click();
  await expect(page.getByTestId('change-error')).toContainText('ran out of memory');
  await expect(page.getByTestId('change-error')).toContainText('env.BATCH_SIZE=16');
  expect((await job(request, id)).status).toBe('FAILED');

  await page.getByLabel(/Retry even if it ran out of memory/).check();
  await page.getByRole('button', { name: 'Retry', exact: true }).click();
  await expect(page.getByTestId('change-done')).toBeVisible();
  await expect.poll(async () => (await job(request, id)).attempts.length).toBe(2);
});

test('the job page says where each later attempt resumed from', async ({ page, request }) => {
  // Attempt 1 saves a checkpoint in its job folder and fails; attempt 2
  // resumes from it.
  const script = 'if [ "$GPUCTL_ATTEMPT" = 1 ]; then echo w > "$GPUCTL_JOB_DIR/step_3.pt"; sleep 1.5; exit 1; fi; echo resumed at "$GPUCTL_RESUME_STEP"';
  const id = await submit(request, {
    name: 'console-resume',
    command: ['sh', '-c', script],
    max_attempts: 2,
    retry_cooldown_s: 0,
  });
  await expect.poll(async () => (await job(request, id)).status, { timeout: 20_000 }).toBe('SUCCEEDED');
  await openAs(page, id, VIEWER);
  const resumed = page.getByTestId('attempt-resumed');
  await expect(resumed).toHaveCount(2);
  await expect(resumed.nth(0)).toHaveText('');
  await expect(resumed.nth(1)).toContainText('resumed from step 3 (');
  await expect(resumed.nth(1)).toContainText('/job/step_3.pt)');
});

test('a two-node job shows its members, and the log viewer one rank at a time', async ({ page, request }) => {
  // A second node, for the job's second member: drained and stopped after.
  const created = await request.post(url() + '/api/v1/agent-tokens', { headers: asAdmin(), data: { name: 'e2e-pair', node: 'e2e-pair' } });
  expect(created.status(), await created.text()).toBe(201);
  const agent = spawn(
    path.join(process.env.CARGO_TARGET_DIR ?? path.resolve(__dirname, '..', '..', 'target'), 'debug', 'gpuplane-agent'),
    ['--server', url(), '--name', 'e2e-pair', '--fake-gpus', '1', '--advertise-addr', '127.0.0.2',
     '--jobs-dir', mkdtempSync(path.join(tmpdir(), 'gpuplane-e2e-pair-'))],
    { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, GPUPLANE_AGENT_TOKEN: (await created.json()).secret, GPUPLANE_LOG: 'warn' } },
  );
  try {
    const id = await submit(request, {
      name: 'console-pair',
      command: ['sh', '-c', 'echo "member $GPUCTL_NODE_RANK of $GPUCTL_NNODES"'],
      resources: { gpu: 1, nodes: 2 },
    });
    await expect.poll(async () => (await job(request, id)).status, { timeout: 30_000 }).toBe('SUCCEEDED');
    await openAs(page, id, VIEWER);
    await expect(page.getByTestId('nodes')).toContainText('2 at once, 1 GPUs on each');
    const members = page.getByTestId('attempt-members').locator('li');
    await expect(members).toHaveCount(2);
    await expect(members.nth(0)).toContainText('rank 0 on ');
    await expect(members.nth(1)).toContainText('rank 1 on ');
    await expect(page.getByTestId('attempt-members')).toContainText('e2e-pair (127.0.0.2)');
    const lines = page.getByTestId('log-lines');
    await expect(lines).toContainText('member 0 of 2');
    await expect(lines).toContainText('[rank 1] member 1 of 2');
    await page.getByTestId('log-ranks').getByRole('link', { name: 'rank 1' }).click();
    await expect(lines).not.toContainText('member 0 of 2');
    await expect(lines).toContainText('member 1 of 2');
    // The run's system tab has each member's GPU, on its own node.
    const runId = (await job(request, id)).run_id;
    await page.goto(url() + `/runs/${runId}?tab=system`);
    await expect(page.getByTestId('system-attempts'))
      .toContainText(/attempt 1 on (e2e-\S+) \(GPU 0\) · attempt 1 rank 1 on (?!\1)e2e-\S+ \(GPU 0\)/);
  } finally {
    await request.post(url() + '/api/v1/nodes/e2e-pair/drain', { headers: asAdmin(), data: {} });
    agent.kill('SIGTERM');
  }
});

test('a job array shows above its tasks; an editor cancels every task, a viewer sees no button', async ({ page, browser, request }) => {
  const first = await submit(request, { name: 'console-array', command: ['sleep', '300'], array: '0-4%1' });
  const arrayId = (await job(request, first)).array.id as string;
  try {
    // A task's page links to its array.
    await openAs(page, first, EDITOR);
    await expect(page.getByRole('heading', { level: 1 })).toContainText('console-array[0]');
    await page.getByTestId('job-array').getByRole('link', { name: arrayId }).click();
    await expect(page).toHaveURL(new RegExp(`/jobs\\?array=${arrayId}`));
    await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
    await expect(page.getByTestId('array-tasks')).toHaveText('5 (0-4%1, at most 1 at once)');
    const rows = page.getByTestId('jobs').locator('tbody tr');
    await expect(rows).toHaveCount(5);
    await expect(rows.first()).toContainText('console-array[4]');

    // A viewer reads it, without the button.
    const viewerContext = await browser.newContext();
    const viewerPage = await viewerContext.newPage();
    await signIn(viewerPage, `/jobs?array=${arrayId}`, VIEWER, PASSWORD);
    await expect(viewerPage.getByTestId('array-states')).toContainText('QUEUED');
    await expect(viewerPage.locator('body')).toHaveAttribute('data-hydrated', 'true');
    await expect(viewerPage.getByTestId('cancel-array')).toHaveCount(0);
    await viewerContext.close();

    // The card reads the array again every 2 s; an open confirmation
    // survives such a refresh between the two clicks.
    await page.getByTestId('cancel-array').click();
    await page.waitForResponse((response) =>
      response.url().endsWith('/console/fn/api_get') &&
      decodeURIComponent(response.request().postData() ?? '').includes(`/api/v1/arrays/${arrayId}`));
    await page.getByTestId('confirm-cancel-array').click();
    await expect(page.getByTestId('array-states')).toHaveText('5 CANCELLED', { timeout: 30_000 });
    await expect(page.getByTestId('cancel-array')).toHaveCount(0);
  } finally {
    await request.post(url() + `/api/v1/arrays/${arrayId}/cancel`, { headers: asAdmin(), data: { confirm: true } });
  }
});
