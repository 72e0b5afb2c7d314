// A run's config, tags and notes on its page, as the SDK or a job recorded them.
import { test, expect } from '@playwright/test';
import { asAdmin, signIn, url } from './helpers';

test('the run page shows the config, tags and notes', async ({ page, request }) => {
  const created = await request.post(url() + '/api/v1/runs', {
    headers: asAdmin(),
    data: {
      name: 'with-config',
      config: { lr: 0.001, optimizer: 'adam', 'model.depth': 12, amp: true },
      tags: ['baseline', 'sweep:lr'],
      notes: 'first try with warmup',
    },
  });
  expect(created.status(), await created.text()).toBe(201);
  const run = await created.json();

  await signIn(page, `/runs/${run.id}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByTestId('run-tags')).toHaveText('baseline sweep:lr');
  await expect(page.getByTestId('run-notes')).toHaveText('first try with warmup');
  const config = page.getByTestId('run-config');
  await expect(config.getByRole('row')).toHaveCount(5);
  await expect(config.getByRole('row', { name: 'lr 0.001' })).toBeVisible();
  await expect(config.getByRole('row', { name: 'model.depth 12' })).toBeVisible();
  await expect(config.getByRole('row', { name: 'optimizer adam' })).toBeVisible();
  await page.screenshot({ path: 'artifacts/run-config.png', fullPage: true });

  // An editor (the admin here) changes the tags and notes from the page.
  await page.getByRole('button', { name: 'Edit tags and notes…' }).click();
  const form = page.getByTestId('run-details-form');
  await expect(form.getByLabel('Tags (separated by spaces)')).toHaveValue('baseline sweep:lr');
  await form.getByLabel('Tags (separated by spaces)').fill('baseline best');
  await form.getByLabel('Notes').fill('warmup 500 wins');
  await form.getByRole('button', { name: 'Save' }).click();
  await expect(page.getByTestId('run-tags')).toHaveText('baseline best');
  await expect(page.getByTestId('run-notes')).toHaveText('warmup 500 wins');
  const saved = await (await request.get(url() + `/api/v1/runs/${run.id}`, { headers: asAdmin() })).json();
  expect([saved.tags, saved.notes]).toEqual([['baseline', 'best'], 'warmup 500 wins']);
  // The list finds it by tag and by a config comparison.
  const found = await (await request.get(url() + '/api/v1/runs?tag=best&config.lr=%3E%3D0.001', { headers: asAdmin() })).json();
  expect(found.items.map((r: { id: string }) => r.id)).toEqual([run.id]);
});

test('a viewer of the project gets no edit button', async ({ browser, request }) => {
  const viewer = 'e2e-run-viewer';
  const password = 'e2e-password-3456';
  const made = await request.post(url() + '/api/v1/users', { headers: asAdmin(), data: { name: viewer, password } });
  expect(made.status(), await made.text()).toBe(201);
  const project = await request.post(url() + '/api/v1/projects', { headers: asAdmin(), data: { name: 'e2e-runs' } });
  expect(project.status()).toBe(201);
  const member = await request.post(url() + '/api/v1/projects/e2e-runs/members', { headers: asAdmin(), data: { user: viewer, role: 'viewer' } });
  expect(member.status()).toBe(200);
  const created = await request.post(url() + '/api/v1/runs', {
    headers: asAdmin(), data: { project: 'e2e-runs', name: 'look-only', tags: ['shared'] } });
  const run = await created.json();
  const page = await (await browser.newContext()).newPage();
  await signIn(page, `/runs/${run.id}`, viewer, password);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByTestId('run-tags')).toHaveText('shared');
  await expect(page.getByRole('button', { name: 'Edit tags and notes…' })).toHaveCount(0);
});

test('charts read at a legible size and switch to a log scale from the URL', async ({ page, request }) => {
  const created = await request.post(url() + '/api/v1/runs', { headers: asAdmin(), data: { name: 'decades' } });
  const run = await created.json();
  const points = Array.from({ length: 60 }, (_, step) => (
    { key: 'train/loss', step, wall_time: 1764460800 + step, value: 500 * 0.7 ** step }));
  const logged = await request.post(url() + `/api/v1/runs/${run.id}/metrics`, { headers: asAdmin(), data: { batch_id: 'b1', points } });
  expect(logged.status(), await logged.text()).toBe(200);

  await page.setViewportSize({ width: 1400, height: 900 });
  await signIn(page, `/runs/${run.id}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  const chart = page.locator('figure.chart[data-key="train/loss"] svg');
  await expect(chart).toBeVisible();
  // The size an axis label is shown at: its font size times the chart's scale on screen.
  const shownPx = await chart.evaluate((svg: SVGSVGElement) => {
    const label = [...svg.querySelectorAll('text')].find((t) => t.textContent?.trim() === 'step')!;
    return parseFloat(label.getAttribute('font-size')!) * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  });
  expect(shownPx).toBeGreaterThanOrEqual(11);

  const form = page.getByTestId('chart-view');
  await form.getByLabel('Y axis').selectOption('log');
  await form.getByRole('button', { name: 'Apply' }).click();
  await expect(page).toHaveURL(/y_scale=log/);
  await expect(chart).toContainText('train/loss (log scale)');
  await expect(chart).toContainText('0.01');
  await page.screenshot({ path: 'artifacts/run-log-scale.png', fullPage: true });
});

test('the Texts tab lists logged samples newest step first, by key', async ({ page, request }) => {
  const created = await request.post(url() + '/api/v1/runs', { headers: asAdmin(), data: { name: 'with-texts' } });
  expect(created.status()).toBe(201);
  const run = await created.json();
  const texts = [0, 1, 2].map((step) => ({ key: 'samples/generation', step, wall_time: 1764460800 + step, text: `<b>sample ${step}</b>\nline two` }));
  texts.push({ key: 'prompts', step: 0, wall_time: 1764460800, text: 'Once upon a time' });
  const logged = await request.post(url() + `/api/v1/runs/${run.id}/metrics`, { headers: asAdmin(), data: { batch_id: 't1', texts } });
  expect(logged.status(), await logged.text()).toBe(200);

  await signIn(page, `/runs/${run.id}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await page.getByRole('link', { name: 'Texts', exact: true }).click();
  await expect(page).toHaveURL(/tab=texts/);
  const table = page.getByTestId('texts');
  await expect(table.getByRole('row')).toHaveCount(5);
  // Shown as text, never as markup.
  await expect(table.getByRole('row').nth(1)).toContainText('<b>sample 2</b>');
  await expect(table.locator('b')).toHaveCount(0);
  await page.getByRole('link', { name: 'prompts', exact: true }).click();
  await expect(page).toHaveURL(/text_key=prompts/);
  await expect(table.getByRole('row')).toHaveCount(2);
  await expect(table.getByRole('row').nth(1)).toContainText('Once upon a time');
  await expect(table.getByRole('row').nth(1)).toContainText('2025-11-30 00:00:00');
});

test('the System tab charts the job’s own GPU and processes over its run', async ({ page, request }) => {
  const compute = 'import time\nend = time.time() + 4\nwhile time.time() < end: pass';
  const submitted = await request.post(url() + '/api/v1/jobs', {
    headers: asAdmin(),
    data: { name: 'system-tab', resources: { gpu: 1 }, command: ['python3', '-c', compute] },
  });
  expect(submitted.status(), await submitted.text()).toBe(201);
  const job = await submitted.json();
  // Done, and its samples sent (the agent sends every 2.5 s here).
  await expect.poll(async () => {
    const answer = await request.get(url() + `/api/v1/runs/${job.run_id}/system?field=cpu_percent`, { headers: asAdmin() });
    const system = await answer.json();
    const finished = (await (await request.get(url() + `/api/v1/jobs/${job.id}`, { headers: asAdmin() })).json()).status;
    return finished === 'SUCCEEDED' && (system.series?.[0]?.series?.points?.length ?? 0) >= 4;
  }, { timeout: 30_000 }).toBe(true);

  await signIn(page, `/runs/${job.run_id}?tab=system`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByTestId('system-attempts')).toContainText('attempt 1 on e2e-node (GPU');
  const charts = page.getByTestId('system-charts').locator('figure');
  await expect(charts).toHaveCount(7);
  await expect(page.locator('figure[data-field="utilization_percent"]')).toContainText(/GPU utilisation \(%\): GPU \d/);
  await expect(page.locator('figure[data-field="cpu_percent"]')).toContainText('CPU of the job');
  await page.screenshot({ path: 'artifacts/run-system.png', fullPage: true });
});

test('the run page reads top-down: charts first, a long config folded below them', async ({ page, request }) => {
  const keys: Record<string, number> = {};
  for (let i = 0; i < 40; i++) keys[`layer${String(i).padStart(2, '0')}.width`] = 64 + i;
  const created = await request.post(url() + '/api/v1/runs', { headers: asAdmin(), data: { name: 'long-config', config: keys } });
  expect(created.status(), await created.text()).toBe(201);
  const run = await created.json();
  const points = Array.from({ length: 50 }, (_, i) => ({ key: 'train/loss', step: i + 1, wall_time: 1.7e9 + i, value: 2 / (i + 1) }));
  const logged = await request.post(url() + `/api/v1/runs/${run.id}/metrics`, { headers: asAdmin(), data: { batch_id: 'top', points } });
  expect(logged.status(), await logged.text()).toBe(200);

  await page.setViewportSize({ width: 1280, height: 800 });
  await signIn(page, `/runs/${run.id}`);
  const chart = page.getByRole('heading', { name: 'train/', exact: true });
  await expect(chart).toBeVisible();
  // The first chart is on the first screen, above the summary and the config.
  const chartTop = (await chart.boundingBox())!.y;
  expect(chartTop).toBeLessThan(800);
  expect(chartTop).toBeLessThan((await page.getByTestId('run-summary').boundingBox())!.y);
  // 40 keys: folded, one click away.
  const config = page.getByTestId('run-config');
  await expect(config).toBeHidden();
  await page.getByText('40 keys').click();
  await expect(config.getByRole('row', { name: 'layer39.width 103' })).toBeVisible();
  await page.screenshot({ path: 'artifacts/run-top-down.png' });
});
