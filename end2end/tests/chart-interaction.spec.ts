// A hydrated chart reads out the nearest point under the pointer (step,
// value, wall time) and zooms to a range dragged across it, writing `from`
// and `to` into the address (the From and To fields follow).
import { test, expect } from '@playwright/test';
import { asAdmin, signIn, url } from './helpers';

test('pointing at a chart reads the nearest point; dragging zooms and the URL keeps it', async ({ page, request }) => {
  const headers = asAdmin();
  const run = await (await request.post(url() + '/api/v1/runs', { headers, data: { name: 'pointed-at' } })).json();
  // value = 2 × step, steps 0–99, one second apart.
  const points = Array.from({ length: 100 }, (_, step) => ({ key: 'train/loss', step, wall_time: 1.7e9 + step, value: 2 * step }));
  expect((await request.post(url() + `/api/v1/runs/${run.id}/metrics`, { headers, data: { batch_id: 'b', points } })).status()).toBe(200);

  await signIn(page, `/runs/${run.id}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  const figure = page.locator('figure.chart[data-key="train/loss"]');
  const svg = figure.locator('svg');
  const attribute = async (name: string) => Number(await svg.getAttribute(name));
  // The page x of a step, and the y of the plot's middle, measured afresh:
  // the page may still move (a section above it filling in) after hydration.
  const place = async () => {
    await svg.scrollIntoViewIfNeeded();
    const [left, right, xMin, xMax, width] = await Promise.all(
      ['data-plot-left', 'data-plot-right', 'data-x-min', 'data-x-max', 'width'].map(attribute));
    const box = (await svg.boundingBox())!;
    const scale = box.width / width;
    return {
      pageX: (step: number) => box.x + (left + (step - xMin) / (xMax - xMin) * (right - left)) * scale,
      y: box.y + box.height / 2,
    };
  };

  const readout = figure.getByTestId('chart-readout');
  let { pageX, y } = await place();
  // Pointing again after a miss: a pointer that does not move sends no event.
  await expect(async () => {
    ({ pageX, y } = await place());
    await page.mouse.move(pageX(40), y);
    await page.mouse.move(pageX(40) + 1, y);
    await expect(readout).toContainText('step 40: 80 at ', { timeout: 2_000 });
  }).toPass({ timeout: 30_000 });

  await page.mouse.move(pageX(20), y);
  await page.mouse.down();
  await page.mouse.move(pageX(50), y, { steps: 5 });
  await expect(figure.getByTestId('zoom-selection')).toBeVisible();
  await page.mouse.up();
  await expect(page).toHaveURL(/from=(19|20)&to=(50|51)/);
  await expect(page.getByLabel('From')).toHaveValue(/^(19|20)$/);
  await expect(page.getByLabel('To')).toHaveValue(/^(50|51)$/);
  // The zoomed chart spans that range only.
  const zoomed = page.locator('figure.chart[data-key="train/loss"] svg');
  await expect.poll(async () => Number(await zoomed.getAttribute('data-x-max'))).toBeLessThan(60);
  await page.screenshot({ path: 'artifacts/chart-zoomed.png', fullPage: true });
});
