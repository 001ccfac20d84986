// Small SVG charts for the admin dashboard: a line chart for time series and
// a bar chart for daily counts. No library; every chart also offers its
// numbers as a table for screen readers and for copying.

const SVG = 'http://www.w3.org/2000/svg';

export const PALETTE = ['#4338ca', '#dc2626', '#0891b2', '#d97706', '#059669', '#7c3aed'];

export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return el;
}

function html(tag, cls, text) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined) el.textContent = text;
  return el;
}

/** A "nice" upper bound and tick step for values up to `max`. */
export function niceScale(max, ticks = 4, integer = false) {
  if (integer && max <= ticks) return { top: Math.max(1, Math.ceil(max)), step: 1 };
  if (!(max > 0)) return { top: 1, step: 0.25 };
  const raw = max / ticks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const choices = integer && mag === 1 ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10];
  const step = choices.find((c) => norm <= c) * mag;
  return { top: step * Math.ceil(max / step), step };
}

/** Narrow screens get a narrower drawing, so its text stays readable. */
function narrowScreen() {
  return typeof window !== 'undefined' && window.matchMedia && window.matchMedia('(max-width: 800px)').matches;
}

function fitWidth(width) {
  return narrowScreen() ? Math.min(width, 340) : width;
}

export function formatNumber(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '—';
  const abs = Math.abs(n);
  if (abs >= 1e6) return `${(n / 1e6).toFixed(abs >= 1e7 ? 0 : 1)}M`;
  if (abs >= 1e4) return `${(n / 1e3).toFixed(abs >= 1e5 ? 0 : 1)}k`;
  if (Number.isInteger(n)) return n.toLocaleString('en-US');
  return n.toLocaleString('en-US', { maximumFractionDigits: abs < 10 ? 2 : 1 });
}

function swatch(color, dashed) {
  return svg('svg', { viewBox: '0 0 12 12', 'aria-hidden': 'true', focusable: 'false' },
    dashed
      ? svg('line', { x1: 0, y1: 6, x2: 12, y2: 6, stroke: color, 'stroke-width': 3, 'stroke-dasharray': '3 2' })
      : svg('rect', { width: 12, height: 12, rx: 3, fill: color }));
}

/** A legend list: items [{label, color, dashed?}]. */
export function legend(items) {
  const ul = html('ul', 'legend');
  for (const item of items) {
    const li = html('li');
    li.append(swatch(item.color, item.dashed), document.createTextNode(item.label));
    ul.append(li);
  }
  return ul;
}

function dataTable(caption, headers, rows) {
  const details = html('details', 'chart-data');
  details.append(html('summary', '', 'Show the numbers'));
  const wrap = html('div', 'table-wrap');
  const table = html('table');
  table.append(html('caption', 'visually-hidden', caption));
  const thead = html('thead');
  const tr = html('tr');
  for (const head of headers) {
    const th = html('th', '', head);
    th.scope = 'col';
    tr.append(th);
  }
  thead.append(tr);
  const tbody = html('tbody');
  for (const row of rows) {
    const r = html('tr');
    row.forEach((cell, i) => {
      const c = html(i === 0 ? 'th' : 'td', i === 0 ? '' : 'num', cell);
      if (i === 0) c.scope = 'row';
      r.append(c);
    });
    tbody.append(r);
  }
  table.append(thead, tbody);
  wrap.append(table);
  details.append(wrap);
  return details;
}

/**
 * A line chart.
 * points: [{x: label string, ...values}]
 * series: [{key, label, color?, dashed?}]
 */
export function lineChart({ title, points, series, width: wanted = 720, height = 240, format = formatNumber }) {
  const width = fitWidth(wanted);
  const figure = html('figure', 'chart-figure');
  figure.append(html('figcaption', 'visually-hidden', title));
  const pad = { left: 48, right: 14, top: 12, bottom: 28 };
  const w = width - pad.left - pad.right;
  const hgt = height - pad.top - pad.bottom;
  const colors = series.map((s, i) => s.color || PALETTE[i % PALETTE.length]);
  let max = 0;
  let integer = true;
  for (const p of points) {
    for (const s of series) {
      const v = Number(p[s.key]) || 0;
      max = Math.max(max, v);
      if (!Number.isInteger(v)) integer = false;
    }
  }
  const { top, step } = niceScale(max, 4, integer);
  const n = points.length;
  const xAt = (i) => pad.left + (n <= 1 ? w / 2 : (i * w) / (n - 1));
  const yAt = (v) => pad.top + hgt - ((Number(v) || 0) / top) * hgt;

  const root = svg('svg', {
    class: 'chart', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': title,
    preserveAspectRatio: 'xMidYMid meet',
  });
  root.append(svg('title', {}, title));
  for (let v = 0; v <= top + 1e-9; v += step) {
    const y = yAt(v);
    root.append(svg('line', { class: 'grid-line', x1: pad.left, x2: width - pad.right, y1: y, y2: y }));
    root.append(svg('text', { class: 'axis-label', x: pad.left - 6, y: y + 4, 'text-anchor': 'end' }, format(v)));
  }
  root.append(svg('line', { class: 'axis-line', x1: pad.left, x2: width - pad.right, y1: pad.top + hgt, y2: pad.top + hgt }));
  if (n > 0) {
    const ticks = n <= 6 ? [...Array(n).keys()] : [0, Math.round((n - 1) / 3), Math.round((2 * (n - 1)) / 3), n - 1];
    for (const i of ticks) {
      const anchor = n > 1 && i === 0 ? 'start' : n > 1 && i === n - 1 ? 'end' : 'middle';
      root.append(svg('text', { class: 'axis-label', x: xAt(i), y: height - 8, 'text-anchor': anchor }, points[i].x));
    }
  }
  series.forEach((s, si) => {
    const d = points.map((p, i) => `${i === 0 ? 'M' : 'L'}${xAt(i).toFixed(1)},${yAt(p[s.key]).toFixed(1)}`).join(' ');
    if (n > 1) {
      root.append(svg('path', {
        d, fill: 'none', stroke: colors[si], 'stroke-width': 2.2, 'stroke-linejoin': 'round',
        'stroke-linecap': 'round', 'stroke-dasharray': s.dashed ? '5 4' : null,
      }));
    }
    if (n <= 60) {
      points.forEach((p, i) => {
        root.append(svg('circle', { cx: xAt(i), cy: yAt(p[s.key]), r: n > 30 ? 2 : 3, fill: colors[si] },
          svg('title', {}, `${s.label} at ${p.x}: ${format(Number(p[s.key]) || 0)}`)));
      });
    }
  });
  figure.append(root);
  if (series.length > 1) {
    figure.append(legend(series.map((s, i) => ({ label: s.label, color: colors[i], dashed: s.dashed }))));
  }
  figure.append(dataTable(title, ['When', ...series.map((s) => s.label)],
    points.map((p) => [p.x, ...series.map((s) => format(Number(p[s.key]) || 0))])));
  return figure;
}

/** A vertical bar chart: data [{label, value}]. */
export function barChart({ title, data, width: wanted = 720, height = 220, color = PALETTE[0], valueLabel = 'Value', format = formatNumber }) {
  const width = fitWidth(wanted);
  const figure = html('figure', 'chart-figure');
  figure.append(html('figcaption', 'visually-hidden', title));
  const pad = { left: 48, right: 10, top: 12, bottom: 28 };
  const w = width - pad.left - pad.right;
  const hgt = height - pad.top - pad.bottom;
  const max = Math.max(0, ...data.map((d) => Number(d.value) || 0));
  const { top, step } = niceScale(max, 4, data.every((d) => Number.isInteger(Number(d.value) || 0)));
  const n = data.length;
  const slot = n ? w / n : w;
  const barW = Math.max(2, Math.min(42, slot * 0.68));
  const yAt = (v) => pad.top + hgt - ((Number(v) || 0) / top) * hgt;
  const root = svg('svg', { class: 'chart', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': title });
  root.append(svg('title', {}, title));
  for (let v = 0; v <= top + 1e-9; v += step) {
    const y = yAt(v);
    root.append(svg('line', { class: 'grid-line', x1: pad.left, x2: width - pad.right, y1: y, y2: y }));
    root.append(svg('text', { class: 'axis-label', x: pad.left - 6, y: y + 4, 'text-anchor': 'end' }, format(v)));
  }
  root.append(svg('line', { class: 'axis-line', x1: pad.left, x2: width - pad.right, y1: pad.top + hgt, y2: pad.top + hgt }));
  const every = Math.max(1, Math.ceil(n / (width < 500 ? 5 : 8)));
  data.forEach((d, i) => {
    const cx = pad.left + slot * i + slot / 2;
    const y = yAt(d.value);
    const barH = Math.max(0, pad.top + hgt - y);
    root.append(svg('rect', { class: 'bar', x: cx - barW / 2, y, width: barW, height: barH, rx: Math.min(3, barW / 4), fill: color },
      svg('title', {}, `${d.label}: ${format(Number(d.value) || 0)}`)));
    // Counted from the right, so the latest day is always labelled.
    if ((n - 1 - i) % every === 0) {
      root.append(svg('text', { class: 'axis-label', x: cx, y: height - 8, 'text-anchor': 'middle' }, d.label));
    }
  });
  figure.append(root);
  figure.append(dataTable(title, ['When', valueLabel], data.map((d) => [d.label, format(Number(d.value) || 0)])));
  return figure;
}

/** Horizontal proportion bars as an HTML list: data [{label, value}]. */
export function proportionBars(data, { max, label = 'count' } = {}) {
  const top = max ?? Math.max(1, ...data.map((d) => d.value));
  const ul = html('ul', 'bars');
  for (const d of data) {
    const li = html('li');
    const name = html('span', 'bar-name', d.label);
    name.title = d.label;
    const meter = document.createElement('meter');
    meter.min = 0;
    meter.max = top;
    meter.value = d.value;
    meter.setAttribute('aria-label', `${d.label}: ${d.value} ${label}`);
    li.append(name, meter, html('span', 'bar-count', formatNumber(d.value)));
    ul.append(li);
  }
  return ul;
}
