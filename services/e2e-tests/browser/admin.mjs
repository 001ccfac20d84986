// Walks mneme's admin dashboard in headless Chromium like a person would,
// and fails on the first thing that goes wrong: a step that cannot be done,
// any console error or warning, an uncaught page error, or a request of the
// app that fails. Screenshots of every screen go to MNEME_SCREENSHOT_DIR.
//
// Run by services/e2e-tests/tests/admin_browser.rs, which starts the stack
// and seeds it. Environment:
//   MNEME_ADMIN_URL        the dashboard, e.g. http://127.0.0.1:PORT/admin
//   MNEME_ADMIN_EMAIL      an owner of the seeded tenant
//   MNEME_ADMIN_PASSWORD   their password
//   MNEME_MEMORY_TERM      a word contained in a seeded memory
//   MNEME_MEMBER_EMAIL, MNEME_MEMBER_PASSWORD
//                          optional: a member of the same tenant, who sees
//                          every read-only screen and no managing control
//   MNEME_PLATFORM_EMAIL, MNEME_PLATFORM_PASSWORD, MNEME_TENANT_NAME
//                          optional: a platform admin, who then picks that
//                          tenant (the owner's) and finds the key made above
//   MNEME_SCREENSHOT_DIR   where the PNGs go (created if missing)
//   CHROMIUM               the browser (default /usr/bin/chromium)
//   MNEME_BROWSER_TEST_DIR where `npm ci` put playwright-core (setup.sh);
//                          falls back to this directory's node_modules

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import path from 'node:path';

const here = path.dirname(new URL(import.meta.url).pathname);
const packageDir = process.env.MNEME_BROWSER_TEST_DIR || here;

function need(name) {
  const value = process.env[name];
  if (!value) fail(`the environment variable ${name} is not set`);
  return value;
}

function fail(message) {
  console.error(`admin browser test FAILED: ${message}`);
  process.exit(1);
}

let chromium;
try {
  ({ chromium } = createRequire(path.join(packageDir, 'package.json'))('playwright-core'));
} catch (error) {
  fail(`playwright-core is not installed in ${packageDir}/node_modules (${error.message}); ` +
    'run MNEME_INSTALL_TEST_TOOLS=1 ./deploy/local/setup.sh');
}

const adminUrl = need('MNEME_ADMIN_URL');
const email = need('MNEME_ADMIN_EMAIL');
const password = need('MNEME_ADMIN_PASSWORD');
const term = need('MNEME_MEMORY_TERM');
const shots = need('MNEME_SCREENSHOT_DIR');
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const memberEmail = process.env.MNEME_MEMBER_EMAIL;
const memberPassword = process.env.MNEME_MEMBER_PASSWORD;
const platformEmail = process.env.MNEME_PLATFORM_EMAIL;
const platformPassword = process.env.MNEME_PLATFORM_PASSWORD;
const tenantName = process.env.MNEME_TENANT_NAME;
const origin = new URL(adminUrl).origin;
const KEY_NAME = 'browser-agent';
const GROUP_NAME = 'browser-team';
mkdirSync(shots, { recursive: true });
rmSync(path.join(shots, 'failure.png'), { force: true });

// ------------------------------------------------------------ what counts as broken

const problems = [];
let step = 'start';
const started = Date.now();

/** The one answer that is expected to be an error: "not signed in" on load. */
function expected401(url, status) {
  return status === 401 && new URL(url).pathname === '/admin/api/session';
}

function watch(page) {
  page.on('console', (msg) => {
    const type = msg.type();
    if (type !== 'error' && type !== 'warning') return;
    const text = msg.text();
    const where = msg.location()?.url || '';
    if (where && /status of 401/.test(text) && expected401(where, 401)) return;
    problems.push(`[${step}] console ${type}: ${text}${where ? ` (${where})` : ''}`);
  });
  page.on('pageerror', (error) => problems.push(`[${step}] uncaught page error: ${error.stack || error.message}`));
  page.on('requestfailed', (request) => {
    if (!request.url().startsWith(origin)) return;
    problems.push(`[${step}] request failed: ${request.method()} ${request.url()}: ${request.failure()?.errorText}`);
  });
  page.on('response', (response) => {
    const url = response.url();
    if (!url.startsWith(origin)) return;
    const status = response.status();
    if (status >= 400 && !expected401(url, status)) {
      problems.push(`[${step}] ${response.request().method()} ${url} answered ${status}`);
    }
  });
}

function check() {
  if (problems.length) throw new Error(`the page misbehaved:\n  ${problems.join('\n  ')}`);
}

// ------------------------------------------------------------ helpers

let page;

/** Waits until the screen `id` is shown and finished loading. */
async function screen(id) {
  await page.locator(`#main > .view[data-screen="${id}"] h1`).first().waitFor();
  await page.waitForFunction(() => !document.querySelector('#main .loading'), null, { timeout: 30_000 });
  check();
}

async function shot(name, options = {}) {
  // No focus ring and no passing status message in the pictures (a
  // message appears 30 ms after it is announced).
  await page.waitForTimeout(100);
  // The pointer rests on the empty middle of the top bar: no hover styles.
  await page.mouse.move(Math.round(page.viewportSize().width * 0.6), 20);
  await page.evaluate(() => {
    if (document.activeElement && document.activeElement.blur) document.activeElement.blur();
    document.getElementById('status').textContent = '';
  });
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true, animations: 'disabled', caret: 'initial', ...options });
}

async function go(label, id) {
  step = id;
  const toggle = page.locator('#menu-btn');
  if (await toggle.isVisible()) await toggle.click();
  await page.locator('#sidebar').getByRole('link', { name: label, exact: true }).click();
  await screen(id);
}

/** Every form control has a label and nothing carries an inline style. */
async function checkMarkup() {
  const issues = await page.evaluate(() => {
    const found = [];
    for (const el of document.querySelectorAll('input, select, textarea')) {
      if (el.type === 'hidden' || el.closest('[hidden]')) continue;
      const named = (el.labels && el.labels.length) || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby');
      if (!named) found.push(`unlabelled ${el.tagName.toLowerCase()} name=${el.name || '?'}`);
    }
    // (Playwright's screenshots leave an empty style="" behind: not ours.)
    for (const el of document.querySelectorAll('[style]')) {
      if (el.getAttribute('style').trim()) found.push(`inline style on <${el.tagName.toLowerCase()}>`);
    }
    for (const el of document.querySelectorAll('[onclick], [onchange], [onsubmit]')) found.push(`event-handler attribute on <${el.tagName.toLowerCase()}>`);
    for (const table of document.querySelectorAll('#main table')) {
      if (table.querySelector('thead th:not([scope])')) found.push('a table header without scope');
    }
    if (document.querySelectorAll('#main h1').length !== 1) found.push(`${document.querySelectorAll('#main h1').length} h1 elements`);
    return found;
  });
  if (issues.length) throw new Error(`markup problems on ${step}: ${issues.join('; ')}`);
}

async function visit(label, id) {
  await go(label, id);
  await checkMarkup();
  await shot(id);
}

// ------------------------------------------------------------ the walk

async function walk(browser) {
  const context = await browser.newContext({
    viewport: { width: 1280, height: 860 },
    deviceScaleFactor: 1,
    locale: 'en-GB',
    timezoneId: 'UTC',
    colorScheme: 'light',
    reducedMotion: 'reduce',
  });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  page = await context.newPage();
  page.setDefaultTimeout(20_000);
  watch(page);

  step = 'sign-in';
  await page.goto(adminUrl);
  await page.getByLabel('Email').waitFor();
  check();
  await shot('signin');
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();

  step = 'overview';
  await screen('overview');
  await page.locator('.kpis .kpi').first().waitFor();
  await checkMarkup();

  // Keys: create one, copy its secret once.
  await go('API keys', 'keys');
  await page.getByRole('button', { name: 'Create key' }).first().click();
  let dialog = page.getByRole('dialog', { name: 'Create API key' });
  await dialog.getByLabel('Name').fill(KEY_NAME);
  await dialog.getByLabel(/^Read/).check();
  await dialog.getByLabel(/^Write/).check();
  await dialog.getByLabel('Fragment limit').fill('10000');
  await dialog.getByRole('button', { name: 'Create key' }).click();
  dialog = page.getByRole('dialog', { name: `Key “${KEY_NAME}” created` });
  await dialog.waitFor();
  await dialog.getByText('you will not see it again').waitFor();
  const secret = (await dialog.locator('#new-key-secret').textContent()).trim();
  if (!secret.startsWith('mn_')) throw new Error(`the new key's secret does not look like a key: ${secret.slice(0, 6)}…`);
  await dialog.getByRole('button', { name: 'Copy' }).click();
  await dialog.getByRole('button', { name: 'Copied' }).waitFor();
  const clipboard = await page.evaluate(() => navigator.clipboard.readText());
  if (!clipboard.startsWith('mn_') || clipboard !== secret) throw new Error('the clipboard does not hold the new key after Copy');
  check();
  await shot('key-created', { fullPage: false, mask: [dialog.locator('#new-key-secret')], maskColor: '#0f172a' });
  await dialog.getByRole('button', { name: 'Done' }).click();
  await dialog.waitFor({ state: 'detached' });
  const row = page.locator(`tr[data-key-name="${KEY_NAME}"]`);
  await row.waitFor();
  await screen('keys');
  const keyId = await row.getAttribute('data-key-id');
  await checkMarkup();
  await shot('keys');

  // A quota change shows in the table.
  step = 'keys: quota';
  await row.getByRole('button', { name: `Edit key ${KEY_NAME}` }).click();
  dialog = page.getByRole('dialog', { name: `Edit key “${KEY_NAME}”` });
  await dialog.getByLabel('Daily call limit').fill('777');
  await dialog.getByLabel('Fragment limit').fill('2500');
  await dialog.getByRole('button', { name: 'Save changes' }).click();
  await dialog.waitFor({ state: 'detached' });
  await screen('keys');
  await row.locator('[data-col="dailyCallLimit"]', { hasText: '/ 777' }).waitFor();
  await row.locator('[data-col="fragmentLimit"]', { hasText: '/ 2,500' }).waitFor();
  check();

  // Groups: create one and put the new key in it.
  await go('Key groups', 'groups');
  await page.getByRole('button', { name: 'Create group' }).click();
  dialog = page.getByRole('dialog', { name: 'Create key group' });
  await dialog.getByLabel('Name').fill(GROUP_NAME);
  await dialog.getByLabel('Description').fill('Agents of the browser test share their memories.');
  await dialog.getByRole('button', { name: 'Create group' }).click();
  await dialog.waitFor({ state: 'detached' });
  const group = page.getByRole('region', { name: `Group ${GROUP_NAME}` });
  await group.waitFor();
  await screen('groups');
  await group.getByLabel(`Key to add to ${GROUP_NAME}`).selectOption({ label: KEY_NAME });
  await group.getByRole('button', { name: 'Add key' }).click();
  await page.getByRole('region', { name: `Group ${GROUP_NAME}` }).getByRole('button', { name: `Remove ${KEY_NAME} from ${GROUP_NAME}` }).waitFor();
  await screen('groups');
  await checkMarkup();
  await shot('groups');

  // Memory: search for the seeded term, open the memory.
  await go('Memory', 'memory');
  await page.getByRole('searchbox', { name: 'Search' }).fill(term);
  await page.getByRole('searchbox', { name: 'Search' }).press('Enter');
  const hit = page.locator('tr[data-memory-id] a', { hasText: term }).first();
  await hit.waitFor();
  await screen('memory');
  await checkMarkup();
  await shot('memory');
  step = 'memory detail';
  await hit.click();
  await page.locator('.memory-content', { hasText: term }).waitFor();
  await screen('memory');
  await page.getByRole('heading', { name: /^Links \(\d+\)$/ }).waitFor();
  // Field names read as words, acronyms in capitals.
  await page.locator('dl.props dt', { hasText: /^TTL tier$/ }).waitFor();
  await checkMarkup();

  // Amend: the earlier text is kept as a version.
  step = 'memory: amend';
  const content = await page.locator('.memory-content').textContent();
  await page.getByLabel('Content', { exact: true }).fill(`${content} The browser test checked this.`);
  await page.getByLabel('Reason').fill('clarified by the browser test');
  await page.getByRole('button', { name: 'Save amendment' }).click();
  await page.locator('.memory-content', { hasText: 'The browser test checked this.' }).waitFor();
  await screen('memory');
  await page.getByRole('heading', { name: /^Versions \([1-9]\d*\)$/ }).waitFor();
  check();
  await checkMarkup();
  await shot('memory-detail');

  // Export downloads NDJSON; import sends a file through the write path.
  step = 'memory: export and import';
  await page.getByRole('link', { name: '← Back to memory' }).click();
  await screen('memory');
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('link', { name: /^Export/ }).click(),
  ]);
  const exported = readFileSync(await download.path(), 'utf8').split('\n').filter((l) => l.trim());
  if (exported.length < 6) throw new Error(`the export holds ${exported.length} lines, expected the 6 seeded memories`);
  for (const line of exported) JSON.parse(line);
  const importFile = path.join(mkdtempSync(path.join(tmpdir(), 'mneme-admin-')), 'import.ndjson');
  writeFileSync(importFile, [
    { content: 'Imported in the browser test: the staging cluster runs in eu-west-1.', topic: 'infra', type: 'fact' },
    { content: 'Imported in the browser test: deploys freeze from 20 December to 2 January.', topic: 'deploy', type: 'decision' },
    { content: 'A line without its topic and type is refused.' },
  ].map((line) => JSON.stringify(line)).join('\n'));
  await page.getByRole('button', { name: 'Import NDJSON' }).click();
  dialog = page.getByRole('dialog', { name: 'Import memories' });
  await dialog.getByLabel('Into key').selectOption({ label: KEY_NAME });
  await dialog.getByLabel('NDJSON file').setInputFiles(importFile);
  await dialog.getByRole('button', { name: 'Import' }).click();
  await dialog.getByText('2 imported, 0 duplicates, 1 failed.').waitFor();
  await dialog.getByRole('table', { name: 'Lines that failed' }).getByRole('rowheader', { name: '3' }).waitFor();
  await shot('memory-import', { fullPage: false });
  await dialog.getByRole('button', { name: 'Close' }).click();
  await dialog.waitFor({ state: 'detached' });
  await screen('memory');
  rmSync(path.dirname(importFile), { recursive: true, force: true });

  // Graph: at least one node drawn, and the list for screen readers.
  await go('Knowledge graph', 'graph');
  await page.locator('svg.graph .node circle').first().waitFor();
  const nodes = await page.locator('svg.graph .node circle').count();
  const edges = await page.locator('svg.graph line.edge').count();
  if (nodes < 1) throw new Error('the graph drew no node');
  if (edges < 1) throw new Error('the graph drew no link although the seeded memories are linked');
  const listed = await page.getByRole('table', { name: /Memories in the graph/ }).locator('tbody tr').count();
  if (listed !== nodes) throw new Error(`the graph draws ${nodes} nodes but lists ${listed}`);
  // Hover and keyboard focus both show a node's label.
  await page.locator('svg.graph .node').first().hover();
  await page.locator('svg.graph .tip[visibility="visible"]').waitFor();
  await page.mouse.move(1, 1);
  await page.locator('svg.graph .tip[visibility="hidden"]').waitFor({ state: 'attached' });
  await page.locator('svg.graph .node').first().focus();
  await page.locator('svg.graph .tip[visibility="visible"]').waitFor();
  await checkMarkup();
  await shot('graph');

  // Sessions: terminate the seeded MCP session.
  await go('Sessions', 'sessions');
  const sessionRow = page.locator('tr[data-session-id]').first();
  await sessionRow.waitFor();
  const sessionId = await sessionRow.getAttribute('data-session-id');
  await page.getByRole('heading', { name: 'Automatic reflections' }).waitFor();
  await checkMarkup();
  await shot('sessions');
  step = 'sessions: terminate';
  await sessionRow.getByRole('button', { name: /^Terminate session/ }).click();
  dialog = page.getByRole('dialog', { name: 'Terminate this session?' });
  await dialog.getByRole('button', { name: 'Terminate session' }).click();
  await dialog.waitFor({ state: 'detached' });
  await page.locator(`tr[data-session-id="${sessionId}"]`).waitFor({ state: 'detached' });
  await screen('sessions');
  if (await page.locator(`tr[data-session-id="${sessionId}"]`).count()) throw new Error('the terminated session is still listed');

  // Every other screen.
  await visit('Users', 'users');
  await page.getByRole('rowheader', { name: email }).waitFor();
  await visit('Surfacing', 'surfacing');
  await visit('Upstreams', 'upstreams');
  await go('Consolidation', 'consolidation');
  step = 'consolidation: dry run';
  await page.getByRole('button', { name: 'Dry run' }).click();
  await page.getByRole('heading', { name: 'Dry run: what would change' }).waitFor({ timeout: 120_000 });
  await page.locator('#main .view[data-screen="consolidation"] tbody tr').first().waitFor();
  check();
  await checkMarkup();
  await shot('consolidation');
  // The pod samples its counters every 10 s: refresh until the request
  // chart has a line to draw.
  await go('Metrics & usage', 'metrics');
  const requestChart = page.getByRole('figure', { name: 'Requests and errors over time' }).locator('path');
  for (let i = 0; i < 12 && !(await requestChart.count()); i++) {
    await page.waitForTimeout(2000);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await screen('metrics');
  }
  await requestChart.first().waitFor();
  await checkMarkup();
  await shot('metrics');

  // The audit log shows the key creation.
  await visit('Audit log', 'audit');
  const auditText = await page.locator('#main table').first().innerText();
  const lines = auditText.split('\n').filter((l) => /key/i.test(l) && (l.includes(KEY_NAME) || l.includes(keyId)));
  if (!lines.length) throw new Error(`the audit log does not show the creation of key ${KEY_NAME} (${keyId})`);

  // The overview again, now with the changes above in its recent activity.
  await go('Overview', 'overview');
  await page.getByRole('table', { name: 'Recent changes' }).waitFor();
  await shot('overview');

  // A phone: the nav collapses behind a button and the overview still reads.
  step = 'phone';
  await page.setViewportSize({ width: 375, height: 800 });
  await page.locator('#menu-btn').waitFor();
  if (await page.locator('#sidebar').isVisible()) throw new Error('on a phone the navigation should be collapsed');
  await go('Key groups', 'groups');
  // Loaded afresh on the small screen, as a phone would (charts are drawn
  // for the width they start at).
  await page.goto(`${adminUrl}#/overview`);
  await screen('overview');
  await shot('overview-phone');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 1) throw new Error(`on a phone the overview is ${overflow}px wider than the screen`);
  await page.setViewportSize({ width: 1280, height: 860 });

  // Sign out: back to the sign-in form.
  step = 'sign-out';
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await page.getByLabel('Password').waitFor();
  if (await page.locator('#app').isVisible()) throw new Error('the dashboard is still shown after signing out');
  // The session is gone on the server too: a reload shows the sign-in form.
  await page.reload();
  await page.getByLabel('Password').waitFor();
  check();

  if (memberEmail) await member();
  if (platformEmail) await platformAdmin();
  await context.close();
}

/**
 * A member looks around: no managing page in the navigation, no managing
 * button anywhere, and no request the API refuses (a 403 fails the walk).
 */
async function member() {
  step = 'member: sign-in';
  await page.getByLabel('Email').fill(memberEmail);
  await page.getByLabel('Password').fill(memberPassword);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await screen('overview');
  const nav = page.locator('#sidebar');
  for (const hidden of ['API keys', 'Key groups', 'Users', 'Audit log', 'Upstreams']) {
    if (await nav.getByRole('link', { name: hidden, exact: true }).count()) {
      throw new Error(`a member's navigation offers ${hidden}`);
    }
  }
  await go('Memory', 'memory');
  if (await page.getByRole('button', { name: 'Import NDJSON' }).count()) throw new Error('a member is offered the import');
  await page.locator('tr[data-memory-id] a').first().click();
  await page.locator('.memory-content').waitFor();
  await screen('memory');
  if (await page.getByRole('button', { name: 'Forget' }).count()) throw new Error('a member is offered Forget');
  await go('Knowledge graph', 'graph');
  await go('Sessions', 'sessions');
  if (await page.getByRole('button', { name: /^Terminate/ }).count()) throw new Error('a member is offered Terminate');
  await go('Consolidation', 'consolidation');
  if (await page.getByRole('button', { name: 'Run now' }).count()) throw new Error('a member is offered Run now');
  await go('Surfacing', 'surfacing');
  await go('Metrics & usage', 'metrics');
  // A managing page typed into the address bar explains itself.
  await page.goto(`${adminUrl}#/keys`);
  await page.getByText('Only the tenant’s owners and admins can see this page.').waitFor();
  step = 'member: sign-out';
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('Password').waitFor();
  check();
}

/** A platform admin picks the owner's tenant and acts in it. */
async function platformAdmin() {
  step = 'platform: sign-in';
  await page.getByLabel('Email').fill(platformEmail);
  await page.getByLabel('Password').fill(platformPassword);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await screen('overview');
  const picker = page.getByRole('combobox', { name: 'Tenant', exact: true });
  await picker.waitFor();
  const tenantId = await picker.locator('option', { hasText: tenantName }).getAttribute('value');
  // Every tenant-scoped call names the picked tenant.
  const scoped = [];
  const onRequest = (request) => {
    const url = new URL(request.url());
    if (url.pathname.startsWith('/admin/api/') && !/^\/admin\/api\/(session|tenants)/.test(url.pathname)) {
      scoped.push(url);
    }
  };
  page.on('request', onRequest);
  await picker.selectOption(tenantId);
  await page.locator('#main .page-head .sub', { hasText: tenantName }).waitFor();
  await screen('overview');
  await go('API keys', 'keys');
  await page.locator(`tr[data-key-name="${KEY_NAME}"]`).waitFor();
  page.off('request', onRequest);
  const unscoped = scoped.filter((url) => url.searchParams.get('tenant') !== tenantId);
  if (!scoped.length || unscoped.length) {
    throw new Error(`a platform admin's call did not name the tenant: ${unscoped.map(String).join(', ')}`);
  }
  await go('Tenants', 'tenants');
  await page.getByRole('rowheader', { name: tenantName, exact: true }).waitFor();
  await checkMarkup();
  await shot('tenants');
  step = 'platform: sign-out';
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('Password').waitFor();
  check();
}

const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] }).catch((error) => {
  fail(`Chromium did not start from ${executablePath} (${error.message.split('\n')[0]}); ` +
    'run MNEME_INSTALL_TEST_TOOLS=1 ./deploy/local/setup.sh');
});
try {
  await walk(browser);
  check();
  console.log(`admin browser test passed in ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${shots}`);
} catch (error) {
  if (page) {
    await page.screenshot({ path: path.join(shots, 'failure.png'), fullPage: true }).catch(() => {});
  }
  const extra = problems.length ? `\nalso seen:\n  ${problems.join('\n  ')}` : '';
  console.error(`admin browser test FAILED at step "${step}": ${error.message}${extra}`);
  console.error(`(a screenshot of the page is in ${path.join(shots, 'failure.png')})`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
