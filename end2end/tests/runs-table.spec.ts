// The runs table: columns, sort and filters in the URL, selection kept there
// too (a shared link restores all of it), compare with a config diff, and the
// server-drawn scatter plot.
import { test, expect, Page } from '@playwright/test';
import { asAdmin, signIn, url } from './helpers';

const PROJECT = 'e2e-table';
// name, learning rate, optimizer, eval/acc
const RUNS: [string, number, string, number][] = [
  ['lr-small', 0.0001, 'adam', 0.71],
  ['lr-mid', 0.001, 'adam', 0.83],
  ['lr-big', 0.01, 'sgd', 0.78],
  ['lr-huge', 0.1, 'sgd', 0.42],
];

/** The run names down the table, top to bottom. */
const names = (page: Page) => page.getByTestId('runs').locator('tbody tr td:nth-child(2) a').allTextContents();

/**
 * Applies a config filter and waits until the page it leads to is hydrated:
 * typing into a page that is not yet would be overwritten by hydration,
 * which sets each field from the URL.
 */
async function applyFilter(page: Page, condition: string) {
  const filters = page.getByTestId('run-filters');
  await filters.getByLabel('Config', { exact: true }).fill(condition);
  await filters.getByRole('button', { name: 'Apply' }).click();
  await expect(page).toHaveURL((at) => at.searchParams.get('where') === condition);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
}

test('the runs table sorts, filters, keeps a selection in its URL and compares', async ({ page, browser, request }) => {
  const project = await request.post(url() + '/api/v1/projects', { headers: asAdmin(), data: { name: PROJECT } });
  expect(project.status(), await project.text()).toBe(201);
  const ids: Record<string, string> = {};
  for (const [name, lr, optimizer, acc] of RUNS) {
    const created = await request.post(url() + '/api/v1/runs', {
      headers: asAdmin(),
      data: { project: PROJECT, name, config: { lr, optimizer, seed: 1 }, tags: ['table'] },
    });
    expect(created.status(), await created.text()).toBe(201);
    const run = await created.json();
    ids[name] = run.id;
    const points = [{ key: 'eval/acc', step: 10, wall_time: 1764460800, value: acc }];
    const logged = await request.post(url() + `/api/v1/runs/${run.id}/metrics`, {
      headers: asAdmin(), data: { batch_id: 'b1', points } });
    expect(logged.status(), await logged.text()).toBe(200);
  }

  await signIn(page, `/runs?project=${PROJECT}&col=config.lr&col=eval/acc`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect.poll(() => names(page)).toEqual(['lr-huge', 'lr-big', 'lr-mid', 'lr-small']);
  await expect(page.locator('tr[data-run] td[data-column="eval/acc"]').first()).toHaveText('0.42');

  // A header sorts by its column; again, the other way.
  await page.getByTestId('sort-config.lr').click();
  await expect(page).toHaveURL(/sort=config\.lr/);
  await expect.poll(() => names(page)).toEqual(['lr-small', 'lr-mid', 'lr-big', 'lr-huge']);
  await page.getByTestId('sort-eval/acc').click();
  await page.getByTestId('sort-eval/acc').click();
  await expect(page).toHaveURL(/sort=-eval%2Facc|sort=-eval\/acc/);
  await expect.poll(() => names(page)).toEqual(['lr-mid', 'lr-big', 'lr-small', 'lr-huge']);

  // A config condition filters.
  await applyFilter(page, 'config.lr >= 0.001; config.optimizer = sgd');
  await expect.poll(() => names(page)).toEqual(['lr-big', 'lr-huge']);
  await applyFilter(page, 'config.lr >= 0.001');
  await expect.poll(() => names(page)).toEqual(['lr-mid', 'lr-big', 'lr-huge']);

  // Ticked runs go into the URL.
  await page.getByLabel('select lr-mid').check();
  await expect(page).toHaveURL(new RegExp(`select=${ids['lr-mid']}`));
  await page.getByLabel('select lr-huge').check();
  await expect(page.getByTestId('selection')).toContainText('2 selected');
  const shared = page.url();
  await page.screenshot({ path: 'artifacts/runs-table.png', fullPage: true });

  // The same link in a fresh browser, through sign-in (the filter's spaces
  // survive the round trip): same sort, filter, columns and selection.
  const other = await (await browser.newContext()).newPage();
  await signIn(other, shared.replace(url(), ''));
  await expect(other.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect.poll(() => names(other)).toEqual(['lr-mid', 'lr-big', 'lr-huge']);
  await expect(other.getByLabel('select lr-mid')).toBeChecked();
  await expect(other.getByLabel('select lr-huge')).toBeChecked();
  await expect(other.getByLabel('select lr-big')).not.toBeChecked();
  await expect(other.getByTestId('run-filters').getByLabel('Config', { exact: true })).toHaveValue('config.lr >= 0.001');

  // Compare: the run page overlays them and shows where their configs differ.
  await other.getByTestId('compare-selected').click();
  await expect(other).toHaveURL(new RegExp(`/runs/${ids['lr-mid']}\\?compare=${ids['lr-huge']}`));
  const diff = other.getByTestId('config-diff');
  await expect(diff.getByTestId('diff-count')).toContainText('2 of 3 keys differ');
  await expect(diff.locator('tr[data-key="lr"]')).toContainText('0.001');
  await expect(diff.locator('tr[data-key="lr"]')).toContainText('0.1');
  await expect(diff.locator('tr[data-key="seed"]')).toHaveCount(0);
  await diff.getByRole('link', { name: 'Show every key' }).click();
  await expect(diff.locator('tr[data-key="seed"]')).toBeVisible();
  await expect(other.locator('figure.chart[data-key="eval/acc"] svg')).toContainText('lr-huge');
  await other.screenshot({ path: 'artifacts/runs-compare.png', fullPage: true });

  // The scatter plot of the filtered runs, drawn by the server.
  await page.getByTestId('plot-form').getByLabel('X').fill('config.lr');
  await page.getByTestId('plot-form').locator('select[name="x_scale"]').selectOption('log');
  await page.getByTestId('plot-form').getByLabel('Y').fill('eval/acc');
  await page.getByTestId('plot-form').getByRole('button', { name: 'Plot' }).click();
  await expect(page.getByTestId('scatter').locator('circle')).toHaveCount(3);
  await expect(page.getByTestId('scatter')).toContainText('config.lr (log scale)');
});

test('the links the mlflow client prints open the run page', async ({ page, request }) => {
  const created = await request.post(url() + '/api/v1/runs', {
    headers: asAdmin(), data: { project: 'default', name: 'from-mlflow' } });
  expect(created.status(), await created.text()).toBe(201);
  const run = await created.json();
  await signIn(page, '/runs');
  // What the client prints after a run: SERVER/#/experiments/EXPERIMENT/runs/RUN.
  await page.goto(url() + `/#/experiments/0/runs/${run.id}`);
  await expect(page).toHaveURL((at) => at.pathname === `/runs/${run.id}`);
  await page.goto(url() + '/#/experiments/0');
  await expect(page).toHaveURL((at) => at.pathname === '/runs' && at.searchParams.get('project') === 'default');
});
