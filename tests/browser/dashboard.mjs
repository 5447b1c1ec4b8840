// The dashboard in a real browser: Debian's chromium, driven by the
// playwright-core pinned in package-lock.json. tests/dashboard.rs starts a
// node, makes jobs in every state and runs this script with:
//
//   COHORT_URL       the node's base URL
//   COHORT_MODE      `pages` (every page, a bulk cancel, a retry, a live
//                    update, read-only tokens) or `render` (first-render
//                    times, printed as one JSON line)
//   COHORT_TOKEN     an admin token ('' when the node has no tokens)
//   COHORT_READ_TOKEN  a read-only token ('' to skip that part)
//   COHORT_TEAM      {"token": a read token confined to namespace "team-a",
//                    "job": its one job (queued), weight 3, quotas
//                    waiting_max 100}; '' to skip that part
//   COHORT_JOBS      {"queued": [ids], ..., "module": "<echo digest>"}
//   COHORT_EGRESS    {"job": id, "deployment": name, "grant": url,
//                    "origin": url, "denied": url}: a deployment granted
//                    `grant` for POST, and its job that called `origin`
//                    (200) and `denied` (refused); '' to skip that part
//   CHROMIUM         the browser's path
//   NODE_MODULES     where playwright-core is installed
//   SCREENSHOTS      where the PNGs go
//
// Every wait is bounded (WAIT); the script exits 0 only if every check
// passed, and prints one line per check.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const env = (name) => process.env[name] ?? '';
const { chromium } = await import(pathToFileURL(join(env('NODE_MODULES'), 'playwright-core/index.mjs')).href);

const URL_ = env('COHORT_URL');
const WAIT = 15000;
const shots = env('SCREENSHOTS');

const check = (ok, what) => {
  if (!ok) throw new Error(`FAILED: ${what}`);
  console.log(`ok - ${what}`);
};

const profile = mkdtempSync(join(tmpdir(), 'cohort-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env('CHROMIUM'),
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
context.setDefaultTimeout(WAIT);
// The pages' console errors and uncaught exceptions, printed on failure.
const consoleLines = [];
context.on('page', (page) => {
  page.on('console', (message) => { if (message.type() === 'error') consoleLines.push(message.text()); });
  page.on('pageerror', (error) => consoleLines.push(`uncaught: ${error.message}`));
});

// The view named `name` has loaded its data for the page's current URL.
const ready = (page, name) => page.waitForFunction((view) => {
  const root = document.querySelector('#view');
  return root.dataset.view === view && root.dataset.ready === '1' && root.dataset.hash === window.location.hash;
}, name);
const text = async (page, selector) => (await page.textContent(selector))?.trim() ?? '';
const shot = (page, name) => page.screenshot({ path: join(shots, name), fullPage: true });

async function logIn(page, token) {
  await page.goto(`${URL_}/#/`);
  if (!token) return;
  await page.waitForSelector('[data-testid="login-token"]', { state: 'visible' });
  await page.fill('[data-testid="login-token"]', token);
  await page.click('[data-testid="login-submit"]');
  await page.waitForSelector('[data-testid="logout"]', { state: 'visible' });
}

async function pages() {
  const jobs = JSON.parse(env('COHORT_JOBS'));
  const admin = env('COHORT_TOKEN');
  const page = await context.newPage();
  const api = async (path, options = {}) => {
    const headers = { 'content-type': 'application/json', ...(admin ? { authorization: `Bearer ${admin}` } : {}) };
    const response = await fetch(`${URL_}${path}`, { ...options, headers });
    if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
    return response.json();
  };

  // Without a token the page asks for one (when the node has tokens).
  if (admin) {
    await page.goto(`${URL_}/#/`);
    await page.waitForSelector('[data-testid="login-token"]', { state: 'visible' });
    check(true, 'without a token the login field shows');
  }
  await logIn(page, admin);

  // Overview.
  await ready(page, 'overview');
  for (const state of ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'dead']) {
    const shown = Number(await text(page, `[data-testid="count-${state}"]`));
    check(shown >= (jobs[state] || []).length, `overview counts ${shown} ${state} (at least ${(jobs[state] || []).length})`);
  }
  check(await page.locator('[data-testid="overview-nodes"] tr[data-node]').count() >= 1, 'overview lists the node');
  check((await text(page, '[data-testid="overview-master"]')).includes('epoch'), 'overview shows the master and its epoch');
  await page.waitForFunction(() => document.querySelector('[data-testid="live"]').textContent === 'live');
  check(true, 'the event stream is live');

  // Namespaces: each with its weight, jobs and quotas; a name lists its jobs.
  const team = env('COHORT_TEAM') ? JSON.parse(env('COHORT_TEAM')) : null;
  if (team) {
    await page.click('[data-testid="nav-namespaces"]');
    await ready(page, 'namespaces');
    const row = 'tr[data-namespace="team-a"]';
    check((await text(page, `${row} [data-testid="namespace-weight"]`)) === '3'
      && (await text(page, `${row} [data-testid="namespace-queued"]`)) === '1'
      && (await text(page, `${row} [data-testid="namespace-submitted"]`)) === '1',
    `team-a shows its weight and its one queued job: "${await text(page, row)}"`);
    check((await text(page, `${row} [data-testid="namespace-quotas"]`)) === 'waiting ≤ 100',
      `team-a shows its quota: "${await text(page, `${row} [data-testid="namespace-quotas"]`)}"`);
    check(await page.locator('tr[data-namespace="default"]').count() === 1, 'the default namespace is listed');
    await shot(page, 'namespaces.png');
    await page.click(`${row} a`);
    await page.waitForFunction(() => window.location.hash.includes('namespace=team-a'));
    await ready(page, 'jobs');
    const listed = await page.locator('[data-testid="jobs-table"] tr[data-job]').evaluateAll((trs) => trs.map((tr) => Number(tr.dataset.job)));
    check(JSON.stringify(listed) === JSON.stringify([team.job]), `team-a's link lists its job alone: ${JSON.stringify(listed)}`);
    await page.goto(`${URL_}/#/`);
    await ready(page, 'overview');
  }

  // A live update: a job submitted elsewhere shows without a reload.
  const before = Number(await text(page, '[data-testid="count-queued"]'))
    + Number(await text(page, '[data-testid="count-running"]'))
    + Number(await text(page, '[data-testid="count-succeeded"]'));
  await api('/v1/jobs', { method: 'POST', body: JSON.stringify({ module: jobs.module, input: 'live update' }) });
  await page.waitForFunction((was) => {
    const n = (s) => Number(document.querySelector(`[data-testid="count-${s}"]`).textContent);
    return n('queued') + n('running') + n('succeeded') > was;
  }, before);
  check(true, 'a new job shows on the overview without a reload');
  // A throughput line needs two overviews a second apart.
  await page.waitForSelector('[data-testid="chart-throughput"] polyline');
  check(true, 'the throughput chart draws');
  await shot(page, 'overview.png');

  // Jobs filtered by the form, kept in the URL.
  await page.click('[data-testid="nav-jobs"]');
  await ready(page, 'jobs');
  await page.selectOption('[data-testid="filter-state"]', 'failed');
  await page.click('[data-testid="filter-apply"]');
  await page.waitForFunction(() => window.location.hash.includes('state=failed'));
  await ready(page, 'jobs');
  const failedRows = await page.locator('[data-testid="jobs-table"] tr[data-job]').evaluateAll(
    (rows) => rows.map((r) => [Number(r.dataset.job), r.querySelector('td.state').textContent.trim()]));
  check(JSON.stringify(failedRows.map(([id]) => id).sort()) === JSON.stringify([...jobs.failed].sort()),
    `the failed filter lists exactly the failed jobs ${JSON.stringify(failedRows)}`);
  check(failedRows.every(([, state]) => state === 'failed'), 'every listed job is failed');
  await page.reload();
  await ready(page, 'jobs');
  check(await page.locator('[data-testid="jobs-table"] tr[data-job]').count() === jobs.failed.length
    && (await page.inputValue('[data-testid="filter-state"]')) === 'failed', 'a reload keeps the filter');

  // A failed job's page: attempts, error, input; retry it.
  const failed = jobs.failed[0];
  await page.click(`[data-testid="jobs-table"] tr[data-job="${failed}"] a`);
  await ready(page, 'jobs');
  await page.waitForSelector('[data-testid="job-state"]');
  check(await page.locator('[data-testid="job-attempts"] [data-attempt]').count() >= 1, 'the job shows its attempts');
  check(await page.locator('[data-testid="attempt-calls"]').count() === 0, 'an attempt without HTTP calls shows no calls');
  check((await page.textContent('#view')).includes('job_error'), 'the job shows its error code');
  check((await text(page, '[data-testid="job-input"] pre')).length > 0, 'the job shows its input');
  // What its attempts cost, each and all together, as the worker metered it.
  const attemptUsage = await text(page, '[data-testid="attempt-usage"]');
  check(/^CPU \d+(\.\d+)? (µs|ms|s), peak memory [\d.]+ (B|KiB|MiB), outbound 0 B$/.test(attemptUsage),
    `an attempt shows what it cost: "${attemptUsage}"`);
  const jobUsage = await text(page, '[data-testid="job-usage"]');
  check(jobUsage.startsWith('CPU ') && !jobUsage.includes('CPU 0 µs'), `the job shows what its attempts cost: "${jobUsage}"`);
  const jobNamespace = await text(page, '[data-testid="job-namespace"]');
  check(jobNamespace === 'default', `the job shows its namespace: "${jobNamespace}"`);
  await shot(page, 'job.png');
  await page.click('[data-testid="job-retry"]');
  await page.waitForFunction(() => {
    const state = document.querySelector('[data-testid="job-state"] .state');
    return state !== null && !state.classList.contains('failed');
  });
  check(true, 'retry moves the failed job out of failed');

  // The first queued job asks for a label no worker has: its page says it
  // waits for one; the second waits for the slot, and says nothing.
  for (const [id, waits] of [[jobs.queued[0], true], [jobs.queued[1], false]]) {
    await page.goto(`${URL_}/#/jobs/${id}`);
    await page.waitForSelector('[data-testid="job-placement"]');
    const placement = await text(page, '[data-testid="job-placement"]');
    check(placement.includes('no worker has its labels') === waits, `job ${id}'s placement says "${placement}"`);
  }
  check((await page.textContent('#view')).includes('gpu=a100') === false, 'the second queued job asks for no label');
  await page.goto(`${URL_}/#/jobs/${jobs.queued[0]}`);
  await page.waitForSelector('[data-testid="job-placement"]');
  check((await page.textContent('#view')).includes('gpu=a100'), 'the first queued job shows the label it asks for');

  // Bulk cancel of the queued jobs, with its preview.
  await page.goto(`${URL_}/#/jobs?state=queued`);
  await ready(page, 'jobs');
  const queued = await page.locator('[data-testid="jobs-table"] tr[data-job]').count();
  check(queued >= jobs.queued.length, `${queued} queued jobs listed`);
  await page.click('[data-testid="bulk-cancel"]');
  await page.waitForSelector('[data-testid="bulk-preview"]', { state: 'visible' });
  const preview = await text(page, '[data-testid="bulk-preview"]');
  check(preview === `Cancel ${queued} job${queued === 1 ? '' : 's'}?`, `the preview says "${preview}"`);
  await shot(page, 'bulk.png');
  await page.click('[data-testid="bulk-confirm"]');
  await page.waitForSelector('[data-testid="bulk-result"]');
  const result = await text(page, '[data-testid="bulk-result"]');
  check(result === `Cancelled ${queued} job${queued === 1 ? '' : 's'}.`, `the result says "${result}"`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="jobs-table"] tr[data-job]').length === 0);
  check(true, 'no queued job is left');
  await page.goto(`${URL_}/#/jobs?state=cancelled`);
  await ready(page, 'jobs');
  for (const id of jobs.queued) {
    check(await page.locator(`[data-testid="jobs-table"] tr[data-job="${id}"]`).count() === 1, `job ${id} is now cancelled`);
  }
  await shot(page, 'jobs.png');

  // A job submitted by a deployment's name is listed by that name.
  await page.goto(`${URL_}/#/jobs?module=${jobs.module}`);
  await ready(page, 'jobs');
  check((await page.textContent('[data-testid="jobs-table"]')).includes('greet v1'), 'the jobs list names the deployment a job ran');

  // Modules.
  await page.click('[data-testid="nav-modules"]');
  await ready(page, 'modules');
  check(await page.locator(`[data-testid="modules-table"] tr[data-module="${jobs.module}"]`).count() === 1, 'the modules page lists the module');
  check((await page.textContent(`tr[data-module="${jobs.module}"]`)).includes('rust'), 'the module says its language');
  check((await page.textContent(`tr[data-module="${jobs.module}"] [data-testid="module-names"]`)).includes('greet v1'), 'the module says the deployment that runs it');
  // Each deployment's grants, or none.
  const egress = env('COHORT_EGRESS') ? JSON.parse(env('COHORT_EGRESS')) : null;
  check((await text(page, 'tr[data-deployment="greet"] [data-testid="deployment-grants"]')) === 'no network',
    'a deployment without grants says it has no network');
  if (egress) {
    const grants = `tr[data-deployment="${egress.deployment}"] [data-testid="deployment-grants"]`;
    const grant = `${grants} li[data-grant="${egress.grant}"]`;
    check(await page.locator(`${grants} li`).count() === 1
      && (await text(page, `${grant} [data-testid="grant-url"]`)) === egress.grant
      && (await text(page, `${grant} [data-testid="grant-methods"]`)) === 'POST'
      && await page.locator(`${grant} [data-testid="grant-private"]`).count() === 0,
    `the granted deployment shows its grant: "${await text(page, grants)}"`);
  }
  await shot(page, 'modules.png');
  if (egress) {
    // Its job's calls: the granted one answered, the other refused.
    await page.goto(`${URL_}/#/jobs/${egress.job}`);
    await ready(page, 'jobs');
    const calls = '[data-testid="attempt-calls"] tr[data-call]';
    const rows = await page.locator(calls).evaluateAll((trs) => trs.map((tr) => ({
      cells: [...tr.querySelectorAll('td')].map((td) => td.textContent.trim()),
      failed: tr.classList.contains('failed'),
      status: tr.querySelector('[data-testid="call-status"]')?.textContent ?? null,
      error: tr.querySelector('[data-testid="call-error"]')?.textContent ?? null,
    })));
    const shown = JSON.stringify(rows);
    check(rows.length === 2, `the job shows its two calls ${shown}`);
    check(rows[0].cells[0] === 'POST' && rows[0].cells[1] === egress.origin && rows[0].status === '200'
      && !rows[0].failed && rows[0].error === null, `the granted call shows its status ${shown}`);
    check(rows[1].cells[0] === 'GET' && rows[1].cells[1] === egress.denied && rows[1].error === 'egress_denied'
      && rows[1].failed && rows[1].status === null, `the refused call shows its code as a failure ${shown}`);
    check(rows[0].cells[3] === '0 B' && rows[0].cells[4] === '2 B' && rows.every((row) => /^\d+(\.\d)? m?s$/.test(row.cells[5])),
      `each call shows its bytes out and in and its time ${shown}`);
    check(await page.locator('[data-testid="calls-dropped"]').count() === 0, 'no call went unrecorded');
    await shot(page, 'job-calls.png');
    await page.goto(`${URL_}/#/modules`);
    await ready(page, 'modules');
  }
  await page.click(`tr[data-module="${jobs.module}"] [data-testid="module-names"] a`);
  await page.waitForFunction(() => window.location.hash.includes('module=greet'));
  await ready(page, 'jobs');
  check((await page.locator('[data-testid="jobs-table"] tr[data-job]').count()) === 1
    && (await page.textContent('[data-testid="jobs-table"]')).includes('greet v1'), 'a deployment lists the jobs submitted by its name');

  // A read-only token sees everything and no button that changes things.
  const read = env('COHORT_READ_TOKEN');
  if (read) {
    await page.click('[data-testid="logout"]');
    await page.waitForSelector('[data-testid="login-token"]', { state: 'visible' });
    await page.fill('[data-testid="login-token"]', read);
    await page.click('[data-testid="login-submit"]');
    await page.waitForSelector('[data-testid="logout"]', { state: 'visible' });
    check((await text(page, '[data-testid="whoami"]')).includes('read'), 'the read token is shown with its scope');
    await page.goto(`${URL_}/#/jobs?state=dead`);
    await ready(page, 'jobs');
    check(await page.locator('[data-testid="bulk-cancel"], [data-testid="bulk-retry"]').count() === 0, 'read scope: no bulk buttons');
    await page.goto(`${URL_}/#/jobs/${jobs.dead[0]}`);
    await page.waitForSelector('[data-testid="job-state"]');
    check(await page.locator('[data-testid="job-retry"], [data-testid="job-cancel"]').count() === 0, 'read scope: no retry or cancel');
  }
  // A token confined to a namespace: its namespace's page, its jobs, and
  // nothing of another's.
  if (team) {
    await page.click('[data-testid="logout"]');
    await page.waitForSelector('[data-testid="login-token"]', { state: 'visible' });
    await page.fill('[data-testid="login-token"]', team.token);
    await page.click('[data-testid="login-submit"]');
    await page.waitForSelector('[data-testid="logout"]', { state: 'visible' });
    check((await text(page, '[data-testid="whoami"]')).includes('namespace team-a'), 'the confined token is shown with its namespace');
    await page.goto(`${URL_}/#/namespaces`);
    await ready(page, 'namespaces');
    const rows = await page.locator('[data-testid="namespaces-table"] tr[data-namespace]').evaluateAll((trs) => trs.map((tr) => tr.dataset.namespace));
    check(JSON.stringify(rows) === '["team-a"]', `the confined token sees its namespace alone: ${JSON.stringify(rows)}`);
    check(await page.locator('[data-testid="nav-overview"]:visible, [data-testid="nav-modules"]:visible').count() === 0,
      'no cluster-wide page is offered to it');
    await page.goto(`${URL_}/#/jobs`);
    await ready(page, 'jobs');
    const mine = await page.locator('[data-testid="jobs-table"] tr[data-job]').evaluateAll((trs) => trs.map((tr) => Number(tr.dataset.job)));
    check(JSON.stringify(mine) === JSON.stringify([team.job]), `its jobs list holds its job alone: ${JSON.stringify(mine)}`);
    // Its event stream carries its namespace's counts: a job of its
    // namespace submitted elsewhere shows without a reload, and one of
    // another namespace does not.
    await page.waitForFunction(() => document.querySelector('[data-testid="live"]').textContent === 'live');
    check(true, "the confined token's event stream is live");
    await api('/v1/jobs', { method: 'POST', body: JSON.stringify({ module: jobs.module, input: 'elsewhere' }) });
    const added = await api('/v1/jobs', { method: 'POST', body: JSON.stringify({ module: jobs.module, input: 'team live', namespace: 'team-a' }) });
    await page.waitForFunction((id) => document.querySelector(`[data-testid="jobs-table"] tr[data-job="${id}"]`) !== null, added.id);
    const now = await page.locator('[data-testid="jobs-table"] tr[data-job]').evaluateAll((trs) => trs.map((tr) => Number(tr.dataset.job)));
    check(JSON.stringify(now) === JSON.stringify([added.id, team.job]), `a new job of its namespace shows without a reload, no other: ${JSON.stringify(now)}`);
    await page.goto(`${URL_}/#/jobs/${team.job}`);
    await page.waitForSelector('[data-testid="job-state"]');
    check((await text(page, '[data-testid="job-namespace"]')) === 'team-a', 'its job shows its namespace');
    await page.goto(`${URL_}/#/jobs/${jobs.dead[0]}`);
    await page.waitForSelector('[data-testid="error"]:visible');
    check((await text(page, '[data-testid="error"]')).startsWith('job_not_found'),
      `another namespace's job is a job that does not exist: "${await text(page, '[data-testid="error"]')}"`);
    await shot(page, 'namespace-confined.png');
  }
  const refused = consoleLines.filter((line) => line.includes('Content Security Policy'));
  check(refused.length === 0, `nothing the page does breaks its content security policy ${JSON.stringify(refused)}`);
  await page.close();
}

// Cold loads of the overview and the jobs list, timed from navigation to
// the view's data on screen.
async function render() {
  const times = {};
  // A filter no job matches makes the master scan its bound (100,000
  // jobs) for one page: the slowest list there is.
  for (const [name, hash, view] of [['overview_ms', '#/', 'overview'], ['jobs_ms', '#/jobs', 'jobs'],
    ['jobs_failed_ms', '#/jobs?state=failed', 'jobs']]) {
    const page = await context.newPage();
    const started = Date.now();
    await page.goto(`${URL_}/${hash}`);
    await ready(page, view);
    times[name] = Date.now() - started;
    check(true, `${hash} drawn in ${times[name]} ms`);
    await shot(page, `render-${name.replace(/_ms$/, '')}.png`);
    await page.close();
  }
  // Paging through them: next, then previous, comes back to the same page.
  const page = await context.newPage();
  await page.goto(`${URL_}/#/jobs`);
  await ready(page, 'jobs');
  const first = async () => Number(await page.getAttribute('[data-testid="jobs-table"] tr[data-job]', 'data-job'));
  const top = await first();
  await page.click('[data-testid="page-next"]');
  await ready(page, 'jobs');
  const below = await first();
  check(below === top - 50, `the next page starts 50 jobs further (${top} then ${below})`);
  await page.click('[data-testid="page-prev"]');
  await ready(page, 'jobs');
  check(await first() === top, 'the previous page is the first one again');
  await page.close();
  console.log(JSON.stringify(times));
}

let failed = false;
try {
  if (env('COHORT_MODE') === 'render') await render();
  else await pages();
} catch (error) {
  console.log(error.message);
  // What the page said, to tell a server error from a page bug.
  for (const page of context.pages()) {
    const shown = await page.textContent('#error').catch(() => null);
    if (shown) console.log(`the page showed: ${shown.trim()}`);
    await shot(page, 'failure.png').catch(() => {});
  }
  for (const line of consoleLines) console.log(`console: ${line}`);
  failed = true;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
