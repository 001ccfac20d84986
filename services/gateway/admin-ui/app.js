// mneme admin dashboard: a hash-routed single page on the JSON API at
// /admin/api/ (docs/ADMIN.md). Vanilla JS, no framework. Every piece of
// text from the API goes into the page through textContent (see h()):
// nothing here assigns innerHTML.

import { barChart, formatNumber, lineChart, proportionBars } from './charts.js';
import { renderGraph, typeColor } from './graph.js';

const API = '/admin/api';
const TENANT_STORAGE = 'mneme-admin-tenant';
const TYPES = ['fact', 'decision', 'error', 'preference', 'procedure', 'relation', 'episode'];
const PERMISSIONS = [
  ['read', 'Read', 'recall, search and browse memories'],
  ['write', 'Write', 'store, amend and forget memories'],
  ['admin', 'Admin', 'tenant-wide tools such as consolidation and upstreams'],
];
const MODES = [
  ['', 'None (all tools the permissions allow)'],
  ['recall-only', 'recall-only: read-only tools'],
  ['write-only', 'write-only: writing tools'],
  ['onboarding', 'onboarding: all tools'],
  ['audit', 'audit: read-only, for admin keys'],
];

const state = {
  me: null,
  csrf: null,
  tenants: [],
  tenantId: null,
  seq: 0,
  memoryFilters: { q: '', type: '', key: '', topic: '', includeInvalid: false },
};

// ---------------------------------------------------------------- DOM helpers

const PROPS = new Set(['value', 'checked', 'selected', 'disabled', 'hidden', 'required', 'multiple', 'htmlFor', 'type', 'name', 'id', 'title']);

/** Creates an element. props: class, text, on<event>, dataset, aria-*, etc. */
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = String(v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2).toLowerCase(), v);
      else if (PROPS.has(k)) el[k] = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

const $ = (id) => document.getElementById(id);

let uid = 0;
const nextId = (prefix) => `${prefix}-${++uid}`;

// ---------------------------------------------------------------- formatting

function fmtTime(s) {
  if (!s) return '—';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return String(s);
  return d.toLocaleString('en-GB', { day: 'numeric', month: 'short', year: 'numeric', hour: '2-digit', minute: '2-digit' });
}

function fmtDay(s) {
  if (!s) return '—';
  const d = new Date(String(s).length <= 10 ? `${s}T00:00:00Z` : s);
  if (Number.isNaN(d.getTime())) return String(s);
  return d.toLocaleDateString('en-GB', { day: 'numeric', month: 'short', timeZone: 'UTC' });
}

function fmtClock(s, seconds = false) {
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return String(s);
  return d.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', second: seconds ? '2-digit' : undefined });
}

function relTime(s) {
  if (!s) return '—';
  const d = new Date(s);
  const secs = Math.round((Date.now() - d.getTime()) / 1000);
  if (Number.isNaN(secs)) return String(s);
  const abs = Math.abs(secs);
  const unit = abs < 60 ? [secs, 'second'] : abs < 3600 ? [Math.round(secs / 60), 'minute']
    : abs < 86400 ? [Math.round(secs / 3600), 'hour'] : [Math.round(secs / 86400), 'day'];
  return new Intl.RelativeTimeFormat('en', { numeric: 'auto' }).format(-unit[0], unit[1]);
}

/** The last `n` days (UTC) as YYYY-MM-DD, oldest first. */
function lastDays(n) {
  const now = new Date();
  const days = [];
  for (let i = n - 1; i >= 0; i--) {
    days.push(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - i)).toISOString().slice(0, 10));
  }
  return days;
}

/** One row per day of the last `n`, with `blank` where the API has none. */
function fillDays(rows, n, blank) {
  const byDay = new Map(rows.map((r) => [String(r.day).slice(0, 10), r]));
  return lastDays(n).map((day) => byDay.get(day) || { day, ...blank });
}

function timeEl(s, relative = false) {
  if (!s) return h('span', { class: 'muted', text: '—' });
  return h('time', { datetime: s, title: fmtTime(s), text: relative ? relTime(s) : fmtTime(s) });
}

function num(n) {
  if (n === null || n === undefined) return '—';
  return typeof n === 'number' ? n.toLocaleString('en-US') : String(n);
}

function ms(n) {
  if (n === null || n === undefined) return '—';
  return `${Number(n).toLocaleString('en-US', { maximumFractionDigits: Number(n) < 10 ? 1 : 0 })} ms`;
}

function pct(n) {
  if (n === null || n === undefined || Number.isNaN(Number(n))) return '—';
  return `${(Number(n) * 100).toLocaleString('en-US', { maximumFractionDigits: 1 })} %`;
}

function limitText(used, limit) {
  const left = num(used ?? 0);
  return limit === null || limit === undefined ? `${left} / no limit` : `${left} / ${num(limit)}`;
}

function shortId(id) {
  return String(id ?? '').slice(0, 8);
}

function truncate(s, n) {
  const t = String(s ?? '');
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

const ACRONYMS = { api: 'API', id: 'ID', mcp: 'MCP', ttl: 'TTL', url: 'URL' };

/** `ttlTier` → "TTL tier", `keyName` → "Key name". */
function humanize(key) {
  const words = String(key).replace(/_/g, ' ').replace(/([a-z0-9])([A-Z])/g, '$1 $2').toLowerCase()
    .split(' ').map((word) => ACRONYMS[word] || word).join(' ');
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function badge(text, cls = '') {
  return h('span', { class: `badge ${cls}`.trim(), text });
}

function typeBadge(type) {
  return badge(type || 'unknown', `t-${type}`);
}

function statusBadge(status) {
  return badge(status || 'unknown', status === 'active' ? 'active' : status === 'ok' ? 'ok' : status || '');
}

// ---------------------------------------------------------------- API

/** A form the user has to correct; no API call was made. */
class FormError extends Error {}

class ApiError extends Error {
  constructor(code, message, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** True for every route that acts in a tenant (all but session and tenants). */
function tenantScoped(path) {
  return !(path === '/session' || path.startsWith('/tenants'));
}

function apiUrl(path, query) {
  const url = new URL(API + path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '' && v !== false) url.searchParams.set(k, String(v));
  }
  if (state.me && state.me.kind === 'platform' && state.tenantId && tenantScoped(path)) {
    url.searchParams.set('tenant', state.tenantId);
  }
  return url;
}

async function api(method, path, { query, body, contentType, signIn = false } = {}) {
  const headers = { Accept: 'application/json' };
  let payload;
  if (body !== undefined) {
    if (typeof body === 'string') {
      headers['Content-Type'] = contentType || 'text/plain';
      payload = body;
    } else {
      headers['Content-Type'] = 'application/json';
      payload = JSON.stringify(body);
    }
  }
  if (method !== 'GET' && method !== 'HEAD' && state.csrf) headers['X-CSRF-Token'] = state.csrf;
  let response;
  try {
    response = await fetch(apiUrl(path, query), { method, headers, body: payload, credentials: 'same-origin', cache: 'no-store' });
  } catch {
    throw new ApiError('network', 'The dashboard could not reach the server. Check the connection and try again.', 0);
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const err = (data && data.error) || {};
    const error = new ApiError(err.code || `http_${response.status}`,
      err.message || `The server answered ${response.status} ${response.statusText}.`, response.status);
    if (response.status === 401 && !signIn && state.me) {
      sessionEnded();
    }
    throw error;
  }
  return data;
}

// ---------------------------------------------------------------- status, dialogs

let statusTimer = 0;
function announce(message, kind = 'info') {
  const el = $('status');
  clearTimeout(statusTimer);
  el.textContent = '';
  el.classList.toggle('error', kind === 'error');
  // A fresh text node makes screen readers speak the message again.
  window.setTimeout(() => {
    el.textContent = message;
  }, 30);
  statusTimer = window.setTimeout(() => {
    el.textContent = '';
  }, kind === 'error' ? 9000 : 5000);
}

function errorNotice(error) {
  const box = h('div', { class: 'notice error', role: 'alert' });
  box.append(h('strong', { text: error.status === 403 ? 'Not allowed. ' : 'Something went wrong. ' }),
    document.createTextNode(error.message || String(error)));
  if (error.code) box.append(h('span', { class: 'code', text: `(${error.code})` }));
  return box;
}

/**
 * A modal dialog around a form. onSubmit(form, dialog) may return false to
 * stay open; errors it throws are shown inside the dialog.
 */
function openDialog({ title, description, body = [], submitLabel = 'Save', submitClass = 'primary', cancelLabel = 'Cancel', onSubmit, wide = false }) {
  const opener = document.activeElement;
  const titleId = nextId('dlg-title');
  const descId = description ? nextId('dlg-desc') : null;
  const errorBox = h('div', { class: 'notice error', role: 'alert', hidden: true });
  const submit = onSubmit ? h('button', { class: `btn ${submitClass}`, type: 'submit', text: submitLabel }) : null;
  const cancel = h('button', { class: 'btn', type: 'button', text: cancelLabel });
  const form = h('form', { novalidate: true },
    h('div', { class: 'dialog-head' }, h('h2', { id: titleId, text: title })),
    description ? h('p', { id: descId, class: 'muted', text: description }) : null,
    errorBox,
    body,
    h('div', { class: 'dialog-foot' }, cancel, submit));
  const dialog = h('dialog', { 'aria-labelledby': titleId, 'aria-describedby': descId, class: wide ? 'wide' : null }, form);
  document.body.append(dialog);
  let settled = false;
  let resolveClosed;
  const closed = new Promise((resolve) => {
    resolveClosed = resolve;
  });
  const close = (result) => {
    if (settled) return;
    settled = true;
    if (dialog.open) dialog.close();
    dialog.remove();
    if (opener && opener.isConnected && typeof opener.focus === 'function') opener.focus();
    resolveClosed(result);
  };
  cancel.addEventListener('click', () => close(false));
  dialog.addEventListener('cancel', (ev) => {
    ev.preventDefault();
    close(false);
  });
  dialog.addEventListener('close', () => close(dialog.returnValue === 'ok'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (!onSubmit) return;
    if (!form.reportValidity()) return;
    errorBox.hidden = true;
    submit.disabled = true;
    try {
      const result = await onSubmit(form, { close, errorBox });
      if (result !== false) close(true);
    } catch (error) {
      clear(errorBox).append(document.createTextNode(error.message || String(error)));
      if (error.code) errorBox.append(h('span', { class: 'code', text: `(${error.code})` }));
      errorBox.hidden = false;
      if (error.status === 401) close(false);
    } finally {
      submit.disabled = false;
    }
  });
  dialog.showModal();
  const first = form.querySelector('[autofocus]') || form.querySelector('input, select, textarea, button');
  if (first) first.focus();
  return { dialog, form, close, closed, submit, cancel, errorBox };
}

function confirmDialog({ title, message, confirmLabel = 'Confirm', danger = false }) {
  const { closed } = openDialog({
    title,
    body: [h('p', { text: message })],
    submitLabel: confirmLabel,
    submitClass: danger ? 'danger' : 'primary',
    onSubmit: async () => true,
  });
  return closed;
}

// ---------------------------------------------------------------- form helpers

function field(label, control, hint, cls) {
  const id = control.id || nextId('f');
  control.id = id;
  const hintEl = hint ? h('div', { class: 'hint', id: `${id}-hint`, text: hint }) : null;
  if (hintEl) control.setAttribute('aria-describedby', hintEl.id);
  return h('div', { class: `field ${cls || ''}`.trim() }, h('label', { htmlFor: id, text: label }), control, hintEl);
}

function input(props) {
  return h('input', { type: 'text', ...props });
}

function select(options, props = {}) {
  const el = h('select', props);
  for (const opt of options) {
    const [value, label] = Array.isArray(opt) ? opt : [opt, opt];
    el.append(h('option', { value, text: label, selected: String(props.value ?? '') === String(value) }));
  }
  if (props.value !== undefined) el.value = props.value ?? '';
  return el;
}

function checkbox(label, props) {
  const box = h('input', { type: 'checkbox', ...props });
  return h('label', { class: 'check' }, box, label);
}

/** The number in an input, or null when it is empty. */
function numberOrNull(el) {
  const v = el.value.trim();
  if (v === '') return null;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new FormError(`"${v}" is not a number.`);
  return n;
}

// ---------------------------------------------------------------- tables and blocks

/**
 * A table. columns: [{label, cls?}] or strings; rows: arrays of cells (string
 * or Node or {value, cls}). The first cell of each row is its header.
 */
function table({ caption, columns, rows, rowAttrs }) {
  const cols = columns.map((c) => (typeof c === 'string' ? { label: c } : c));
  const thead = h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col', class: c.cls, text: c.label }))));
  const tbody = h('tbody');
  rows.forEach((row, ri) => {
    const tr = h('tr', rowAttrs ? rowAttrs(ri) : null);
    row.forEach((cell, i) => {
      const spec = cell && typeof cell === 'object' && !(cell instanceof Node) && !Array.isArray(cell) ? cell : { value: cell };
      const tag = i === 0 ? 'th' : 'td';
      const el = h(tag, { class: spec.cls || cols[i]?.cls, scope: i === 0 ? 'row' : null, dataset: spec.data });
      append(el, [spec.value ?? '—']);
      tr.append(el);
    });
    tbody.append(tr);
  });
  return h('div', { class: 'table-wrap' }, h('table', null, caption ? h('caption', { class: 'visually-hidden', text: caption }) : null, thead, tbody));
}

function empty(title, text, action) {
  return h('div', { class: 'empty' }, h('strong', { text: title }), text ? h('p', { text }) : null, action || null);
}

function card(title, ...content) {
  return h('section', { class: 'card' }, title ? h('h2', { text: title }) : null, content);
}

function cardWithHead(title, actions, ...content) {
  return h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', { text: title }), actions || null), content);
}

function pageHead(title, sub, ...actions) {
  return h('div', { class: 'page-head' },
    h('div', null, h('h1', { tabindex: '-1', text: title }), sub ? h('p', { class: 'sub', text: sub }) : null),
    actions.length ? h('div', { class: 'actions' }, actions) : null);
}

function kpi(label, value, note, href) {
  return h(href ? 'a' : 'div', { class: 'kpi', href },
    h('span', { class: 'kpi-label', text: label }),
    h('span', { class: 'kpi-value', text: value }),
    note ? h('span', { class: 'kpi-note', text: note }) : null);
}

function loading(text = 'Loading…') {
  return h('p', { class: 'loading', text });
}

/** Fills `slot` with what `load` builds, or the error it meets. */
async function section(slot, load) {
  clear(slot).append(loading());
  try {
    const content = await load();
    clear(slot);
    append(slot, [content]);
  } catch (error) {
    clear(slot).append(errorNotice(error));
  }
}

const canManage = () => state.me && (state.me.kind === 'platform' || state.me.role === 'owner' || state.me.role === 'admin');
const isPlatform = () => state.me && state.me.kind === 'platform';

// ---------------------------------------------------------------- routes and nav

const ICONS = {
  overview: 'M3 3h7v9H3zM14 3h7v5h-7zM14 12h7v9h-7zM3 16h7v5H3z',
  keys: 'M8.5 15.5a4.5 4.5 0 1 1 3.7-7.1M12.2 8.4 21 17.2V21h-3.8v-2.2H15V16.6h-2.2l-1.9-1.9',
  groups: 'M9 11a3.5 3.5 0 1 0 0-7 3.5 3.5 0 0 0 0 7zM2.5 20a6.5 6.5 0 0 1 13 0M16 4.3a3.5 3.5 0 0 1 0 6.4M21.5 20a6.5 6.5 0 0 0-4-6',
  users: 'M12 12a4.5 4.5 0 1 0 0-9 4.5 4.5 0 0 0 0 9zM4 21a8 8 0 0 1 16 0',
  memory: 'M4 6c0-1.7 3.6-3 8-3s8 1.3 8 3-3.6 3-8 3-8-1.3-8-3zM4 6v12c0 1.7 3.6 3 8 3s8-1.3 8-3V6M4 12c0 1.7 3.6 3 8 3s8-1.3 8-3',
  graph: 'M6 8.5a2.5 2.5 0 1 0 0-5 2.5 2.5 0 0 0 0 5zM18 11a2.5 2.5 0 1 0 0-5 2.5 2.5 0 0 0 0 5zM10 21a2.5 2.5 0 1 0 0-5 2.5 2.5 0 0 0 0 5zM8.4 6.6l7.2 1.9M7 8.3l2.2 7.9M16.6 10.7l-5.2 6.1',
  sessions: 'M3 4h18v12H3zM8 20h8M12 16v4',
  surfacing: 'M9 18h6M10 21h4M12 3a6 6 0 0 0-3.5 10.9c.6.5 1 1.2 1 2.1h5c0-.9.4-1.6 1-2.1A6 6 0 0 0 12 3z',
  upstreams: 'M12 20V8M7 13l5-5 5 5M4 4h16',
  consolidation: 'M20 11a8 8 0 0 0-14.9-4M4 4v4h4M4 13a8 8 0 0 0 14.9 4M20 20v-4h-4',
  metrics: 'M4 20V11M10 20V5M16 20v-6M21 20H3',
  audit: 'M6 3h9l4 4v14H6zM14 3v5h5M9 12h7M9 16h7',
  tenants: 'M4 21V5l8-3v19M12 8l8 3v10M2 21h20M8 8v.01M8 12v.01M8 16v.01M16 14v.01M16 17v.01',
};

const ROUTES = [
  { id: 'overview', label: 'Overview', group: 'Dashboard', render: screenOverview },
  { id: 'keys', label: 'API keys', group: 'Access', manage: true, render: screenKeys },
  { id: 'groups', label: 'Key groups', group: 'Access', manage: true, render: screenGroups },
  { id: 'users', label: 'Users', group: 'Access', manage: true, render: screenUsers },
  { id: 'memory', label: 'Memory', group: 'Memory', render: screenMemory },
  { id: 'graph', label: 'Knowledge graph', group: 'Memory', render: screenGraph },
  { id: 'sessions', label: 'Sessions', group: 'Activity', render: screenSessions },
  { id: 'surfacing', label: 'Surfacing', group: 'Activity', render: screenSurfacing },
  { id: 'metrics', label: 'Metrics & usage', group: 'Activity', render: screenMetrics },
  { id: 'audit', label: 'Audit log', group: 'Activity', manage: true, render: screenAudit },
  { id: 'upstreams', label: 'Upstreams', group: 'Operations', manage: true, render: screenUpstreams },
  { id: 'consolidation', label: 'Consolidation', group: 'Operations', render: screenConsolidation },
  { id: 'tenants', label: 'Tenants', group: 'Platform', platform: true, tenantless: true, render: screenTenants },
];

function visibleRoutes() {
  return ROUTES.filter((r) => (!r.platform || isPlatform()) && (!r.manage || canManage()));
}

function icon(name) {
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('class', 'nav-icon');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('focusable', 'false');
  const path = document.createElementNS('http://www.w3.org/2000/svg', 'path');
  path.setAttribute('d', ICONS[name] || ICONS.overview);
  svg.append(path);
  return svg;
}

function buildNav() {
  const holder = clear($('nav-items'));
  let group = null;
  let list = null;
  for (const r of visibleRoutes()) {
    if (r.group !== group) {
      group = r.group;
      const gid = nextId('nav-group');
      holder.append(h('h2', { class: 'nav-group', id: gid, text: group }));
      list = h('ul', { class: 'nav-list', 'aria-labelledby': gid });
      holder.append(list);
    }
    list.append(h('li', null, h('a', { href: `#/${r.id}`, dataset: { route: r.id } }, icon(r.id), r.label)));
  }
}

function markNav(id) {
  for (const a of document.querySelectorAll('#nav-items a')) {
    if (a.dataset.route === id) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function setNavOpen(open) {
  $('app').classList.toggle('nav-open', open);
  $('scrim').hidden = !open;
  $('menu-btn').setAttribute('aria-expanded', String(open));
  if (open) {
    const current = document.querySelector('#nav-items a[aria-current="page"]') || document.querySelector('#nav-items a');
    if (current) current.focus();
  }
}

function parseHash() {
  const raw = window.location.hash.replace(/^#\/?/, '');
  const parts = raw.split('/').filter(Boolean).map((p) => decodeURIComponent(p));
  return { id: parts[0] || 'overview', params: parts.slice(1) };
}

async function route(focus = true) {
  if (!state.me) return;
  const { id, params } = parseHash();
  const r = ROUTES.find((x) => x.id === id);
  const seq = ++state.seq;
  setNavOpen(false);
  markNav(r ? r.id : null);
  const main = $('main');
  const view = h('div', { class: 'view', dataset: { screen: id } });
  clear(main).append(view);
  document.title = `${r ? r.label : 'Not found'} · mneme admin`;
  try {
    if (!r) {
      view.append(pageHead('Page not found', 'There is no such page in the dashboard.'),
        h('p', null, h('a', { href: '#/overview', text: 'Go to the overview' })));
    } else if (r.platform && !isPlatform()) {
      view.append(pageHead(r.label), h('div', { class: 'notice warning', text: 'Only platform admins can see this page.' }));
    } else if (r.manage && !canManage()) {
      view.append(pageHead(r.label), h('div', { class: 'notice warning', text: 'Only the tenant’s owners and admins can see this page. Ask one of them for access.' }));
    } else if (!r.tenantless && isPlatform() && !state.tenantId) {
      view.append(pageHead(r.label), empty('No tenant selected',
        'Platform admins act in one tenant at a time. Create a tenant first, then pick it in the tenant menu at the top.',
        h('a', { class: 'btn primary', href: '#/tenants', text: 'Go to tenants' })));
    } else {
      view.append(loading());
      await r.render(view, params, seq);
      const spinner = view.querySelector(':scope > .loading');
      if (spinner) spinner.remove();
    }
  } catch (error) {
    if (seq !== state.seq) return;
    const spinner = view.querySelector(':scope > .loading');
    if (spinner) spinner.remove();
    if (error.status === 401) return;
    view.append(errorNotice(error));
  }
  if (focus && seq === state.seq) {
    const heading = view.querySelector('h1');
    if (heading) heading.focus({ preventScroll: true });
  }
  window.scrollTo(0, 0);
}

/** Replaces the view's content with `nodes` (dropping the loading line). */
function fill(view, ...nodes) {
  clear(view);
  append(view, nodes);
}

function refresh() {
  route(false);
}

// ---------------------------------------------------------------- session

function showSignIn(message) {
  state.me = null;
  state.csrf = null;
  $('boot').hidden = true;
  $('app').hidden = true;
  $('signin').hidden = false;
  clear($('main'));
  document.title = 'Sign in · mneme admin';
  const err = $('signin-error');
  if (message) {
    err.textContent = message;
    err.hidden = false;
  } else {
    err.hidden = true;
  }
  $('signin-password').value = '';
  const target = $('signin-email').value ? $('signin-password') : $('signin-email');
  target.focus();
}

function sessionEnded() {
  for (const d of document.querySelectorAll('dialog')) {
    if (d.open) d.close();
    d.remove();
  }
  showSignIn('Your session has ended. Sign in again to continue.');
}

/** Filters name keys and topics of one tenant: forget them on a switch. */
function resetFilters() {
  state.memoryFilters = { q: '', type: '', key: '', topic: '', includeInvalid: false };
  graphFilters = { topic: '', key: '', limit: '150' };
}

async function enter(session) {
  resetFilters();
  state.me = session.me;
  state.csrf = session.csrfToken;
  if (isPlatform()) {
    await loadTenants();
  } else {
    state.tenantId = session.me.tenantId || null;
  }
  $('who-email').textContent = state.me.email;
  $('who-role').textContent = isPlatform() ? 'platform admin' : `${state.me.role}${state.me.tenantName ? ` · ${state.me.tenantName}` : ''}`;
  $('tenant-picker').hidden = !isPlatform();
  buildNav();
  $('boot').hidden = true;
  $('signin').hidden = true;
  $('app').hidden = false;
  await route(false);
}

async function loadTenants() {
  const data = await api('GET', '/tenants');
  state.tenants = data.tenants || [];
  const saved = window.localStorage.getItem(TENANT_STORAGE);
  const known = (id) => state.tenants.some((t) => t.id === id);
  if (!known(state.tenantId)) state.tenantId = known(saved) ? saved : state.tenants[0]?.id || null;
  renderTenantPicker();
}

function renderTenantPicker() {
  const sel = clear($('tenant-select'));
  if (!state.tenants.length) {
    sel.append(h('option', { value: '', text: 'No tenants yet' }));
    sel.disabled = true;
    return;
  }
  sel.disabled = false;
  for (const t of state.tenants) {
    sel.append(h('option', { value: t.id, text: t.status === 'active' ? t.name : `${t.name} (${t.status})` }));
  }
  sel.value = state.tenantId || '';
}

function selectTenant(id) {
  if ((id || null) !== state.tenantId) resetFilters();
  state.tenantId = id || null;
  if (id) window.localStorage.setItem(TENANT_STORAGE, id);
  renderTenantPicker();
}

async function signIn(ev) {
  ev.preventDefault();
  const email = $('signin-email').value.trim();
  const password = $('signin-password').value;
  const err = $('signin-error');
  if (!email || !password) {
    err.textContent = 'Enter your email address and password.';
    err.hidden = false;
    (!email ? $('signin-email') : $('signin-password')).focus();
    return;
  }
  const button = $('signin-submit');
  button.disabled = true;
  button.textContent = 'Signing in…';
  try {
    const session = await api('POST', '/session', { body: { email, password }, signIn: true });
    err.hidden = true;
    $('signin-password').value = '';
    if (!window.location.hash || window.location.hash === '#' || window.location.hash === '#/') {
      window.history.replaceState(null, '', '#/overview');
    }
    await enter(session);
    announce(`Signed in as ${session.me.email}.`);
  } catch (error) {
    err.textContent = error.status === 401 || error.status === 400 || error.status === 403
      ? (error.message || 'The email address and password do not match.')
      : error.message;
    err.hidden = false;
    $('signin-password').focus();
  } finally {
    button.disabled = false;
    button.textContent = 'Sign in';
  }
}

async function signOut() {
  try {
    await api('DELETE', '/session');
  } catch {
    // Signed out either way.
  }
  window.history.replaceState(null, '', '#/overview');
  showSignIn();
  announce('Signed out.');
}

// ---------------------------------------------------------------- overview

async function screenOverview(view) {
  const data = await api('GET', '/overview');
  const c = data.counts || {};
  const tenantName = data.tenant?.name || state.me.tenantName || '';
  const memorySlot = h('div');
  const usageSlot = h('div');
  const alerts = data.alerts || [];
  const health = data.health || {};
  const recent = data.recent || [];
  fill(view,
    pageHead('Overview', tenantName ? `Tenant ${tenantName}` : 'Your tenant at a glance.'),
    alerts.length ? h('section', { class: 'card', 'aria-labelledby': 'alerts-title' },
      h('h2', { id: 'alerts-title', text: 'Alerts' }),
      h('ul', { class: 'alerts' }, alerts.map((a) => h('li', null,
        h('div', { class: `notice ${a.level === 'error' ? 'error' : 'warning'}` },
          h('strong', { text: a.level === 'error' ? 'Error: ' : 'Warning: ' }), a.message))))) : null,
    h('div', { class: 'kpis' },
      kpi('Memories', num(c.fragments), 'stored by your agents', '#/memory'),
      kpi('Waiting for embedding', num(c.fragmentsPendingEmbedding), c.fragmentsPendingEmbedding ? 'found by words until embedded' : 'all memories are embedded', '#/memory'),
      kpi('API keys', num(c.activeKeys), `active of ${num(c.keys)}`, canManage() ? '#/keys' : null),
      kpi('Tool calls today', num(data.toolCallsToday), 'all keys, since midnight UTC', '#/metrics'),
      kpi('Live sessions', num(c.sessions), 'open MCP sessions', '#/sessions'),
      kpi('Users', num(c.users), 'people with dashboard access', canManage() ? '#/users' : null),
      kpi('Key groups', num(c.groups), 'keys sharing memories', canManage() ? '#/groups' : null),
      kpi('Upstreams', num(c.upstreams), 'MCP servers behind mneme', canManage() ? '#/upstreams' : null)),
    h('div', { class: 'grid-2' },
      card('Service health',
        h('ul', { class: 'health' }, Object.entries(health).map(([name, s]) => h('li', null,
          h('span', { class: `dot ${s === 'ok' ? 'ok' : 'down'}`, 'aria-hidden': 'true' }),
          h('span', { text: `${humanize(name)}: ${s === 'ok' ? 'OK' : 'down'}` })))),
        alerts.length ? null : h('p', { class: 'muted small', text: 'No alerts — everything looks fine.' })),
      card('Memory by type', memorySlot)),
    card('Tool calls, last 14 days', usageSlot),
    cardWithHead('Recent activity', canManage() ? h('a', { href: '#/audit', text: 'Full audit log' }) : null,
      recent.length ? auditTable(recent, 'Recent changes', true) : empty('No changes yet', 'Changes made in this dashboard (keys, users, memory) are listed here.')));
  await Promise.all([
    section(memorySlot, async () => {
      const m = await api('GET', '/memory/overview');
      const entries = Object.entries(m.byType || {}).sort((a, b) => b[1] - a[1]);
      if (!entries.length) return empty('No memories yet', 'Connect an agent with an API key; what it remembers shows up here.');
      return proportionBars(entries.map(([label, value]) => ({ label, value })), { label: 'memories' });
    }),
    section(usageSlot, async () => {
      const u = await api('GET', '/usage', { query: { days: 14 } });
      const days = u.days || [];
      if (!days.length) return empty('No tool calls yet', 'Calls of the memory tools by your agents are counted here per day.');
      return barChart({ title: 'Tool calls per day, last 14 days', data: fillDays(days, 14, { toolCalls: 0 }).map((d) => ({ label: fmtDay(d.day), value: d.toolCalls })), valueLabel: 'Tool calls', height: 200 });
    }),
  ]);
}

function auditTable(entries, caption, compact = false) {
  return table({
    caption,
    columns: compact ? ['When', 'Who', 'Action', 'Target'] : ['When', 'Who', 'Action', 'Target', 'Details', 'From'],
    rows: entries.map((e) => [
      { value: timeEl(e.at, compact), cls: 'nowrap' },
      e.actor || '—',
      h('code', { text: e.action || '—' }),
      { value: e.target ? h('code', { text: truncate(shortIds(e.target), compact ? 20 : 28), title: e.target }) : '—' },
      compact ? null : { value: detailText(e.detail), cls: 'small detail-cell' },
      compact ? null : { value: e.ip || '—', cls: 'nowrap small' },
    ].filter((c) => c !== null)),
  });
}

const UUID = /\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;

/** Ids shortened to their first 8 characters (the full text stays in the title). */
function shortIds(text) {
  return String(text).replace(UUID, '$1…');
}

function detailText(detail) {
  if (detail === null || detail === undefined) return '—';
  if (typeof detail !== 'object') return String(detail);
  const value = (v) => {
    if (Array.isArray(v)) return v.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(', ');
    if (v && typeof v === 'object') return Object.entries(v).map(([a, b]) => `${a} ${typeof b === 'object' ? JSON.stringify(b) : b}`).join(', ');
    return String(v);
  };
  const parts = Object.entries(detail).map(([k, v]) => `${k}: ${value(v)}`);
  if (!parts.length) return '—';
  const full = parts.join(' · ');
  return h('span', { title: full, text: truncate(shortIds(full), 140) });
}

// ---------------------------------------------------------------- keys

async function screenKeys(view) {
  const data = await api('GET', '/keys');
  const keys = data.keys || [];
  const create = h('button', { class: 'btn primary', type: 'button', text: 'Create key', onclick: () => keyDialog(null) });
  fill(view,
    pageHead('API keys', 'Agents connect with an API key. Each key has its own memories, permissions and quotas.', create),
    h('section', { class: 'card flush', 'aria-label': 'API keys' },
      keys.length ? keysTable(keys)
        : empty('No API keys yet — create one to connect an agent.',
          'A key is shown once when it is created; give it to your MCP client as a Bearer token.',
          h('button', { class: 'btn primary', type: 'button', text: 'Create your first key', onclick: () => keyDialog(null) }))));
}

function keysTable(keys) {
  return table({
    caption: 'API keys',
    columns: ['Name', 'Permissions', 'Status', { label: 'Memories', cls: 'num' }, { label: 'Calls today', cls: 'num' },
      { label: 'Rate limit', cls: 'num' }, 'Expires', { label: 'Actions', cls: 'actions-cell' }],
    rowAttrs: (i) => ({ dataset: { keyId: keys[i].id, keyName: keys[i].name } }),
    rows: keys.map((k) => [
      // Workspace and mode get lines of their own, so the column stays as
      // narrow as the prefix and the actions fit a 1280-pixel screen.
      { value: h('div', null, h('div', { class: 'key-name', text: k.name }),
        h('div', { class: 'small muted nowrap' }, h('code', { text: keyPrefix(k.prefix) })),
        k.defaultWorkspace ? h('div', { class: 'small muted', text: `workspace ${k.defaultWorkspace}` }) : null,
        k.defaultMode ? h('div', { class: 'small muted', text: `mode ${k.defaultMode}` }) : null,
        h('div', { class: 'small muted nowrap' }, 'created ', timeEl(k.createdAt))) },
      { value: (k.permissions || []).map((p) => badge(p, p === 'admin' ? 'warn' : 'info')), cls: 'nowrap' },
      statusBadge(k.status),
      { value: limitText(k.fragments, k.fragmentLimit), cls: 'num', data: { col: 'fragmentLimit' } },
      { value: limitText(k.toolCallsToday, k.dailyCallLimit), cls: 'num', data: { col: 'dailyCallLimit' } },
      { value: k.rateLimit === null || k.rateLimit === undefined ? 'default' : num(k.rateLimit), cls: 'num', data: { col: 'rateLimit' } },
      { value: k.expiresAt ? timeEl(k.expiresAt) : 'never', cls: 'nowrap' },
      { value: keyActions(k), cls: 'actions-cell' },
    ]),
  });
}

/** How the key starts (`mn_<prefix>_…`), as the agent's copy shows it. */
function keyPrefix(prefix) {
  if (!prefix) return 'mn_…';
  return `${prefix.startsWith('mn_') ? prefix : `mn_${prefix}`}_…`;
}

function keyActions(k) {
  const edit = h('button', { class: 'btn small', type: 'button', text: 'Edit', 'aria-label': `Edit key ${k.name}`, onclick: () => keyDialog(k) });
  if (k.status !== 'active') return edit;
  const revoke = h('button', {
    class: 'btn small danger-outline', type: 'button', text: 'Revoke', 'aria-label': `Revoke key ${k.name}`,
    onclick: async () => {
      const ok = await confirmDialog({
        title: `Revoke key “${k.name}”?`,
        message: 'Agents using this key are cut off at once, on every gateway pod. Its memories stay. This cannot be undone.',
        confirmLabel: 'Revoke key',
        danger: true,
      });
      if (!ok) return;
      try {
        await api('POST', `/keys/${encodeURIComponent(k.id)}/revoke`);
        announce(`Key ${k.name} revoked.`);
        refresh();
      } catch (error) {
        if (error.status !== 401) announce(error.message, 'error');
      }
    },
  });
  return [edit, ' ', revoke];
}

function dateInputValue(iso) {
  if (!iso) return '';
  return String(iso).slice(0, 10);
}

function keyDialog(existing) {
  const isNew = !existing;
  const k = existing || { permissions: ['read', 'write'] };
  const name = input({ name: 'name', required: true, value: k.name || '', autocomplete: 'off', autofocus: true, maxlength: 200 });
  const perms = PERMISSIONS.map(([value, label, what]) => checkbox(`${label} — ${what}`, { name: 'permissions', value, checked: (k.permissions || []).includes(value) }));
  const workspace = input({ name: 'defaultWorkspace', value: k.defaultWorkspace || '', autocomplete: 'off' });
  const mode = select(MODES, { name: 'defaultMode', value: k.defaultMode || '' });
  const fragmentLimit = input({ type: 'number', name: 'fragmentLimit', min: 0, step: 1, inputmode: 'numeric', value: k.fragmentLimit ?? '' });
  const dailyCallLimit = input({ type: 'number', name: 'dailyCallLimit', min: 0, step: 1, inputmode: 'numeric', value: k.dailyCallLimit ?? '' });
  const rateLimit = input({ type: 'number', name: 'rateLimit', min: 1, step: 1, inputmode: 'numeric', value: k.rateLimit ?? '' });
  const expires = input({ type: 'date', name: 'expiresAt', value: dateInputValue(k.expiresAt) });
  const usageSlot = isNew ? null : h('div');
  const body = [
    h('div', { class: 'form-grid' },
      field('Name', name, 'Which agent or app uses it, e.g. “claude-code laptop”.', 'full'),
      h('fieldset', { class: 'full' }, h('legend', { text: 'Permissions' }), perms),
      field('Default workspace', workspace, 'Optional sub-partition of the key’s memories.'),
      field('Default mode', mode),
      field('Fragment limit', fragmentLimit, 'Most memories the key may hold. Empty: no limit.'),
      field('Daily call limit', dailyCallLimit, 'Tool calls per day (UTC). Empty: no limit.'),
      field('Rate limit', rateLimit, 'Requests per rate-limit window. Empty: the server default.'),
      field('Expires on', expires, 'Empty: never expires.')),
    usageSlot,
  ];
  const dlg = openDialog({
    title: isNew ? 'Create API key' : `Edit key “${k.name}”`,
    body,
    submitLabel: isNew ? 'Create key' : 'Save changes',
    onSubmit: async (form) => {
      const chosen = [...form.querySelectorAll('input[name="permissions"]:checked')].map((c) => c.value);
      if (!name.value.trim()) throw new FormError('Give the key a name.');
      if (!chosen.length) throw new FormError('Choose at least one permission.');
      const values = {
        name: name.value.trim(),
        permissions: chosen,
        defaultWorkspace: workspace.value.trim() || null,
        defaultMode: mode.value || null,
        fragmentLimit: numberOrNull(fragmentLimit),
        dailyCallLimit: numberOrNull(dailyCallLimit),
        rateLimit: numberOrNull(rateLimit),
        expiresAt: expires.value ? new Date(`${expires.value}T23:59:59Z`).toISOString() : null,
      };
      if (isNew) {
        const bodyJson = {};
        for (const [key, v] of Object.entries(values)) if (v !== null) bodyJson[key] = v;
        const created = await api('POST', '/keys', { body: bodyJson });
        window.setTimeout(() => secretDialog(created.key, created.secret), 0);
        return true;
      }
      const changes = {};
      const before = {
        name: k.name, permissions: k.permissions, defaultWorkspace: k.defaultWorkspace || null, defaultMode: k.defaultMode || null,
        fragmentLimit: k.fragmentLimit ?? null, dailyCallLimit: k.dailyCallLimit ?? null, rateLimit: k.rateLimit ?? null,
        expiresAt: k.expiresAt ? new Date(`${dateInputValue(k.expiresAt)}T23:59:59Z`).toISOString() : null,
      };
      for (const [key, v] of Object.entries(values)) {
        if (JSON.stringify(v) !== JSON.stringify(before[key])) changes[key] = v;
      }
      if (!Object.keys(changes).length) return true;
      await api('PATCH', `/keys/${encodeURIComponent(k.id)}`, { body: changes });
      announce(`Key ${values.name} saved.`);
      refresh();
      return true;
    },
  });
  if (!isNew) {
    section(usageSlot, async () => {
      const detail = await api('GET', `/keys/${encodeURIComponent(k.id)}`);
      const usage = detail.usage || [];
      const rl = detail.rateLimit;
      return h('div', null,
        h('h3', { text: 'Usage' }),
        rl ? h('p', { class: 'small muted', text: `Rate limit: ${num(rl.used)} of ${num(rl.limit)} requests used in the current ${num(rl.windowSecs)}-second window.` }) : null,
        usage.length ? barChart({ title: `Tool calls per day of key ${k.name}`, data: fillDays(usage, 14, { toolCalls: 0 }).map((u) => ({ label: fmtDay(u.day), value: u.toolCalls })), valueLabel: 'Tool calls', height: 160 })
          : h('p', { class: 'small muted', text: 'No tool calls recorded for this key yet.' }));
    });
  }
  return dlg;
}

function secretDialog(key, secret) {
  const code = h('code', { class: 'secret', id: 'new-key-secret', text: secret });
  const copy = h('button', {
    class: 'btn primary', type: 'button', text: 'Copy',
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(secret);
        copy.textContent = 'Copied';
        announce('The key is on the clipboard.');
      } catch {
        announce('The browser refused the clipboard; select the key and copy it by hand.', 'error');
      }
    },
  });
  const endpoint = `${window.location.origin}/mcp`;
  openDialog({
    title: `Key “${key.name}” created`,
    body: [
      h('div', { class: 'notice warning', role: 'note' },
        h('strong', { text: 'Copy this key now — you will not see it again. ' }),
        'mneme keeps only a hash of it. If it is lost, revoke it and create a new one.'),
      h('label', { htmlFor: 'new-key-secret', class: 'label', text: 'API key' }),
      h('div', { class: 'secret-box' }, code, copy),
      h('p', { class: 'small muted' }, 'Connect an MCP client to ', h('code', { text: endpoint }), ' with the header ', h('code', { text: 'Authorization: Bearer <key>' }), '.'),
    ],
    cancelLabel: 'Done',
  }).closed.then(() => refresh());
  copy.focus();
}

// ---------------------------------------------------------------- groups

async function screenGroups(view) {
  const [g, k] = await Promise.all([api('GET', '/groups'), api('GET', '/keys')]);
  const groups = g.groups || [];
  const keys = k.keys || [];
  const keyName = new Map(keys.map((x) => [x.id, x.name]));
  const create = h('button', {
    class: 'btn primary', type: 'button', text: 'Create group',
    onclick: () => {
      const name = input({ name: 'name', required: true, autofocus: true, autocomplete: 'off' });
      const description = h('textarea', { name: 'description', rows: 3, maxlength: 1000 });
      openDialog({
        title: 'Create key group',
        description: 'Keys in a group may read each other’s memories.',
        body: [field('Name', name), field('Description', description, 'Optional.')],
        submitLabel: 'Create group',
        onSubmit: async () => {
          if (!name.value.trim()) throw new FormError('Give the group a name.');
          const body = { name: name.value.trim() };
          if (description.value.trim()) body.description = description.value.trim();
          await api('POST', '/groups', { body });
          announce(`Group ${body.name} created.`);
          refresh();
          return true;
        },
      });
    },
  });
  fill(view,
    pageHead('Key groups', 'Keys in the same group read each other’s memories; each key changes only its own.', create),
    groups.length ? groups.map((group) => groupCard(group, keys, keyName))
      : h('section', { class: 'card' }, empty('No key groups yet',
        'Create a group and add keys to it when several agents should see each other’s memories.')));
}

function groupCard(group, keys, keyName) {
  const members = group.members || [];
  const candidates = keys.filter((k) => !members.includes(k.id) && k.status === 'active');
  const pick = select([['', 'Choose a key…'], ...candidates.map((k) => [k.id, k.name])], { 'aria-label': `Key to add to ${group.name}` });
  const add = h('button', {
    class: 'btn', type: 'button', text: 'Add key',
    onclick: async () => {
      if (!pick.value) {
        announce('Choose a key to add first.', 'error');
        pick.focus();
        return;
      }
      try {
        await api('PUT', `/groups/${encodeURIComponent(group.id)}/members/${encodeURIComponent(pick.value)}`);
        announce(`Key ${keyName.get(pick.value) || ''} added to ${group.name}.`);
        refresh();
      } catch (error) {
        if (error.status !== 401) announce(error.message, 'error');
      }
    },
  });
  const remove = h('button', {
    class: 'btn small danger-outline', type: 'button', text: 'Delete group',
    onclick: async () => {
      const ok = await confirmDialog({
        title: `Delete group “${group.name}”?`,
        message: 'Its keys stop sharing memories through it. The keys and memories themselves stay.',
        confirmLabel: 'Delete group',
        danger: true,
      });
      if (!ok) return;
      try {
        await api('DELETE', `/groups/${encodeURIComponent(group.id)}`);
        announce(`Group ${group.name} deleted.`);
        refresh();
      } catch (error) {
        if (error.status !== 401) announce(error.message, 'error');
      }
    },
  });
  return h('section', { class: 'card', 'aria-label': `Group ${group.name}` },
    h('div', { class: 'card-head' },
      h('div', null, h('h2', { text: group.name }), group.description ? h('p', { class: 'muted small', text: group.description }) : null),
      remove),
    members.length
      ? h('ul', { class: 'chips', 'aria-label': 'Members' }, members.map((id) => h('li', { class: 'chip' },
        h('span', { text: keyName.get(id) || shortId(id) }),
        h('button', {
          type: 'button', 'aria-label': `Remove ${keyName.get(id) || id} from ${group.name}`, title: 'Remove from group', text: '×',
          onclick: async () => {
            try {
              await api('DELETE', `/groups/${encodeURIComponent(group.id)}/members/${encodeURIComponent(id)}`);
              announce(`Key ${keyName.get(id) || ''} removed from ${group.name}.`);
              refresh();
            } catch (error) {
              if (error.status !== 401) announce(error.message, 'error');
            }
          },
        }))))
      : h('p', { class: 'muted small', text: 'No keys in this group yet.' }),
    h('div', { class: 'inline-form' }, h('div', { class: 'field' }, pick), add),
    h('p', { class: 'hint', text: `Created ${fmtTime(group.createdAt)}` }));
}

// ---------------------------------------------------------------- users

function roleOptions() {
  const roles = [['member', 'Member — sees the dashboard, memory and graph'], ['admin', 'Admin — manages keys, users and memory']];
  if (isPlatform() || state.me.role === 'owner') roles.push(['owner', 'Owner — everything, including owners']);
  return roles;
}

function generatePassword() {
  const alphabet = 'abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789';
  const bytes = new Uint8Array(20);
  window.crypto.getRandomValues(bytes);
  return [...bytes].map((b) => alphabet[b % alphabet.length]).join('').replace(/(.{5})(?!$)/g, '$1-');
}

function passwordField(label) {
  const pw = input({ type: 'text', name: 'password', required: true, autocomplete: 'new-password', minlength: 12, spellcheck: 'false' });
  const gen = h('button', { class: 'btn small', type: 'button', text: 'Generate', onclick: () => { pw.value = generatePassword(); pw.select(); } });
  const wrap = field(label, pw, 'At least 12 characters. Share it with the person over a safe channel.');
  wrap.append(h('div', { class: 'actions' }, gen));
  return { wrap, pw };
}

async function screenUsers(view) {
  const data = await api('GET', '/users');
  const users = data.users || [];
  const create = h('button', {
    class: 'btn primary', type: 'button', text: 'Add user',
    onclick: () => {
      const email = input({ type: 'email', name: 'email', required: true, autocomplete: 'off', autofocus: true });
      const role = select(roleOptions(), { name: 'role', value: 'member' });
      const { wrap, pw } = passwordField('Initial password');
      openDialog({
        title: 'Add user',
        description: 'People sign in to this dashboard (and to OAuth connectors) with their email and password.',
        body: [field('Email', email), field('Role', role), wrap],
        submitLabel: 'Add user',
        onSubmit: async () => {
          if (!email.value.trim() || !pw.value) throw new FormError('Enter an email address and a password.');
          await api('POST', '/users', { body: { email: email.value.trim(), role: role.value, password: pw.value } });
          announce(`User ${email.value.trim()} added.`);
          refresh();
          return true;
        },
      });
    },
  });
  fill(view,
    pageHead('Users', 'People who sign in to this dashboard. Owners and admins manage the tenant; members can look.', create),
    h('section', { class: 'card flush', 'aria-label': 'Users' },
      users.length ? table({
        caption: 'Users',
        columns: ['Email', 'Role', 'Status', 'Created', 'Last sign-in', { label: 'Actions', cls: 'actions-cell' }],
        rows: users.map((u) => [u.email, roleCell(u), statusBadge(u.status), { value: timeEl(u.createdAt), cls: 'nowrap' },
          { value: u.lastLoginAt ? timeEl(u.lastLoginAt, true) : 'never', cls: 'nowrap' }, { value: userActions(u), cls: 'actions-cell' }]),
      }) : empty('No users yet', 'Add the people who should manage this tenant’s keys and memory.')));
}

function roleCell(u) {
  const options = roleOptions();
  if (!options.some(([v]) => v === u.role)) options.push([u.role, u.role]);
  const self = u.email.toLowerCase() === state.me.email.toLowerCase();
  const sel = select(options.map(([v]) => [v, v]), {
    value: u.role, 'aria-label': `Role of ${u.email}`, disabled: self,
    title: self ? 'You cannot change your own role' : null,
  });
  sel.addEventListener('change', async () => {
    const next = sel.value;
    try {
      await api('PATCH', `/users/${encodeURIComponent(u.id)}`, { body: { role: next } });
      u.role = next;
      announce(`${u.email} is now ${next}.`);
    } catch (error) {
      sel.value = u.role;
      if (error.status !== 401) announce(error.message, 'error');
    }
  });
  return sel;
}

function userActions(u) {
  const reset = h('button', {
    class: 'btn small', type: 'button', text: 'Reset password', 'aria-label': `Reset the password of ${u.email}`,
    onclick: () => {
      const { wrap, pw } = passwordField('New password');
      pw.autofocus = true;
      openDialog({
        title: `Reset password of ${u.email}`,
        body: [wrap],
        submitLabel: 'Set password',
        onSubmit: async () => {
          if (!pw.value) throw new FormError('Enter the new password.');
          await api('PATCH', `/users/${encodeURIComponent(u.id)}`, { body: { password: pw.value } });
          announce(`Password of ${u.email} changed.`);
          return true;
        },
      });
    },
  });
  const disabling = u.status === 'active';
  if (state.me && u.email.toLowerCase() === state.me.email.toLowerCase()) return reset;
  const toggle = h('button', {
    class: `btn small ${disabling ? 'danger-outline' : ''}`, type: 'button', text: disabling ? 'Disable' : 'Enable',
    'aria-label': `${disabling ? 'Disable' : 'Enable'} ${u.email}`,
    onclick: async () => {
      if (disabling) {
        const ok = await confirmDialog({
          title: `Disable ${u.email}?`,
          message: 'They can no longer sign in to the dashboard or connect OAuth clients. You can enable them again later.',
          confirmLabel: 'Disable user',
          danger: true,
        });
        if (!ok) return;
      }
      try {
        await api('PATCH', `/users/${encodeURIComponent(u.id)}`, { body: { status: disabling ? 'disabled' : 'active' } });
        announce(`${u.email} ${disabling ? 'disabled' : 'enabled'}.`);
        refresh();
      } catch (error) {
        if (error.status !== 401) announce(error.message, 'error');
      }
    },
  });
  return [reset, ' ', toggle];
}

// ---------------------------------------------------------------- memory

async function memoryFacets() {
  const overview = await api('GET', '/memory/overview');
  return overview;
}

async function screenMemory(view, params) {
  if (params[0]) {
    await screenMemoryDetail(view, params[0]);
    return;
  }
  const overview = await memoryFacets();
  const f = state.memoryFilters;
  const q = input({ type: 'search', name: 'q', value: f.q, placeholder: 'Words in the memory…', autocomplete: 'off' });
  const type = select([['', 'All types'], ...TYPES.map((t) => [t, t])], { name: 'type', value: f.type });
  const keyOpts = (overview.byKey || []).map((k) => [k.keyId, `${k.keyName} (${num(k.count)})`]);
  const key = select([['', 'All keys'], ...keyOpts], { name: 'key', value: f.key });
  const topicOpts = (overview.byTopic || []).map((t) => [t.topic, `${t.topic} (${num(t.count)})`]);
  if (f.topic && !topicOpts.some(([v]) => v === f.topic)) topicOpts.unshift([f.topic, f.topic]);
  const topic = select([['', 'All topics'], ...topicOpts], { name: 'topic', value: f.topic });
  const invalid = h('input', { type: 'checkbox', name: 'includeInvalid', checked: f.includeInvalid });
  const results = h('div');
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Search memories' },
    field('Search', q, null, 'grow'), field('Type', type), field('Key', key), field('Topic', topic),
    h('div', { class: 'field check-field' }, h('label', { class: 'check' }, invalid, 'Include invalid')),
    h('div', { class: 'field check-field actions' },
      h('button', { class: 'btn primary', type: 'submit', text: 'Search' }),
      h('button', {
        class: 'btn', type: 'button', text: 'Reset',
        onclick: () => {
          state.memoryFilters = { q: '', type: '', key: '', topic: '', includeInvalid: false };
          q.value = '';
          type.value = '';
          key.value = '';
          topic.value = '';
          invalid.checked = false;
          runSearch();
        },
      })));
  const runSearch = () => {
    state.memoryFilters = { q: q.value.trim(), type: type.value, key: key.value, topic: topic.value, includeInvalid: invalid.checked };
    loadMemoryPage(results, state.memoryFilters, overview.total);
  };
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    runSearch();
  });
  for (const el of [type, key, topic, invalid]) el.addEventListener('change', runSearch);

  const actions = [];
  if (canManage()) {
    const exportQuery = {};
    const exportLink = h('a', { class: 'btn', href: apiUrl('/memory/export', exportQuery).pathname + apiUrl('/memory/export', exportQuery).search, download: 'mneme-memories.ndjson', text: 'Export NDJSON' });
    key.addEventListener('change', () => {
      const url = apiUrl('/memory/export', { key: key.value });
      exportLink.href = url.pathname + url.search;
      exportLink.textContent = key.value ? 'Export this key (NDJSON)' : 'Export NDJSON';
    });
    if (f.key) {
      const url = apiUrl('/memory/export', { key: f.key });
      exportLink.href = url.pathname + url.search;
      exportLink.textContent = 'Export this key (NDJSON)';
    }
    actions.push(exportLink, h('button', { class: 'btn', type: 'button', text: 'Import NDJSON', onclick: () => importDialog() }));
  }
  const types = Object.entries(overview.byType || {}).sort((a, b) => b[1] - a[1]);
  fill(view,
    pageHead('Memory', 'Everything your agents remember. Search, inspect, amend or forget memories.', ...actions),
    h('div', { class: 'kpis' },
      kpi('Memories', num(overview.total)),
      kpi('Waiting for embedding', num(overview.pendingEmbedding), 'searchable by words until embedded'),
      kpi('Keys with memories', num((overview.byKey || []).length)),
      kpi('Topics', num((overview.byTopic || []).length))),
    types.length ? h('ul', { class: 'chips type-counts', 'aria-label': 'Memories by type' },
      types.map(([t, n]) => h('li', { class: `badge t-${t}`, text: `${t}: ${num(n)}` }))) : null,
    h('section', { class: 'card' }, form),
    h('section', { class: 'card flush', 'aria-label': 'Results' }, results));
  await loadMemoryPage(results, f, overview.total);
}

async function loadMemoryPage(slot, filters, total) {
  clear(slot).append(h('p', { class: 'loading', text: 'Searching…' }));
  const rows = [];
  let cursor = null;
  const body = h('div');
  const foot = h('div', { class: 'table-foot' });
  const countLine = h('span', { class: 'count', role: 'status' });
  const head = h('div', { class: 'card-head' }, h('h2', { text: 'Memories' }), countLine);
  const render = () => {
    clear(body);
    if (!rows.length) {
      body.append(total === 0
        ? empty('No memories yet', 'Agents store memories with the remember tool once they are connected with an API key.', canManage() ? h('a', { class: 'btn primary', href: '#/keys', text: 'Create an API key' }) : null)
        : empty('No memories match', 'Try other words or clear the filters.'));
      return;
    }
    body.append(table({
      caption: 'Memories',
      columns: ['Memory', 'Type', 'Topic', 'Key', { label: 'Importance', cls: 'num' }, 'Created', 'Embedded'],
      rowAttrs: (i) => ({ dataset: { memoryId: rows[i].id } }),
      rows: rows.map((m) => [
        { value: h('a', { href: `#/memory/${encodeURIComponent(m.id)}`, class: 'clamp', text: m.content }), cls: 'content-cell' },
        typeBadge(m.type),
        { value: m.topic || '—', cls: 'nowrap' },
        { value: m.keyName || shortId(m.keyId), cls: 'nowrap' },
        { value: Number(m.importance ?? 0).toFixed(2), cls: 'num' },
        { value: timeEl(m.createdAt), cls: 'nowrap' },
        m.validTo ? badge('invalid', 'bad') : m.embedded ? badge('yes', 'ok') : badge('pending', 'warn'),
      ]),
    }));
  };
  const more = h('button', { class: 'btn', type: 'button', text: 'Load more' });
  const load = async () => {
    more.disabled = true;
    try {
      const page = await api('GET', '/memory', {
        query: { q: filters.q, type: filters.type, key: filters.key, topic: filters.topic, includeInvalid: filters.includeInvalid ? 'true' : '', limit: 25, cursor },
      });
      rows.push(...(page.items || []));
      cursor = page.nextCursor || null;
      render();
      foot.hidden = !cursor;
      countLine.textContent = `${num(rows.length)} shown${cursor ? ', more available' : ''}`;
    } finally {
      more.disabled = false;
    }
  };
  more.addEventListener('click', async () => {
    try {
      await load();
    } catch (error) {
      if (error.status !== 401) announce(error.message, 'error');
    }
  });
  foot.append(more);
  try {
    await load();
    clear(slot).append(head, body, foot);
  } catch (error) {
    clear(slot).append(errorNotice(error));
  }
}

async function importDialog() {
  let keys = [];
  try {
    keys = ((await api('GET', '/keys')).keys || []).filter((k) => k.status === 'active');
  } catch (error) {
    if (error.status !== 401) announce(error.message, 'error');
    return;
  }
  if (!keys.length) {
    announce('Create an API key first: imported memories belong to a key.', 'error');
    return;
  }
  const key = select(keys.map((k) => [k.id, k.name]), { name: 'key', autofocus: true });
  const file = h('input', { type: 'file', name: 'file', accept: '.ndjson,.jsonl,.json,.txt,application/x-ndjson,application/json,text/plain', required: true });
  const result = h('div', { class: 'import-result', 'aria-live': 'polite' });
  let imported = false;
  const dlg = openDialog({
    title: 'Import memories',
    description: 'One JSON object per line with the remember fields: content, topic, type, and optionally keywords, importance… Lines go through the normal write path: validation, the key’s quota and de-duplication.',
    body: [field('Into key', key), field('NDJSON file', file, 'For example a file exported from this page.'), result],
    submitLabel: 'Import',
    onSubmit: async () => {
      const chosen = file.files && file.files[0];
      if (!chosen) throw new FormError('Choose a file to import.');
      const text = await chosen.text();
      const summary = await api('POST', '/memory/import', { query: { key: key.value }, body: text, contentType: 'application/x-ndjson' });
      imported = true;
      clear(result).append(importSummary(summary));
      announce(`Import finished: ${num(summary.imported)} imported, ${num(summary.duplicates)} duplicates, ${num(summary.failed)} failed.`);
      dlg.cancel.textContent = 'Close';
      // Importing the same file again would only find duplicates.
      dlg.submit.hidden = true;
      dlg.cancel.focus();
      return false;
    },
  });
  dlg.closed.then(() => {
    if (imported) refresh();
  });
}

function importSummary(s) {
  const failed = (s.results || []).filter((r) => r.status !== 'imported' && r.status !== 'created' && r.status !== 'duplicate' && r.error);
  return h('div', null,
    h('div', { class: `notice ${s.failed ? 'warning' : 'success'}` },
      h('strong', { text: 'Import finished. ' }),
      `${num(s.imported)} imported, ${num(s.duplicates)} duplicates, ${num(s.failed)} failed.`),
    failed.length ? table({
      caption: 'Lines that failed',
      columns: [{ label: 'Line', cls: 'num' }, 'Status', 'Error'],
      rows: failed.slice(0, 50).map((r) => [{ value: num(r.line), cls: 'num' }, r.status, r.error]),
    }) : null);
}

async function screenMemoryDetail(view, id) {
  const data = await api('GET', `/memory/${encodeURIComponent(id)}`);
  const m = data.fragment || {};
  const links = data.links || [];
  const versions = data.versions || [];
  const actions = [];
  if (canManage()) {
    actions.push(h('button', {
      class: 'btn danger-outline', type: 'button', text: 'Forget',
      onclick: async () => {
        const ok = await confirmDialog({
          title: 'Forget this memory?',
          message: 'Agents will no longer recall it. The change is recorded in the audit log.',
          confirmLabel: 'Forget memory',
          danger: true,
        });
        if (!ok) return;
        try {
          await api('DELETE', `/memory/${encodeURIComponent(id)}`);
          announce('Memory forgotten.');
          window.location.hash = '#/memory';
        } catch (error) {
          if (error.status !== 401) announce(error.message, 'error');
        }
      },
    }));
  }
  const known = ['id', 'content', 'topic', 'type', 'keywords', 'importance', 'isAnchor', 'workspace', 'agentId', 'keyId', 'keyName', 'createdAt', 'validTo', 'embedded'];
  const extra = Object.entries(m).filter(([k, v]) => !known.includes(k) && v !== null && v !== undefined && typeof v !== 'object');
  const props = h('dl', { class: 'props' },
    [['Type', typeBadge(m.type)], ['Topic', m.topic || '—'], ['Importance', m.importance === undefined ? '—' : Number(m.importance).toFixed(2)],
      ['Key', m.keyName || shortId(m.keyId) || '—'], ['Workspace', m.workspace || 'none'], ['Agent', m.agentId || '—'],
      ['Anchor', m.isAnchor ? 'yes — never decays' : 'no'], ['Created', timeEl(m.createdAt)],
      ['Valid', m.validTo ? h('span', null, 'until ', timeEl(m.validTo)) : 'yes'],
      ['Embedded', m.embedded === undefined ? '—' : m.embedded ? 'yes' : 'pending'],
      ...extra.map(([k, v]) => [humanize(k), typeof v === 'string' && /^\d{4}-\d\d-\d\dT/.test(v) ? timeEl(v) : String(v)]),
    ].flatMap(([k, v]) => [h('dt', { text: k }), h('dd', null, v)]));
  fill(view,
    h('a', { class: 'back-link', href: '#/memory', text: '← Back to memory' }),
    pageHead('Memory', null, ...actions),
    h('div', { class: 'detail-grid' },
      h('div', { class: 'stack' },
        card('Content',
          h('p', { class: 'memory-content', text: m.content || '' }),
          (m.keywords || []).length ? h('ul', { class: 'chips', 'aria-label': 'Keywords' }, m.keywords.map((kw) => h('li', { class: 'chip plain', text: kw }))) : null),
        card(`Links (${links.length})`, links.length ? table({
          caption: 'Links',
          columns: ['Memory', 'Relation', 'Direction', { label: 'Weight', cls: 'num' }],
          rows: links.map((l) => [
            { value: h('a', { href: `#/memory/${encodeURIComponent(l.id)}`, text: truncate(l.content || l.id, 140) }), cls: 'content-cell' },
            badge((l.relation || '').replace(/_/g, ' '), 'info'),
            { value: l.direction === 'incoming' || l.direction === 'in' ? '← incoming' : l.direction === 'outgoing' || l.direction === 'out' ? 'outgoing →' : (l.direction || '—'), cls: 'nowrap' },
            { value: l.weight === undefined || l.weight === null ? '—' : Number(l.weight).toFixed(2), cls: 'num' },
          ]),
        }) : h('p', { class: 'muted', text: 'No links. Agents connect memories with the link tool or remember’s linkedTo.' })),
        card(`Versions (${versions.length})`, versions.length ? versionsTable(versions) : h('p', { class: 'muted', text: 'No earlier versions: this memory was never amended.' })),
        canManage() ? amendForm(id, m) : null),
      h('div', { class: 'stack' }, card('Details', props, h('p', { class: 'hint' }, 'Id ', h('code', { text: m.id || id })))))); 
}

/** Earlier versions, newest first as the API sends them. */
function versionsTable(versions) {
  const when = (v) => v.amendedAt ?? v.changedAt ?? v.createdAt ?? v.at;
  return table({
    caption: 'Earlier versions',
    columns: ['Replaced', 'Content', 'Topic', 'Type', { label: 'Importance', cls: 'num' }],
    rows: versions.map((v) => [
      { value: h('div', null, timeEl(when(v)), v.amendedBy ? h('div', { class: 'small muted', title: String(v.amendedBy), text: `by ${shortIds(v.amendedBy)}` }) : null), cls: 'nowrap' },
      { value: truncate(v.content ?? '', 200), cls: 'version-content' },
      { value: v.topic ?? '—', cls: 'nowrap' },
      v.type ? typeBadge(v.type) : '—',
      { value: v.importance === undefined || v.importance === null ? '—' : Number(v.importance).toFixed(2), cls: 'num' },
    ]),
  });
}

function amendForm(id, m) {
  const content = h('textarea', { name: 'content', rows: 4, maxlength: 1000, value: m.content || '' });
  content.value = m.content || '';
  const topic = input({ name: 'topic', value: m.topic || '' });
  const keywords = input({ name: 'keywords', value: (m.keywords || []).join(', ') });
  const shownImportance = m.importance === null || m.importance === undefined ? '' : Math.round(Number(m.importance) * 100) / 100;
  const importance = input({ type: 'number', name: 'importance', min: 0, max: 1, step: 0.01, value: shownImportance });
  const type = select(TYPES.map((t) => [t, t]), { name: 'type', value: m.type || 'fact' });
  const reason = input({ name: 'reason', placeholder: 'Why the change (kept in the audit log)' });
  const error = h('div', { class: 'notice error', role: 'alert', hidden: true });
  const form = h('form', { novalidate: true },
    error,
    h('div', { class: 'form-grid' },
      field('Content', content, null, 'full'),
      field('Topic', topic),
      field('Type', type),
      field('Keywords', keywords, 'Comma-separated.'),
      field('Importance', importance, '0 to 1.'),
      field('Reason', reason, null, 'full')),
    h('button', { class: 'btn primary', type: 'submit', text: 'Save amendment' }));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    const changes = {};
    if (content.value.trim() !== (m.content || '')) changes.content = content.value.trim();
    if (topic.value.trim() !== (m.topic || '')) changes.topic = topic.value.trim();
    const kw = keywords.value.split(',').map((s) => s.trim()).filter(Boolean);
    if (JSON.stringify(kw) !== JSON.stringify(m.keywords || [])) changes.keywords = kw;
    if (type.value !== m.type) changes.type = type.value;
    try {
      const imp = numberOrNull(importance);
      if (imp !== null && imp !== shownImportance) changes.importance = imp;
      if (!Object.keys(changes).length) {
        announce('Nothing changed.');
        return;
      }
      if (reason.value.trim()) changes.reason = reason.value.trim();
      await api('PATCH', `/memory/${encodeURIComponent(id)}`, { body: changes });
      announce('Memory amended; the earlier text is kept as a version.');
      refresh();
    } catch (err) {
      if (err.status === 401) return;
      clear(error).append(document.createTextNode(err.message));
      error.hidden = false;
    }
  });
  return card('Amend', form);
}

// ---------------------------------------------------------------- graph

let graphFilters = { topic: '', key: '', limit: '150' };

async function screenGraph(view) {
  const overview = await memoryFacets();
  const topic = select([['', 'All topics'], ...(overview.byTopic || []).map((t) => [t.topic, `${t.topic} (${num(t.count)})`])], { name: 'topic', value: graphFilters.topic });
  const key = select([['', 'All keys'], ...(overview.byKey || []).map((k) => [k.keyId, `${k.keyName} (${num(k.count)})`])], { name: 'key', value: graphFilters.key });
  const limit = select([['50', '50'], ['150', '150'], ['300', '300'], ['500', '500']], { name: 'limit', value: graphFilters.limit });
  const slot = h('div');
  const form = h('form', { class: 'filters', 'aria-label': 'Graph filters' },
    field('Topic', topic), field('Key', key), field('Most memories', limit),
    h('div', { class: 'field check-field' }, h('button', { class: 'btn primary', type: 'submit', text: 'Show' })));
  const draw = () => {
    graphFilters = { topic: topic.value, key: key.value, limit: limit.value };
    return section(slot, () => graphContent(graphFilters));
  };
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    draw();
  });
  for (const el of [topic, key, limit]) el.addEventListener('change', draw);
  fill(view,
    pageHead('Knowledge graph', 'Memories and the links between them. Bigger circles are more important; click one to open it.'),
    h('section', { class: 'card', 'aria-label': 'Filters' }, form),
    slot);
  await draw();
}

async function graphContent(filters) {
  const data = await api('GET', '/graph', { query: filters });
  const nodes = data.nodes || [];
  const edges = data.edges || [];
  if (!nodes.length) {
    return h('section', { class: 'card' }, empty('Nothing to draw yet',
      'The graph shows memories and their links. Agents create links with the link tool or with remember’s linkedTo; try other filters if you expect some.'));
  }
  const { element, legend } = renderGraph({ nodes, edges }, { onOpen: (id) => { window.location.hash = `#/memory/${encodeURIComponent(id)}`; } });
  const degree = new Map();
  for (const e of edges) {
    degree.set(e.source, (degree.get(e.source) || 0) + 1);
    degree.set(e.target, (degree.get(e.target) || 0) + 1);
  }
  const sorted = [...nodes].sort((a, b) => (Number(b.importance) || 0) - (Number(a.importance) || 0));
  return [
    h('section', { class: 'card', 'aria-labelledby': 'graph-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'graph-title', text: 'Graph' }),
        h('span', { class: 'count', text: `${num(nodes.length)} memories, ${num(edges.length)} links` })),
      h('div', { class: 'graph-wrap' }, element),
      legend),
    h('section', { class: 'card flush', 'aria-labelledby': 'graph-list-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'graph-list-title', text: 'Memories in the graph' })),
      table({
        caption: 'Memories in the graph, most important first',
        columns: ['Memory', 'Type', 'Topic', { label: 'Importance', cls: 'num' }, { label: 'Links', cls: 'num' }],
        rows: sorted.map((n) => [
          // Labels come cut at 80 characters.
          { value: h('a', { href: `#/memory/${encodeURIComponent(n.id)}`, text: String(n.label || n.id).length >= 80 ? `${n.label}…` : (n.label || n.id) }), cls: 'content-cell' },
          typeBadge(n.type),
          n.topic || '—',
          { value: Number(n.importance ?? 0).toFixed(2), cls: 'num' },
          { value: num(degree.get(n.id) || 0), cls: 'num' },
        ]),
      })),
  ];
}

// ---------------------------------------------------------------- sessions

async function screenSessions(view) {
  const [data, reflected] = await Promise.all([api('GET', '/sessions'), api('GET', '/session-reflections')]);
  const sessions = data.sessions || [];
  const reflections = reflected.reflections || [];
  const reload = h('button', { class: 'btn', type: 'button', text: 'Refresh', onclick: refresh });
  fill(view,
    pageHead('Sessions', 'Live MCP sessions of your agents. Terminating one makes its client start a new session.', reload),
    h('section', { class: 'card flush', 'aria-label': 'Sessions' },
      sessions.length ? table({
        caption: 'Live MCP sessions',
        columns: ['Session', 'Key', 'Protocol', 'Mode', 'Started', 'Last seen', { label: 'Actions', cls: 'actions-cell' }],
        rowAttrs: (i) => ({ dataset: { sessionId: sessions[i].id } }),
        rows: sessions.map((s) => [
          h('code', { text: shortId(s.id), title: s.id }),
          s.keyName || shortId(s.keyId),
          s.protocolVersion || '—',
          s.mode || 'default',
          { value: timeEl(s.createdAt), cls: 'nowrap' },
          { value: timeEl(s.lastSeenAt, true), cls: 'nowrap' },
          { value: canManage() ? h('button', {
            class: 'btn small danger-outline', type: 'button', text: 'Terminate', 'aria-label': `Terminate session ${shortId(s.id)} of ${s.keyName || 'key'}`,
            onclick: async () => {
              const ok = await confirmDialog({
                title: 'Terminate this session?',
                message: `The session of ${s.keyName || 'this key'} ends now; its next request gets 404 and the client starts a new session.`,
                confirmLabel: 'Terminate session',
                danger: true,
              });
              if (!ok) return;
              try {
                await api('DELETE', `/sessions/${encodeURIComponent(s.id)}`);
                announce('Session terminated.');
                refresh();
              } catch (error) {
                if (error.status !== 401) announce(error.message, 'error');
              }
            },
          }) : '—', cls: 'actions-cell' },
        ]),
      }) : empty('No live sessions', 'Sessions appear here while an agent is connected to /mcp with one of your API keys.')),
    h('section', { class: 'card flush', 'aria-labelledby': 'reflections-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'reflections-title', text: 'Automatic reflections' })),
      reflections.length ? table({
        caption: 'What idle and closed sessions were summed up into',
        columns: ['Session', 'Key', 'Outcome', 'Calls', 'Memories', 'Reason', 'When'],
        rows: reflections.map((r) => [
          h('code', { text: shortId(r.sessionId), title: r.sessionId }),
          shortId(r.keyId),
          r.state,
          String(r.calls),
          String(r.fragments),
          r.reason || '—',
          { value: timeEl(r.finishedAt || r.claimedAt), cls: 'nowrap' },
        ]),
      }) : empty('No automatic reflections yet', 'With a language model configured, a session idle for a day or closed by its client is summed up into memories of its key, unless the agent stored memories itself.')));
}

// ---------------------------------------------------------------- surfacing

let surfacingDays = '7';

function ratingCount(r) {
  if (!r) return 0;
  return (r.helpful || 0) + (r.partiallyHelpful || 0) + (r.notRelevant || 0) + (r.alreadyKnown || 0);
}

function negativeCount(r) {
  return (r?.notRelevant || 0) + (r?.alreadyKnown || 0);
}

async function screenSurfacing(view) {
  const days = select([['1', 'Last 24 hours'], ['7', 'Last 7 days'], ['30', 'Last 30 days'], ['90', 'Last 90 days']], { value: surfacingDays });
  days.addEventListener('change', () => {
    surfacingDays = days.value;
    refresh();
  });
  const data = await api('GET', '/surfacing', { query: { days: surfacingDays } });
  const tools = data.tools || [];
  const recent = (data.recent || []).map((e) => ({ ...e }));
  const totals = data.totals || {};
  const r = totals.ratings || {};
  const rated = ratingCount(r);
  const totalCards = [
    kpi('Surfacings', num(totals.events ?? 0), 'tool calls that got memories'),
    kpi('Ratings', num(rated), 'given by agents'),
    kpi('Helpful', rated ? pct((r.helpful || 0) / rated) : '—', `${num(r.helpful || 0)} helpful, ${num(r.partiallyHelpful || 0)} partly`),
    kpi('Not useful', rated ? pct(negativeCount(r) / rated) : '—', `${num(r.notRelevant || 0)} not relevant, ${num(r.alreadyKnown || 0)} already known`),
  ];
  fill(view,
    pageHead('Surfacing', 'Memories mneme brought to agents unasked (hooks and upstream tools), and how agents rated them.',
      h('div', { class: 'tenant-picker' }, field('Period', days))),
    h('div', { class: 'kpis' }, totalCards),
    h('section', { class: 'card flush', 'aria-labelledby': 'surf-tools' },
      h('div', { class: 'card-head' }, h('h2', { id: 'surf-tools', text: 'By tool' })),
      tools.length ? table({
        caption: 'Surfacing by tool',
        columns: ['Tool', { label: 'Events', cls: 'num' }, { label: 'Avg. memories', cls: 'num' }, { label: 'Helpful', cls: 'num' },
          { label: 'Partly', cls: 'num' }, { label: 'Not relevant', cls: 'num' }, { label: 'Known', cls: 'num' },
          { label: 'Negative share', cls: 'num' }, { label: 'Threshold', cls: 'num' }, { label: 'Tunings', cls: 'num' }],
        rows: tools.map((t) => [
          h('code', { text: t.server ? `${t.server}__${t.tool}` : t.tool }),
          { value: num(t.events), cls: 'num' },
          { value: t.avgMemories === undefined || t.avgMemories === null ? '—' : Number(t.avgMemories).toFixed(1), cls: 'num' },
          { value: num(t.ratings?.helpful), cls: 'num' },
          { value: num(t.ratings?.partiallyHelpful), cls: 'num' },
          { value: num(t.ratings?.notRelevant), cls: 'num' },
          { value: num(t.ratings?.alreadyKnown), cls: 'num' },
          { value: pct(t.negativeShare ?? (ratingCount(t.ratings) ? negativeCount(t.ratings) / ratingCount(t.ratings) : null)), cls: 'num' },
          { value: t.minScore === null || t.minScore === undefined ? 'default' : Number(t.minScore).toFixed(2), cls: 'num' },
          { value: num(t.adjustments), cls: 'num' },
        ]),
      }) : empty('Nothing surfaced in this period',
        'Memories are surfaced through the Claude Code hook (docs/HOOKS.md) and on results of upstream MCP servers (docs/PROXY.md).')),
    h('section', { class: 'card flush', 'aria-labelledby': 'surf-recent' },
      h('div', { class: 'card-head' }, h('h2', { id: 'surf-recent', text: 'Latest surfacings' })),
      recent.length ? table({
        caption: 'Latest surfacings',
        columns: ['When', 'Tool', 'Query', { label: 'Memories', cls: 'num' }, { label: 'Best relevance', cls: 'num' }],
        rows: recent.map((r) => [
          { value: timeEl(r.createdAt), cls: 'nowrap' },
          h('code', { text: r.server ? `${r.server}__${r.tool}` : r.tool || '—' }),
          { value: truncate(r.query, 120), cls: 'content-cell' },
          { value: num(Array.isArray(r.memories) ? r.memories.length : r.memories), cls: 'num' },
          { value: r.maxRelevance === null || r.maxRelevance === undefined ? '—' : Number(r.maxRelevance).toFixed(2), cls: 'num' },
        ]),
      }) : empty('No surfacings in this period', null)));
}

// ---------------------------------------------------------------- upstreams

async function screenUpstreams(view) {
  const data = await api('GET', '/upstreams');
  const ups = data.upstreams || [];
  fill(view,
    pageHead('Upstreams', 'Remote MCP servers behind mneme: their tools appear to your agents as prefix__tool, with relevant memories attached.'),
    h('section', { class: 'card flush', 'aria-label': 'Upstreams' },
      ups.length ? table({
        caption: 'Upstream MCP servers',
        columns: ['Name', 'Prefix', 'Transport', 'URL', 'Enabled', 'Surfacing', 'Health', 'Headers', 'Updated'],
        rows: ups.map((u) => [
          u.name,
          h('code', { text: u.prefix || u.name }),
          u.transport || '—',
          { value: h('code', { text: truncate(u.url, 60), title: u.url }), cls: 'small' },
          u.enabled === false ? badge('disabled', 'bad') : badge('enabled', 'ok'),
          u.surfacingEnabled === false ? badge('off') : badge('on', 'info'),
          healthBadge(u.health),
          (u.headerNames || []).length ? h('code', { text: u.headerNames.join(', ') }) : 'none',
          { value: timeEl(u.updatedAt || u.createdAt), cls: 'nowrap' },
        ]),
      }) : empty('No upstream servers',
        'Register one with “mneme upstreams add” or POST /v1/upstreams (see docs/PROXY.md); it is listed here, read-only.')));
}

function healthBadge(health) {
  if (!health) return badge('not used yet');
  if (health.breaker && health.breaker !== 'closed') return badge(`breaker ${health.breaker}`, 'bad');
  return health.connected ? badge('connected', 'ok') : badge('idle', 'warn');
}

// ---------------------------------------------------------------- consolidation

async function screenConsolidation(view) {
  const data = await api('GET', '/consolidation/runs');
  const runs = data.runs || [];
  const resultSlot = h('div');
  const actions = [];
  if (canManage()) {
    const start = async (dryRun, button) => {
      if (!dryRun) {
        const ok = await confirmDialog({
          title: 'Run consolidation now?',
          message: 'Decay, merging of near-duplicates, garbage collection and the other stages run on this tenant’s memory now and change it. A dry run shows what would change without changing anything.',
          confirmLabel: 'Run now',
        });
        if (!ok) return;
      }
      for (const b of actions) b.disabled = true;
      button.textContent = dryRun ? 'Dry run in progress…' : 'Running…';
      clear(resultSlot).append(h('p', { class: 'loading', role: 'status', text: 'Consolidating… this can take a little while.' }));
      try {
        const res = await api('POST', '/consolidation/run', { body: { dryRun } });
        announce(dryRun ? 'Dry run finished: nothing was changed.' : 'Consolidation finished.');
        await screenConsolidation(view);
        const slot = view.querySelector('[data-slot="result"]');
        if (slot && res && res.run) slot.append(runSummary(res.run, dryRun));
      } catch (error) {
        if (error.status === 401) return;
        clear(resultSlot).append(errorNotice(error));
        for (const b of actions) b.disabled = false;
        button.textContent = dryRun ? 'Dry run' : 'Run now';
      }
    };
    const dry = h('button', { class: 'btn', type: 'button', text: 'Dry run', onclick: () => start(true, dry) });
    const run = h('button', { class: 'btn primary', type: 'button', text: 'Run now', onclick: () => start(false, run) });
    actions.push(dry, run);
  }
  resultSlot.dataset.slot = 'result';
  fill(view,
    pageHead('Consolidation', 'Maintenance of the memory: decay, de-duplication, contradiction checks and garbage collection, one tenant at a time.', ...actions),
    resultSlot,
    h('section', { class: 'card flush', 'aria-labelledby': 'runs-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'runs-title', text: 'Runs' })),
      runs.length ? table({
        caption: 'Consolidation runs, newest first',
        columns: ['Started', 'Duration', 'Kind', { label: 'Changed', cls: 'num' }, 'Stages that changed something'],
        rows: runs.map((r) => {
          const stages = r.stages || [];
          const changed = stages.filter((s) => Number(s.affected) > 0);
          const failed = r.status === 'failed' || stages.some((s) => s.error);
          const total = stages.reduce((a, s) => a + (Number(s.affected) || 0), 0);
          return [
            { value: timeEl(r.startedAt), cls: 'nowrap' },
            duration(r.startedAt, r.finishedAt),
            { value: [r.dryRun ? badge('dry run', 'info') : badge('applied', 'ok'), r.trigger ? badge(r.trigger) : null, failed ? badge('failed', 'bad') : null], cls: 'nowrap' },
            { value: num(total), cls: 'num' },
            changed.length ? h('ul', { class: 'stage-list' }, changed.map((s) => h('li', { class: 'chip plain', text: `${stageName(s)}: ${num(s.affected)}` })))
              : h('span', { class: 'muted', text: `no changes (${stages.length} stages)` }),
          ];
        }),
      }) : empty('No runs yet', canManage()
        ? 'Consolidation runs on a schedule when it is enabled. Start a dry run to see what it would change now.'
        : 'Consolidation runs on a schedule when it is enabled; its runs are listed here.')));
}

function duration(from, to) {
  if (!to) return badge('running', 'warn');
  const secs = (new Date(to).getTime() - new Date(from).getTime()) / 1000;
  if (!Number.isFinite(secs)) return '—';
  return secs < 1 ? `${Math.round(secs * 1000)} ms` : secs < 120 ? `${secs.toFixed(1)} s` : `${Math.round(secs / 60)} min`;
}

/** A stage's name (docs/ADMIN.md says `name`; the API sends `stage`). */
function stageName(s) {
  return String(s.name ?? s.stage ?? 'stage').replace(/_/g, ' ');
}

function runSummary(run, dryRun) {
  const stages = run.stages || [];
  const changed = stages.filter((s) => Number(s.affected) > 0).length;
  return h('section', { class: 'card', 'aria-label': 'Result of the run' },
    h('div', { class: 'card-head' },
      h('h2', { text: dryRun ? 'Dry run: what would change' : 'Run finished' }),
      h('span', { class: 'count', text: `${changed} of ${stages.length} stages ${dryRun ? 'would change' : 'changed'} something` })),
    stages.length ? table({
      caption: 'Stages',
      columns: ['Stage', { label: dryRun ? 'Would change' : 'Changed', cls: 'num' }, { label: 'Time', cls: 'num' }, 'Note'],
      rows: stages.map((s) => [
        stageName(s),
        { value: num(s.affected), cls: 'num' },
        { value: s.millis === undefined || s.millis === null ? '—' : ms(s.millis), cls: 'num' },
        s.error ? h('span', { class: 'badge bad', text: `failed: ${s.error}` }) : s.skipped ? h('span', { class: 'muted small', text: `skipped: ${s.skipped}` }) : '',
      ]),
    }) : h('p', { class: 'muted', text: 'No stage reported anything.' }));
}

// ---------------------------------------------------------------- metrics and usage

async function screenMetrics(view) {
  const [metrics, usage, search] = await Promise.allSettled([
    api('GET', '/metrics'),
    api('GET', '/usage', { query: { days: 14 } }),
    api('GET', '/search-analytics', { query: { days: 7 } }),
  ]);
  for (const r of [metrics, usage, search]) if (r.status === 'rejected' && r.reason.status === 401) throw r.reason;
  const parts = [pageHead('Metrics & usage', 'This gateway pod’s request counters since it started, tool usage per day and search quality.',
    h('button', { class: 'btn', type: 'button', text: 'Refresh', onclick: refresh }))];

  if (metrics.status === 'fulfilled') {
    const m = metrics.value;
    const lat = m.latency || {};
    const raw = m.series || [];
    const span = raw.length > 1 ? (new Date(raw[raw.length - 1].at) - new Date(raw[0].at)) / 1000 : 0;
    const series = raw.map((p) => ({ x: fmtClock(p.at, span < 600), requests: p.requests, errors: p.errors, p95Ms: p.p95Ms }));
    parts.push(h('div', { class: 'kpis' },
      kpi('Requests', num(m.requests), 'since this pod started'),
      kpi('Errors', num(m.errors), m.requests ? `${pct(m.errors / m.requests)} of requests` : null),
      kpi('Latency p50', ms(lat.p50Ms), 'half the requests are faster'),
      kpi('Latency p95', ms(lat.p95Ms), `p99 ${ms(lat.p99Ms)}`)));
    parts.push(h('div', { class: 'grid-2' },
      card('Requests and errors', series.length > 0
        ? lineChart({ width: 480, title: 'Requests and errors over time', points: series, series: [{ key: 'requests', label: 'Requests' }, { key: 'errors', label: 'Errors', color: '#dc2626' }] })
        : h('p', { class: 'muted', text: 'No samples yet: the pod samples its counters every 10 seconds. Refresh in a moment.' })),
      card('Latency (p95)', series.length > 0
        ? lineChart({ width: 480, title: 'p95 latency over time, milliseconds', points: series, series: [{ key: 'p95Ms', label: 'p95 ms', color: '#0891b2' }] })
        : h('p', { class: 'muted', text: 'No samples yet.' }))));
    const tools = m.tools || [];
    // Tenant users get no per-tool table: it would show what every tenant
    // on the pod does (docs/ADMIN.md).
    if (m.tools) parts.push(h('section', { class: 'card flush', 'aria-labelledby': 'tools-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'tools-title', text: 'Tools on this pod' })),
      tools.length ? table({
        caption: 'Calls per tool',
        columns: ['Tool', { label: 'Calls', cls: 'num' }, { label: 'Errors', cls: 'num' }, { label: 'Error rate', cls: 'num' }, { label: 'p50', cls: 'num' }, { label: 'p95', cls: 'num' }],
        rows: [...tools].sort((a, b) => b.calls - a.calls).map((t) => [h('code', { text: t.tool }), { value: num(t.calls), cls: 'num' }, { value: num(t.errors), cls: 'num' },
          { value: t.calls ? pct(t.errors / t.calls) : '—', cls: 'num' }, { value: ms(t.p50Ms), cls: 'num' }, { value: ms(t.p95Ms), cls: 'num' }]),
      }) : empty('No tool calls on this pod yet', 'Counters start when the pod starts.')));
  } else {
    parts.push(errorNotice(metrics.reason));
  }

  if (usage.status === 'fulfilled') {
    const u = usage.value;
    const keys = u.keys || [];
    parts.push(h('div', { class: 'grid-2' },
      card('Tool calls per day (14 days)', (u.days || []).length
        ? barChart({ width: 480, title: 'Tool calls per day, all keys', data: fillDays(u.days, 14, { toolCalls: 0 }).map((d) => ({ label: fmtDay(d.day), value: d.toolCalls })), valueLabel: 'Tool calls' })
        : h('p', { class: 'muted', text: 'No tool calls recorded yet.' })),
      h('section', { class: 'card flush', 'aria-labelledby': 'usage-keys' },
        h('div', { class: 'card-head' }, h('h2', { id: 'usage-keys', text: 'Today per key' })),
        keys.length ? table({
          caption: 'Tool calls today per key against its daily limit',
          columns: ['Key', { label: 'Calls today', cls: 'num' }, 'Of the daily limit'],
          rows: keys.map((k) => [k.keyName || shortId(k.keyId), { value: limitText(k.toolCallsToday, k.dailyCallLimit), cls: 'num' },
            k.dailyCallLimit ? h('meter', { min: 0, max: k.dailyCallLimit, value: Math.min(k.toolCallsToday || 0, k.dailyCallLimit), low: k.dailyCallLimit * 0.7, high: k.dailyCallLimit * 0.9, optimum: 0, 'aria-label': `${k.keyName}: ${k.toolCallsToday} of ${k.dailyCallLimit}` })
              : h('span', { class: 'muted small', text: 'no limit' })]),
        }) : empty('No keys yet', null))));
  } else {
    parts.push(errorNotice(usage.reason));
  }

  if (search.status === 'fulfilled') {
    const s = search.value;
    const days = (s.days || []).length
      ? fillDays(s.days, 7, { searches: 0, zeroResults: 0 }).map((d) => ({ x: fmtDay(d.day), searches: d.searches, zeroResults: d.zeroResults, p50Ms: d.p50Ms, p95Ms: d.p95Ms }))
      : [];
    // docs/ADMIN.md promises topQueries; the API may send byType instead.
    const top = s.topQueries || [];
    const byKind = s.byType || [];
    parts.push(h('div', { class: 'grid-2' },
      card('Searches (7 days)', days.length
        ? lineChart({ width: 480, title: 'Searches and searches without results per day', points: days, series: [{ key: 'searches', label: 'Searches' }, { key: 'zeroResults', label: 'No results', color: '#d97706', dashed: true }] })
        : h('p', { class: 'muted', text: 'No searches in the last 7 days.' })),
      s.topQueries || !s.byType ? h('section', { class: 'card flush', 'aria-labelledby': 'top-queries' },
        h('div', { class: 'card-head' }, h('h2', { id: 'top-queries', text: 'Top queries' })),
        top.length ? table({
          caption: 'Most frequent queries',
          columns: ['Query', { label: 'Count', cls: 'num' }],
          rows: top.map((q) => [{ value: truncate(q.query, 100), cls: 'content-cell' }, { value: num(q.count), cls: 'num' }]),
        }) : empty('No queries yet', 'The queries agents search for most often are listed here.'))
        : h('section', { class: 'card', 'aria-labelledby': 'search-kinds' },
          h('h2', { id: 'search-kinds', text: 'Searches by kind (7 days)' }),
          byKind.length ? proportionBars(byKind.map((k) => ({ label: String(k.queryType ?? k.type ?? 'other').replace(/_/g, ' '), value: Number(k.count) || 0 })), { label: 'searches' })
            : empty('No searches yet', 'How agents search (by words, by meaning, by keyword…) is broken down here.'))));
  } else {
    parts.push(errorNotice(search.reason));
  }
  fill(view, parts);
}

// ---------------------------------------------------------------- audit

async function screenAudit(view) {
  const entries = [];
  let before = null;
  const body = h('div');
  const foot = h('div', { class: 'table-foot' });
  const more = h('button', { class: 'btn', type: 'button', text: 'Load more' });
  const load = async () => {
    const page = await api('GET', '/audit', { query: { limit: 50, before } });
    entries.push(...(page.entries || []));
    before = page.nextBefore || null;
    clear(body).append(entries.length ? auditTable(entries, 'Audit log, newest first')
      : empty('Nothing recorded yet', 'Every change made in this dashboard or through the admin API is logged here: who, what, when and from where.'));
    foot.hidden = !before;
  };
  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      await load();
    } catch (error) {
      if (error.status !== 401) announce(error.message, 'error');
    } finally {
      more.disabled = false;
    }
  });
  foot.append(more);
  await load();
  fill(view,
    pageHead('Audit log', 'Every change made through the dashboard: who, what, when and from where.'),
    h('section', { class: 'card flush', 'aria-label': 'Audit entries' }, body, foot));
}

// ---------------------------------------------------------------- tenants (platform)

async function screenTenants(view) {
  const data = await api('GET', '/tenants');
  state.tenants = data.tenants || [];
  if (!state.tenants.some((t) => t.id === state.tenantId)) selectTenant(state.tenants[0]?.id || null);
  else renderTenantPicker();
  const name = input({ name: 'name', required: true, autocomplete: 'off', placeholder: 'e.g. acme' });
  const form = h('form', { class: 'inline-form', 'aria-label': 'Create a tenant' },
    field('New tenant name', name), h('button', { class: 'btn primary', type: 'submit', text: 'Create tenant' }));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (!name.value.trim()) {
      announce('Give the tenant a name.', 'error');
      name.focus();
      return;
    }
    try {
      const res = await api('POST', '/tenants', { body: { name: name.value.trim() } });
      announce(`Tenant ${res.tenant.name} created.`);
      selectTenant(res.tenant.id);
      refresh();
    } catch (error) {
      if (error.status !== 401) announce(error.message, 'error');
    }
  });
  const tenants = state.tenants;
  fill(view,
    pageHead('Tenants', 'Customers of this mneme installation. Suspending a tenant stops its keys and tokens at once.'),
    card('Create a tenant', form),
    h('section', { class: 'card flush', 'aria-label': 'Tenants' },
      tenants.length ? table({
        caption: 'Tenants',
        columns: ['Name', 'Id', 'Status', 'Created', { label: 'Actions', cls: 'actions-cell' }],
        rows: tenants.map((t) => [
          t.name, h('code', { text: t.id }), statusBadge(t.status), { value: timeEl(t.createdAt), cls: 'nowrap' },
          { value: [
            h('button', { class: 'btn small', type: 'button', text: t.id === state.tenantId ? 'Selected' : 'Open', disabled: t.id === state.tenantId,
              onclick: () => { selectTenant(t.id); window.location.hash = '#/overview'; } }),
            ' ',
            h('button', {
              class: `btn small ${t.status === 'active' ? 'danger-outline' : ''}`, type: 'button', text: t.status === 'active' ? 'Suspend' : 'Resume',
              onclick: async () => {
                const suspending = t.status === 'active';
                if (suspending) {
                  const ok = await confirmDialog({ title: `Suspend tenant ${t.name}?`, message: 'Its API keys and OAuth tokens stop working at once. Its data stays; you can resume it later.', confirmLabel: 'Suspend tenant', danger: true });
                  if (!ok) return;
                }
                try {
                  await api('PATCH', `/tenants/${encodeURIComponent(t.id)}`, { body: { status: suspending ? 'suspended' : 'active' } });
                  announce(`Tenant ${t.name} ${suspending ? 'suspended' : 'resumed'}.`);
                  refresh();
                } catch (error) {
                  if (error.status !== 401) announce(error.message, 'error');
                }
              },
            }),
          ], cls: 'actions-cell' },
        ]),
      }) : empty('No tenants yet', 'Create the first tenant above, then add its owner and API keys.')));
}

// ---------------------------------------------------------------- start

function wire() {
  $('signin-form').addEventListener('submit', signIn);
  $('signout-btn').addEventListener('click', signOut);
  $('menu-btn').addEventListener('click', () => setNavOpen(!$('app').classList.contains('nav-open')));
  $('scrim').addEventListener('click', () => setNavOpen(false));
  $('nav-items').addEventListener('click', (ev) => {
    if (ev.target.closest('a')) setNavOpen(false);
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && $('app').classList.contains('nav-open')) {
      setNavOpen(false);
      $('menu-btn').focus();
    }
  });
  $('tenant-select').addEventListener('change', (ev) => {
    selectTenant(ev.target.value);
    announce(`Now acting in tenant ${state.tenants.find((t) => t.id === state.tenantId)?.name || ''}.`);
    route(false);
  });
  window.addEventListener('hashchange', () => route(true));
}

async function start() {
  wire();
  try {
    const session = await api('GET', '/session', { signIn: true });
    await enter(session);
  } catch (error) {
    if (error.status === 401) {
      showSignIn();
    } else {
      $('boot').hidden = true;
      showSignIn(`The dashboard could not start: ${error.message}`);
    }
  }
}

start();
