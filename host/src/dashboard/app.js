// The cohort dashboard: one script, no framework, no build step.
//
// Every view is a function of the URL (the hash: `#/jobs?state=failed`),
// so a reload or a shared link shows the same thing. Data comes from the
// node's API with the token typed into the login field (kept in this tab's
// sessionStorage only). One server-sent event stream (`/v1/events`, read
// with fetch so it can carry the token) brings an overview every second:
// the overview redraws from it, the jobs list reloads its page when the
// counts changed, a job's page while the job is not finished.
//
// Server text is only ever put in the page as text (textContent, never
// innerHTML), whatever it holds.
//
// A token confined to a namespace reaches its namespace's jobs and DAGs
// and the namespaces page alone (every other route is 403 to it): for it
// the page opens on its namespace and shows no overview or modules; its
// event stream carries its namespace's counts (`namespaces` events), which
// refresh its pages as the overview refreshes a cluster-wide token's.
'use strict';

const STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'dead'];
const FINISHED = ['succeeded', 'failed', 'cancelled', 'dead'];
const RETRYABLE = ['failed', 'dead', 'cancelled'];
const PAGE_SIZE = 50;
const SAMPLES_MAX = 120;
const PREVIEW_BYTES = 4096;
const TOKEN_KEY = 'cohort-token';

const $ = (selector) => document.querySelector(selector);

// ---------------------------------------------------------------- the API

const auth = { token: sessionStorage.getItem(TOKEN_KEY) || '', scopes: [], required: false, namespace: null };

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// fetch with the token; a non-2xx answer becomes an ApiError with the
// server's code and message.
async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (auth.token) headers.Authorization = `Bearer ${auth.token}`;
  let response;
  try {
    response = await fetch(path, { ...options, headers });
  } catch (error) {
    throw new ApiError(0, 'unreachable', `the node did not answer: ${error.message}`);
  }
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      // Not the API's JSON: keep the status.
    }
    throw new ApiError(response.status, body?.code || `http_${response.status}`,
      body?.message || response.statusText);
  }
  return response;
}

const getJson = async (path) => (await api(path)).json();

const postJson = async (path, body) => (await api(path, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
})).json();

const isAdmin = () => auth.scopes.includes('admin');

// ------------------------------------------------------------ DOM helpers

// el('td', {class: 'mono'}, 'text', childNode): strings become text nodes.
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Downloads are Blob URLs (fetched with the token); each holds its bytes
// in memory until revoked, so the view's are revoked when it changes.
const blobUrls = [];
function blobUrl(blob) {
  const url = URL.createObjectURL(blob);
  blobUrls.push(url);
  return url;
}
function revokeBlobUrls() {
  for (const url of blobUrls.splice(0)) URL.revokeObjectURL(url);
}

const pad = (n) => String(n).padStart(2, '0');
function time(ms) {
  if (ms === null || ms === undefined) return '';
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function duration(ms) {
  if (ms === null || ms === undefined) return '';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

const badge = (state) => el('span', { class: `state ${state}` }, state);
const short = (digest) => (digest ? `${digest.slice(0, 12)}…` : '');

function bytes(n) {
  if (n === null || n === undefined) return '';
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1 << 20)).toFixed(1)} MiB`;
}

// ------------------------------------------------------- errors and login

function showError(error) {
  if (error instanceof ApiError && error.status === 401) {
    showLogin(error.message);
    return;
  }
  const box = $('#error');
  box.hidden = false;
  box.textContent = error instanceof ApiError
    ? `${error.code}: ${error.message}` : String(error.message || error);
}

function clearError() {
  $('#error').hidden = true;
  $('#error').textContent = '';
}

function showLogin(message) {
  $('#login').hidden = false;
  $('#logout').hidden = true;
  $('#whoami').textContent = '';
  stopStream();
  const box = $('#error');
  box.hidden = false;
  box.textContent = message ? `unauthorized: ${message}` : 'This node needs a token.';
}

async function whoami() {
  const who = await getJson('/v1/whoami');
  auth.scopes = who.scopes;
  auth.required = who.tokens_required;
  auth.namespace = who.namespace || null;
  $('#whoami').textContent = who.tokens_required
    ? `token ${who.token || '?'} (${who.scopes.join(', ')}${auth.namespace ? `, namespace ${auth.namespace}` : ''})`
    : 'no tokens needed';
  // A confined token's pages: its namespace's, none cluster-wide.
  for (const name of ['overview', 'modules']) $(`[data-testid="nav-${name}"]`).hidden = auth.namespace !== null;
  $('#logout').hidden = !who.tokens_required;
  $('#login').hidden = true;
}

async function start() {
  try {
    await whoami();
  } catch (error) {
    showError(error);
    return;
  }
  clearError();
  startStream();
  render();
}

$('#login').addEventListener('submit', (event) => {
  event.preventDefault();
  auth.token = $('#token').value.trim();
  sessionStorage.setItem(TOKEN_KEY, auth.token);
  $('#token').value = '';
  start();
});

$('#logout').addEventListener('click', () => {
  auth.token = '';
  auth.scopes = [];
  sessionStorage.removeItem(TOKEN_KEY);
  $('#view').replaceChildren();
  showLogin('');
});

// ----------------------------------------------------- live: /v1/events

const live = { controller: null, retry: 1000, last: null, samples: [], listeners: new Set() };

function setLive(on) {
  const badgeNode = $('[data-testid="live"]');
  badgeNode.textContent = on ? 'live' : 'offline';
  badgeNode.classList.toggle('on', on);
}

function stopStream() {
  if (live.controller) live.controller.abort();
  live.controller = null;
  setLive(false);
}

// Reads the stream until it ends, then tries again after a growing pause
// (1 s doubling to 10 s); a 401 ends it and shows the login.
async function startStream() {
  stopStream();
  const controller = new AbortController();
  live.controller = controller;
  while (live.controller === controller) {
    try {
      const response = await api('/v1/events', { signal: controller.signal });
      setLive(true);
      live.retry = 1000;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          receive(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
      if (error instanceof ApiError && error.status === 401) {
        showError(error);
        return;
      }
    }
    setLive(false);
    await new Promise((resolve) => { setTimeout(resolve, live.retry); });
    live.retry = Math.min(live.retry * 2, 10000);
  }
}

function receive(block) {
  let name = 'message';
  let data = '';
  for (const line of block.split('\n')) {
    if (line.startsWith('event: ')) name = line.slice(7);
    else if (line.startsWith('data: ')) data += line.slice(6);
  }
  if (name === 'namespaces') {
    // A confined token's stream: its namespace's counts, nothing
    // cluster-wide; its pages listen to them as to an overview's.
    const { namespaces } = JSON.parse(data);
    const counts = { jobs: namespaces.length ? namespaces[0].jobs : {}, namespaces };
    live.last = counts;
    for (const listener of live.listeners) listener(counts);
    return;
  }
  if (name !== 'overview') return;
  const overview = JSON.parse(data);
  sample(overview);
  live.last = overview;
  for (const listener of live.listeners) listener(overview);
}

// Keeps the last SAMPLES_MAX overviews' figures for the charts.
function sample(overview) {
  const previous = live.samples[live.samples.length - 1];
  if (previous && previous.at >= overview.at) return;
  live.samples.push({
    at: overview.at,
    submitted: overview.submitted_total,
    attempts: overview.attempts_total,
    p50: overview.latency_ms ? overview.latency_ms.p50 : null,
    p99: overview.latency_ms ? overview.latency_ms.p99 : null,
  });
  if (live.samples.length > SAMPLES_MAX) live.samples.shift();
}

// ------------------------------------------------------------- the router

let generation = 0;

function currentPlace() {
  const hash = window.location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  return { path, params: new URLSearchParams(query || '') };
}

async function render() {
  generation += 1;
  const mine = generation;
  live.listeners.clear();
  revokeBlobUrls();
  clearError();
  const root = $('#view');
  root.removeAttribute('data-ready');
  root.replaceChildren();
  const { path, params } = currentPlace();
  const parts = path.split('/').filter(Boolean);
  for (const link of document.querySelectorAll('nav a')) {
    const target = link.getAttribute('href').slice(1);
    link.classList.toggle('active', target === '/' ? parts.length === 0 : path.startsWith(target));
  }
  let view;
  if (parts.length === 0) view = auth.namespace === null ? overviewView : namespacesView;
  else if (parts[0] === 'namespaces') view = namespacesView;
  else if (parts[0] === 'jobs' && parts.length === 1) view = jobsView;
  else if (parts[0] === 'jobs' && parts.length === 2) view = (r, p, still) => jobView(r, parts[1], still);
  else if (parts[0] === 'modules') view = modulesView;
  else view = (r) => { r.append(el('p', {}, 'No such page.')); };
  root.setAttribute('data-view', parts[0] || 'overview');
  // Which URL the view shows: a test waits for this one to be ready.
  root.setAttribute('data-hash', window.location.hash);
  const still = () => mine === generation;
  try {
    await view(root, params, still);
    if (still()) root.setAttribute('data-ready', '1');
  } catch (error) {
    if (still()) showError(error);
  }
}

window.addEventListener('hashchange', render);

// --------------------------------------------------------------- overview

async function overviewView(root, _params, still) {
  const overview = live.last || await getJson('/v1/overview');
  if (!still()) return;
  if (!live.last) sample(overview);
  const body = el('div');
  root.append(body);
  drawOverview(body, overview);
  live.listeners.add((next) => { if (still()) drawOverview(body, next); });
}

function drawOverview(body, o) {
  const cards = el('div', { class: 'cards' }, STATES.map((state) => el('div', { class: 'card' },
    el('a', { href: `#/jobs?state=${state}` },
      el('div', { class: 'n', 'data-testid': `count-${state}` }, o.jobs[state] ?? 0),
      el('div', { class: 'label' }, badge(state))))));
  const master = el('p', { 'data-testid': 'overview-master' },
    o.master.node ? `The master runs on ${o.master.node}, epoch ${o.master.epoch}.`
      : 'No master is known right now.',
    ` ${o.submitted_total} jobs submitted, ${o.attempts_total} attempts, ${o.retries_total} retries since the journal began; `
    + `answered by ${o.node} at ${time(o.at)}.`);
  const nodes = el('table', { 'data-testid': 'overview-nodes' },
    el('tr', {}, ['node', 'status', 'roles', 'address', 'slots busy/total', 'version', 'master'].map((h) => el('th', {}, h))),
    o.nodes.map((n) => el('tr', { 'data-node': n.id },
      el('td', {}, n.id), el('td', {}, n.status), el('td', {}, n.roles.join(', ')),
      el('td', { class: 'mono' }, n.http), el('td', {}, n.roles.includes('worker') ? `${n.busy}/${n.slots}` : ''),
      el('td', {}, n.version), el('td', {}, n.master ? `yes (epoch ${o.master.epoch})` : ''))));
  const replicas = el('table', { 'data-testid': 'replicas' },
    el('tr', {}, el('th', {}, 'replica'), el('th', {}, 'entries behind')),
    o.replicas.length ? o.replicas.map((r) => el('tr', {}, el('td', {}, r.node), el('td', {}, r.behind)))
      : el('tr', {}, el('td', { colspan: 2, class: 'muted' }, 'No replicas: one back-end node.')));
  const history = el('ul', { class: 'history', 'data-testid': 'history' },
    o.history.length ? o.history.map((h) => el('li', {}, el('span', { class: 'muted' }, time(h.at)), ' ', h.message))
      : el('li', { class: 'muted' }, 'Nothing yet.'));
  const latency = o.latency_ms
    ? `p50 ${o.latency_ms.p50} ms, p99 ${o.latency_ms.p99} ms over the ${o.finished_recent} jobs finished in the last ${o.recent_ms / 1000} s`
    : `no job finished in the last ${o.recent_ms / 1000} s`;
  body.replaceChildren(
    el('h1', {}, 'Overview'), cards, master,
    el('div', { class: 'grid2' },
      el('div', {}, el('h2', {}, 'Throughput (per second)'), throughputChart()),
      el('div', {}, el('h2', {}, 'Latency, submission to end (ms)'), latencyChart(), el('div', { class: 'legend' }, latency))),
    el('h2', {}, 'Nodes'), nodes,
    el('div', { class: 'grid2' },
      el('div', {}, el('h2', {}, 'Replica lag'), replicas),
      el('div', {}, el('h2', {}, `Seen lately by ${o.node}`), history)));
}

// A line chart of `series` ([{name, colour, values}]) over the samples.
function chart(testid, series) {
  const width = 600;
  const height = 140;
  const all = series.flatMap((s) => s.values.filter((v) => v !== null));
  const top = Math.max(1, ...all);
  const step = width / Math.max(1, SAMPLES_MAX - 1);
  const box = svg('svg', { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: 'none' });
  for (const s of series) {
    const offset = SAMPLES_MAX - s.values.length;
    const points = s.values.map((v, i) => (v === null ? null
      : `${((offset + i) * step).toFixed(1)},${(height - 4 - (v / top) * (height - 12)).toFixed(1)}`))
      .filter(Boolean);
    if (points.length) {
      box.append(svg('polyline', { points: points.join(' '), fill: 'none', stroke: s.colour, 'stroke-width': 2 }));
    }
  }
  box.append(svg('text', { x: 4, y: 12, 'font-size': 11, fill: '#667085' }, `max ${Math.round(top)}`));
  // A line of the series' colour, drawn rather than styled (the page's
  // content security policy allows no inline styles).
  const swatch = (colour) => svg('svg', { width: 14, height: 4, class: 'swatch' },
    svg('rect', { width: 14, height: 4, fill: colour }));
  const legend = el('div', { class: 'legend' }, series.map((s) => [swatch(s.colour), ' ', s.name, ' ']));
  return el('div', { class: 'chart', 'data-testid': testid }, box, legend);
}

function rates(key) {
  const out = [];
  for (let i = 1; i < live.samples.length; i += 1) {
    const [a, b] = [live.samples[i - 1], live.samples[i]];
    const seconds = Math.max(0.001, (b.at - a.at) / 1000);
    out.push(Math.max(0, (b[key] - a[key]) / seconds));
  }
  return out;
}

const throughputChart = () => chart('chart-throughput', [
  { name: 'submitted', colour: '#2f5bea', values: rates('submitted') },
  { name: 'attempts started', colour: '#1f9d55', values: rates('attempts') },
]);

const latencyChart = () => chart('chart-latency', [
  { name: 'p50', colour: '#2f5bea', values: live.samples.map((s) => s.p50) },
  { name: 'p99', colour: '#d92d20', values: live.samples.map((s) => s.p99) },
]);

// ------------------------------------------------------------------- jobs

const FILTERS = ['state', 'module', 'namespace', 'priority', 'from', 'to', 'error'];

// The filter as the API takes it, from the URL.
function filterOf(params) {
  const filter = {};
  for (const name of FILTERS) {
    const value = params.get(name);
    if (value === null || value === '') continue;
    filter[name] = ['priority', 'from', 'to'].includes(name) ? Number(value) : value;
  }
  return filter;
}

const localInput = (ms) => {
  if (!ms) return '';
  const d = new Date(Number(ms));
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
};

function filterForm(params) {
  const field = (label, input) => el('label', {}, label, input);
  const state = el('select', { 'data-testid': 'filter-state', name: 'state' },
    el('option', { value: '' }, 'any'),
    STATES.map((s) => el('option', { value: s, selected: params.get('state') === s }, s)));
  const text = (name, size, placeholder) => el('input', {
    'data-testid': `filter-${name}`, name, size, placeholder, value: params.get(name) || '',
  });
  const module = text('module', 20, 'sha256 or name');
  const namespace = text('namespace', 12, 'any');
  const priority = el('input', { 'data-testid': 'filter-priority', name: 'priority', type: 'number', value: params.get('priority') || '', class: 'narrow' });
  const from = el('input', { 'data-testid': 'filter-from', type: 'datetime-local', value: localInput(params.get('from')) });
  const to = el('input', { 'data-testid': 'filter-to', type: 'datetime-local', value: localInput(params.get('to')) });
  const error = text('error', 18, 'text in the error');
  const form = el('form', { class: 'filters' },
    field('State', state), field('Module', module), field('Namespace', namespace), field('Priority', priority),
    field('Submitted from', from), field('to', to), field('Error', error),
    el('button', { type: 'submit', class: 'primary', 'data-testid': 'filter-apply' }, 'Apply'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    const put = (name, value) => { if (value !== '' && value !== null) next.set(name, value); };
    put('state', state.value);
    put('module', module.value.trim());
    put('namespace', namespace.value.trim());
    put('priority', priority.value);
    put('from', from.value ? String(new Date(from.value).getTime()) : '');
    put('to', to.value ? String(new Date(to.value).getTime() + 59999) : '');
    put('error', error.value.trim());
    window.location.hash = `#/jobs?${next}`;
  });
  return form;
}

async function jobsView(root, params, still) {
  root.append(el('h1', {}, 'Jobs'), filterForm(params));
  const table = el('table', { 'data-testid': 'jobs-table' });
  const pager = el('div', { class: 'pager' });
  const actions = el('div', { class: 'actions' });
  root.append(actions, table, pager);
  const filter = filterOf(params);
  if (isAdmin()) {
    actions.append(
      el('button', { 'data-testid': 'bulk-cancel', onclick: () => bulk('cancel', filter) }, 'Cancel matching…'),
      el('button', { 'data-testid': 'bulk-retry', onclick: () => bulk('retry', filter) }, 'Retry matching…'));
  }
  const load = async () => {
    const query = new URLSearchParams(params);
    query.delete('back');
    query.set('order', 'newest');
    query.set('limit', String(PAGE_SIZE));
    const page = await getJson(`/v1/jobs?${query}`);
    if (!still()) return;
    drawJobs(table, page.jobs);
    drawPager(pager, params, page);
  };
  await load();
  reloadOnCounts(load, still);
}

// Calls `load` again whenever the stream (an overview, or a confined
// token's namespace) shows the job counts changed, while the page stays.
function reloadOnCounts(load, still) {
  let counts = live.last ? JSON.stringify(live.last.jobs) : null;
  live.listeners.add((next) => {
    const now = JSON.stringify(next.jobs);
    if (now !== counts && still()) {
      counts = now;
      load().catch(showError);
    }
  });
}

function drawJobs(table, jobs) {
  table.replaceChildren(
    el('tr', {}, ['id', 'state', 'module', 'priority', 'attempts', 'submitted', 'finished', 'error'].map((h) => el('th', {}, h))),
    ...(jobs.length ? jobs.map((j) => el('tr', { 'data-job': j.id },
      el('td', {}, el('a', { href: `#/jobs/${j.id}` }, j.id)),
      el('td', { class: 'state' }, badge(j.state)),
      // The deployment a job was submitted by says more than a digest.
      el('td', { class: 'mono' }, el('a', { href: `#/jobs?module=${j.module}`, title: j.module },
        j.module_name ? `${j.module_name} v${j.module_version}` : short(j.module))),
      el('td', {}, j.priority), el('td', {}, j.attempts),
      el('td', {}, time(j.submitted_at)), el('td', {}, time(j.finished_at)),
      el('td', { class: 'mono' }, j.error_code || '')))
      : [el('tr', {}, el('td', { colspan: 8, class: 'muted' }, 'No job matches.'))]));
}

// Pages go forward by the server's cursor; the cursors behind are kept in
// the URL (`back`), so "Previous" works after a reload too.
function drawPager(pager, params, page) {
  const back = (params.get('back') || '').split(',').filter((c) => c !== '');
  const to = (cursor, stack) => {
    const next = new URLSearchParams(params);
    if (cursor) next.set('cursor', cursor); else next.delete('cursor');
    if (stack.length) next.set('back', stack.join(',')); else next.delete('back');
    window.location.hash = `#/jobs?${next}`;
  };
  const here = params.get('cursor') || '0';
  pager.replaceChildren(
    el('button', {
      'data-testid': 'page-prev',
      disabled: !params.get('cursor'),
      onclick: () => { const stack = back.slice(0, -1); const prev = back[back.length - 1]; to(prev === '0' ? '' : prev, stack); },
    }, '← Previous'),
    el('button', {
      'data-testid': 'page-next',
      disabled: !page.next_cursor,
      onclick: () => to(page.next_cursor, [...back, here]),
    }, 'Next →'),
    el('span', { class: 'muted' }, page.next_cursor ? 'more jobs match' : 'end of the list'));
}

// A bulk action: counted first (a dry run), confirmed in the page, then
// sent as one command.
async function bulk(action, filter) {
  try {
    const { matched } = await postJson('/v1/jobs/bulk', { action, filter, dry_run: true });
    const verb = action === 'cancel' ? 'Cancel' : 'Retry';
    const ok = await confirmDialog(`${verb} ${matched} job${matched === 1 ? '' : 's'}?`);
    if (!ok) return;
    const { changed } = await postJson('/v1/jobs/bulk', { action, filter });
    const done = action === 'cancel' ? 'Cancelled' : 'Queued again';
    // The list is drawn again; the result shows above it once it is.
    render();
    const root = await waitReady();
    if (root) {
      root.prepend(el('div', { class: 'notice', 'data-testid': 'bulk-result' },
        `${done} ${changed} job${changed === 1 ? '' : 's'}.`));
    }
  } catch (error) {
    showError(error);
  }
}

function waitReady() {
  return new Promise((resolve) => {
    const root = $('#view');
    const started = Date.now();
    const check = () => {
      if (root.getAttribute('data-ready') === '1') resolve(root);
      else if (Date.now() - started > 10000) resolve(null);
      else setTimeout(check, 20);
    };
    check();
  });
}

function confirmDialog(text) {
  return new Promise((resolve) => {
    const dialog = $('#dialog');
    $('#dialog-text').textContent = text;
    dialog.hidden = false;
    const close = (answer) => {
      dialog.hidden = true;
      $('#dialog-confirm').onclick = null;
      $('#dialog-back').onclick = null;
      resolve(answer);
    };
    $('#dialog-confirm').onclick = () => close(true);
    $('#dialog-back').onclick = () => close(false);
  });
}

// -------------------------------------------------------------- one job

async function jobView(root, idText, still) {
  const id = Number(idText);
  const job = await getJson(`/v1/jobs/${encodeURIComponent(idText)}`);
  if (!still()) return;
  const body = el('div');
  root.append(body);
  // The input never changes and the output comes once: each is fetched
  // once per visit, not at every refresh (an input may be 4 MiB).
  const previews = new Map();
  await drawJob(body, job, still, previews);
  if (!FINISHED.includes(job.state)) {
    let busy = false;
    let finished = false;
    live.listeners.add(async () => {
      if (busy || finished || !still()) return;
      busy = true;
      try {
        const next = await getJson(`/v1/jobs/${id}`);
        // Drawn once more in its final state, then left alone.
        finished = FINISHED.includes(next.state);
        if (still()) await drawJob(body, next, still, previews);
      } catch (error) {
        showError(error);
      } finally {
        busy = false;
      }
    });
  }
}

async function drawJob(body, job, still, previews) {
  const actions = el('div', { class: 'actions' });
  if (isAdmin() && ['queued', 'running'].includes(job.state)) {
    actions.append(el('button', {
      'data-testid': 'job-cancel', class: 'danger',
      onclick: () => act(() => api(`/v1/jobs/${job.id}`, { method: 'DELETE' })),
    }, 'Cancel'));
  }
  if (isAdmin() && RETRYABLE.includes(job.state)) {
    actions.append(el('button', {
      'data-testid': 'job-retry', class: 'primary',
      onclick: () => act(() => postJson('/v1/jobs/bulk', { action: 'retry', filter: { ids: [job.id] } })),
    }, 'Retry'));
  }
  const facts = el('dl', { class: 'facts' },
    [['state', el('span', { 'data-testid': 'job-state' }, badge(job.state))],
      ['namespace', el('span', { 'data-testid': 'job-namespace' }, job.namespace || 'default')],
      ['module', el('a', { class: 'mono', href: `#/jobs?module=${job.module}` }, job.module)],
      ['deployment', job.module_name
        ? el('span', { 'data-testid': 'job-deployment' }, `${job.module_name} (version ${job.module_version})`)
        : '—'],
      ['priority', job.priority], ['attempts', `${job.attempts.length} of at most ${job.max_attempts}`],
      ['timeout', duration(job.timeout_ms)], ['submitted', time(job.submitted_at)],
      ['finished', time(job.finished_at) || '—'],
      ['next attempt not before', job.not_before ? time(job.not_before) : '—'],
      ['idempotency key', job.idempotency_key || '—'],
      ['error', job.error ? `${job.error.code}: ${job.error.message}` : '—'],
      ['progress', job.progress ? `${Math.round(job.progress.fraction * 100)}% ${job.progress.message}` : '—'],
      ['checkpoint', job.has_checkpoint ? 'saved (a retry resumes from it)' : 'none'],
      ['cost', el('span', { 'data-testid': 'job-usage' },
        usage(job.attempts.some((a) => a.usage) ? job.usage : null))],
      ['worker labels', Object.entries(job.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ') || 'any'],
      ['placement', el('span', { 'data-testid': 'job-placement' }, job.unplaceable
        ? 'waiting: no worker has its labels and memory'
        : '—')],
    ].map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  const input = el('div', { 'data-testid': 'job-input' });
  const output = el('div', { 'data-testid': 'job-output' });
  body.replaceChildren(
    el('h1', {}, `Job ${job.id}`), actions, facts,
    el('h2', {}, 'Attempts'), timeline(job),
    el('div', { 'data-testid': 'job-attempts' }, job.attempts.map((a) => el('div', { 'data-attempt': a.number },
      el('h2', {}, `Attempt ${a.number} on ${a.worker}: ${a.outcome || 'running'}`),
      el('p', { class: 'muted' }, `${time(a.started_at)} → ${time(a.ended_at) || 'now'}`,
        a.duration_ms !== null ? ` (ran ${duration(a.duration_ms)})` : '', a.message ? ` — ${a.message}` : ''),
      a.usage ? el('p', { class: 'muted', 'data-testid': 'attempt-usage' }, usage(a.usage)) : null,
      a.log_tail ? el('pre', {}, a.log_tail) : el('p', { class: 'muted' }, 'No log.'),
      attemptCalls(a)))),
    el('h2', {}, `Input (${bytes(job.input_bytes)})`), input,
    el('h2', {}, 'Output'), output);
  await preview(input, `/v1/jobs/${job.id}/input`, `job-${job.id}-input`, still, previews);
  if (job.state === 'succeeded') {
    await preview(output, `/v1/jobs/${job.id}/result`, `job-${job.id}-output`, still, previews);
  } else {
    output.append(el('p', { class: 'muted' }, `None: the job is ${job.state}.`));
  }
}

// What an attempt (or all of a job's together) cost: CPU time, peak
// memory, outbound bytes.
function usage(u) {
  if (!u) return '—';
  return `CPU ${cpuTime(u.cpu_us)}, peak memory ${bytes(u.memory_peak_bytes)}, outbound ${bytes(u.egress_bytes)}`;
}

// CPU time given in microseconds.
const cpuTime = (us) => (us < 1000 ? `${us} µs` : duration(Math.round(us / 1000)));

// ------------------------------------------------------------- namespaces

// A namespace's quotas in a few words.
function quotaText(q) {
  const words = [];
  if (q.waiting_max != null) words.push(`waiting ≤ ${q.waiting_max}`);
  if (q.running_max != null) words.push(`running ≤ ${q.running_max}`);
  if (q.submissions_per_second != null) words.push(`${q.submissions_per_second} submissions/s`);
  if (q.result_bytes_max != null) words.push(`results ≤ ${bytes(q.result_bytes_max)}`);
  return words.length ? words.join(', ') : 'none';
}

// Each namespace (a confined token: its own): its jobs, what its attempts
// cost, its weight for its fair share of the workers, its quotas.
async function namespacesView(root, _params, still) {
  const body = el('div');
  root.append(el('h1', {}, 'Namespaces'), body);
  const load = async () => {
    const { namespaces } = await getJson('/v1/namespaces');
    if (still()) drawNamespaces(body, namespaces);
  };
  await load();
  reloadOnCounts(load, still);
}

function drawNamespaces(body, namespaces) {
  const heads = ['namespace', 'weight', 'queued', 'running', 'finished', 'submitted', 'CPU', 'outbound', 'results kept', 'quotas'];
  body.replaceChildren(el('table', { 'data-testid': 'namespaces-table' },
    el('tr', {}, heads.map((h) => el('th', {}, h))),
    namespaces.length ? namespaces.map((n) => el('tr', { 'data-namespace': n.name },
      el('td', {}, el('a', { href: `#/jobs?namespace=${encodeURIComponent(n.name)}`, title: 'its jobs' }, n.name)),
      el('td', { 'data-testid': 'namespace-weight' }, n.weight ?? 1),
      el('td', { 'data-testid': 'namespace-queued' }, n.jobs.queued ?? 0),
      el('td', {}, n.jobs.running ?? 0),
      el('td', {}, FINISHED.reduce((sum, state) => sum + (n.jobs[state] ?? 0), 0)),
      el('td', { 'data-testid': 'namespace-submitted' }, n.submitted_total),
      el('td', { 'data-testid': 'namespace-cpu' }, cpuTime(n.cpu_us)),
      el('td', {}, bytes(n.egress_bytes)), el('td', {}, bytes(n.result_bytes ?? 0)),
      el('td', { 'data-testid': 'namespace-quotas' }, quotaText(n.quotas || {}))))
      : el('tr', {}, el('td', { colspan: heads.length, class: 'muted' }, 'No namespace has held a job yet.'))));
}

// An attempt's outbound HTTP calls, in order: where each went and how it
// ended (a refused or failed call shows its code, marked as a failure).
// Nothing when it made none.
function attemptCalls(attempt) {
  const calls = attempt.calls || [];
  const dropped = attempt.calls_dropped || 0;
  if (!calls.length && !dropped) return null;
  const result = (c) => {
    if (c.error) return el('span', { class: 'call-error', 'data-testid': 'call-error' }, c.error);
    if (c.status === undefined || c.status === null) return el('span', { class: 'muted' }, 'no answer');
    return el('span', { class: c.status >= 400 ? 'call-status bad' : 'call-status', 'data-testid': 'call-status' }, c.status);
  };
  return el('div', { class: 'calls', 'data-testid': 'attempt-calls' },
    el('p', { class: 'muted' }, `Outbound HTTP calls: ${calls.length + dropped}`),
    el('table', {},
      el('tr', {}, ['method', 'origin', 'result', 'sent', 'received', 'time'].map((h) => el('th', {}, h))),
      calls.map((c, i) => el('tr', { 'data-call': i, class: c.error ? 'failed' : null },
        el('td', { class: 'mono' }, c.method), el('td', { class: 'mono' }, c.origin),
        el('td', {}, result(c)),
        el('td', { class: 'num' }, bytes(c.sent_bytes)), el('td', { class: 'num' }, bytes(c.received_bytes)),
        el('td', { class: 'num' }, duration(c.ms))))),
    dropped ? el('p', { class: 'muted', 'data-testid': 'calls-dropped' },
      `${dropped} more call${dropped === 1 ? '' : 's'} not recorded.`) : null);
}

async function act(request) {
  try {
    await request();
    render();
  } catch (error) {
    showError(error);
  }
}

// The attempts on one time axis, from submission to the end (or now).
function timeline(job) {
  const width = 900;
  const rowHeight = 26;
  const start = job.submitted_at;
  const end = Math.max(job.finished_at || Date.now(), ...job.attempts.map((a) => a.ended_at || Date.now()));
  const span = Math.max(1, end - start);
  const x = (t) => 110 + ((t - start) / span) * (width - 120);
  const box = svg('svg', { viewBox: `0 0 ${width} ${Math.max(1, job.attempts.length) * rowHeight + 24}` });
  job.attempts.forEach((a, i) => {
    const y = 10 + i * rowHeight;
    const colour = a.outcome === 'succeeded' ? '#1f9d55' : a.outcome ? '#d92d20' : '#2f6fed';
    const x0 = x(a.started_at);
    const x1 = Math.max(x0 + 3, x(a.ended_at || Date.now()));
    box.append(
      svg('text', { x: 4, y: y + 14, 'font-size': 12, fill: '#1d2330' }, `#${a.number} ${a.worker}`),
      svg('rect', { x: x0, y, width: x1 - x0, height: 18, rx: 3, fill: colour },
        svg('title', {}, `${a.outcome || 'running'} ${time(a.started_at)} → ${time(a.ended_at) || 'now'}`)),
      attemptLabel(a.outcome || 'running', x0, x1, y, width));
  });
  box.append(svg('text', { x: 110, y: Math.max(1, job.attempts.length) * rowHeight + 20, 'font-size': 11, fill: '#667085' },
    `${time(start)} → ${time(end)} (${duration(end - start)})`));
  return el('div', { class: 'timeline' }, job.attempts.length ? box : el('p', { class: 'muted' }, 'No attempt yet.'));
}

// The outcome inside a wide bar; beside a narrow one, after it, or before
// it when it ends near the right edge (a late retry's short bar).
function attemptLabel(text, x0, x1, y, width) {
  const at = { y: y + 13, 'font-size': 11 };
  if (x1 - x0 > 90) return svg('text', { ...at, x: x0 + 6, fill: '#fff' }, text);
  if (x1 + 100 < width) return svg('text', { ...at, x: x1 + 4, fill: '#667085' }, text);
  return svg('text', { ...at, x: x0 - 4, 'text-anchor': 'end', fill: '#667085' }, text);
}

// The first PREVIEW_BYTES as text (or hex when not UTF-8), and a download
// that carries the token (a Blob URL, not a link the browser fetches alone).
// `previews` keeps what was fetched, by path, for the next redraw.
async function preview(box, path, name, still, previews) {
  let shown = previews.get(path);
  if (!shown) {
    const data = new Uint8Array(await (await api(path)).arrayBuffer());
    if (!still()) return;
    shown = {
      text: previewText(data),
      size: data.length,
      url: blobUrl(new Blob([data], { type: 'application/octet-stream' })),
    };
    previews.set(path, shown);
  }
  box.replaceChildren(
    el('pre', {}, shown.text),
    el('a', { href: shown.url, download: name }, `Download (${bytes(shown.size)})`));
}

function previewText(data) {
  const head = data.subarray(0, PREVIEW_BYTES);
  const more = data.length > PREVIEW_BYTES;
  try {
    // `stream` when cut: a character split by the cut is not an error.
    const text = new TextDecoder('utf-8', { fatal: true }).decode(head, { stream: more });
    return more ? `${text}\n…` : text;
  } catch {
    const hex = Array.from(head, (b) => b.toString(16).padStart(2, '0')).join(' ');
    return more ? `${hex} …` : hex;
  }
}

// ---------------------------------------------------------------- modules

async function modulesView(root, _params, still) {
  const [{ modules }, { deployments }] = await Promise.all([getJson('/v1/modules'), getJson('/v1/deployments')]);
  if (!still()) return;
  // The names whose current version runs each module.
  const names = {};
  for (const d of deployments) (names[d.current.digest] ||= []).push(d);
  const download = async (digest) => {
    try {
      const data = await (await api(`/v1/modules/${digest}`)).blob();
      const link = el('a', { href: blobUrl(data), download: `${digest}.wasm` });
      link.click();
    } catch (error) {
      showError(error);
    }
  };
  root.append(el('h1', {}, 'Modules'), el('table', { 'data-testid': 'modules-table' },
    el('tr', {}, ['digest', 'deployed as', 'language', 'world', 'size', 'stored here', 'jobs', ''].map((h) => el('th', {}, h))),
    modules.length ? modules.map((m) => el('tr', { 'data-module': m.digest },
      el('td', { class: 'mono' }, el('a', { href: `#/jobs?module=${m.digest}`, title: 'its jobs' }, m.digest)),
      el('td', { 'data-testid': 'module-names' }, (names[m.digest] || []).flatMap((d, i) => [
        i ? ', ' : '',
        el('a', { href: `#/jobs?module=${d.name}`, title: 'the jobs submitted by this name' }, `${d.name} v${d.current.version}`)])),
      el('td', {}, m.language || ''), el('td', { class: 'mono' }, m.world || ''),
      el('td', {}, bytes(m.bytes)), el('td', {}, time(m.first_seen)), el('td', {}, m.jobs ?? ''),
      el('td', {}, el('button', { onclick: () => download(m.digest) }, 'Download'))))
      : el('tr', {}, el('td', { colspan: 8, class: 'muted' }, 'No module uploaded yet.'))));
  // Each name, what it runs now, and what its jobs may call over HTTP(S).
  root.append(el('h2', {}, 'Deployments'), el('table', { 'data-testid': 'deployments-table' },
    el('tr', {}, ['name', 'version', 'module', 'may call'].map((h) => el('th', {}, h))),
    deployments.length ? deployments.map((d) => el('tr', { 'data-deployment': d.name },
      el('td', {}, el('a', { href: `#/jobs?module=${d.name}`, title: 'the jobs submitted by this name' }, d.name)),
      el('td', {}, `v${d.current.version}`, el('span', { class: 'muted' }, ` of ${d.versions_total}`)),
      el('td', { class: 'mono' }, el('a', { href: `#/jobs?module=${d.current.digest}`, title: d.current.digest }, short(d.current.digest))),
      el('td', { 'data-testid': 'deployment-grants' }, grantList(d.grants || []))))
      : el('tr', {}, el('td', { colspan: 4, class: 'muted' }, 'No deployment yet: jobs name their modules by digest.'))));
}

// A deployment's HTTP(S) grants, one a line: the URL (scheme, host, port
// and path prefix), its methods, and whether a name in it may resolve to
// a private address.
function grantList(grants) {
  if (!grants.length) return el('span', { class: 'muted', 'data-testid': 'no-network' }, 'no network');
  return el('ul', { class: 'grants' }, grants.map((g) => el('li', { 'data-grant': g.url },
    el('span', { class: 'mono', 'data-testid': 'grant-url' }, g.url), ' ',
    el('span', { class: 'grant-methods', 'data-testid': 'grant-methods' },
      g.methods && g.methods.length ? g.methods.join(', ') : 'any method'),
    g.private ? [' ', el('span', { class: 'grant-private', 'data-testid': 'grant-private' }, 'private addresses')] : null)));
}

start();
