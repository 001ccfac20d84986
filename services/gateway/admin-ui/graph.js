// The knowledge graph: a force-directed layout computed up front, then
// drawn as SVG. The simulation has springs along links, repulsion between
// every pair, collision between circles and a pull toward the centre that
// keeps separate components together; it cools over a fixed number of
// steps and starts from positions seeded by a hash of each memory, so the
// same graph always gives the same picture. The result is fitted to the
// drawing area. Node radius grows with importance, colour is the memory's
// type. Short labels are drawn only where they fit without covering
// another label or node; hover or focus shows the full label, Enter or a
// click opens the memory.

import { svg, legend } from './charts.js';

export const TYPE_COLORS = {
  fact: '#2563eb',
  decision: '#7c3aed',
  error: '#dc2626',
  preference: '#db2777',
  procedure: '#059669',
  relation: '#d97706',
  episode: '#0891b2',
};
const OTHER = '#64748b';

export const RELATION_COLORS = {
  related: '#94a3b8',
  caused_by: '#dc2626',
  resolved_by: '#059669',
  part_of: '#0891b2',
  contradicts: '#b91c1c',
  superseded_by: '#7c3aed',
  co_retrieved: '#cbd5e1',
  temporal: '#d97706',
};

export function typeColor(type) {
  return TYPE_COLORS[type] || OTHER;
}

export function nodeRadius(importance) {
  const imp = Math.max(0, Math.min(1, Number(importance) || 0));
  return 4 + imp * 18;
}

// Room kept free around the drawing, in SVG units.
const PAD_X = 34;
const PAD_Y = 26;
// Free space kept between two circles.
const GAP = 6;
// Room kept right of the rightmost circle when fitting, for its label.
const LABEL_ROOM = 70;

/** FNV-1a: a 32-bit hash of a string. */
function hash(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Plain code-unit order, the same in every locale. */
function compareText(p, q) {
  return p < q ? -1 : p > q ? 1 : 0;
}

/** mulberry32: a small seeded generator of numbers in [0, 1). */
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Springs along links, looking one step ahead as the nodes are moving.
 * `bias` shares the pull so that the less connected end moves more.
 */
function springForces(src, dst, rest, stiffness, bias, x, y, vx, vy, alpha) {
  const m = src.length;
  for (let e = 0; e < m; e++) {
    const s = src[e];
    const t = dst[e];
    let dx = x[t] + vx[t] - x[s] - vx[s];
    let dy = y[t] + vy[t] - y[s] - vy[s];
    const l = Math.sqrt(dx * dx + dy * dy) || 1e-3;
    const f = ((l - rest[e]) / l) * alpha * stiffness[e];
    dx *= f;
    dy *= f;
    const bs = bias[e];
    vx[t] -= dx * bs;
    vy[t] -= dy * bs;
    vx[s] += dx * (1 - bs);
    vy[s] += dy * (1 - bs);
  }
}

/**
 * Repulsion (strength q, falling off as 1/distance) and collision between
 * every pair: O(n²), which is fine for n ≤ 500 without a quadtree. Works
 * on typed arrays only and allocates nothing.
 */
function pairForces(x, y, vx, vy, radius, q) {
  const n = x.length;
  const collide = 0.7;
  const minD2 = 25;
  for (let i = 0; i < n; i++) {
    const xi = x[i];
    const yi = y[i];
    const ri = radius[i];
    const ri2 = ri * ri;
    let fx = 0;
    let fy = 0;
    for (let j = i + 1; j < n; j++) {
      let dx = x[j] - xi;
      let dy = y[j] - yi;
      let d2 = dx * dx + dy * dy;
      if (d2 < 1e-6) {
        // Same spot: a fixed nudge that depends on the pair.
        dx = ((i * 31 + j * 17) % 7) - 2.5;
        dy = ((i * 13 + j * 29) % 5) - 1.5;
        d2 = dx * dx + dy * dy;
      }
      const rep = q / (d2 < minD2 ? minD2 : d2);
      const px = dx * rep;
      const py = dy * rep;
      fx -= px;
      fy -= py;
      vx[j] += px;
      vy[j] += py;
      // Collision: overlapping circles move apart, the smaller one more.
      const rj = radius[j];
      const min = ri + rj + GAP;
      if (d2 < min * min) {
        const d = Math.sqrt(d2);
        const push = ((min - d) / d) * collide;
        const rj2 = rj * rj;
        const wi = rj2 / (ri2 + rj2);
        fx -= dx * push * wi;
        fy -= dy * push * wi;
        vx[j] += dx * push * (1 - wi);
        vy[j] += dy * push * (1 - wi);
      }
    }
    vx[i] += fx;
    vy[i] += fy;
  }
}

/**
 * Pushes overlapping circles apart and keeps them inside the box, moving
 * positions directly. Used after fitting, where scaling may have brought
 * circles closer than the simulation left them.
 */
function separate(x, y, radius, width, height, rounds) {
  const n = x.length;
  for (let round = 0; round < rounds; round++) {
    let moved = false;
    for (let i = 0; i < n; i++) {
      const ri = radius[i];
      for (let j = i + 1; j < n; j++) {
        const dx = x[j] - x[i];
        const dy = y[j] - y[i];
        const min = ri + radius[j] + GAP;
        const d2 = dx * dx + dy * dy;
        if (d2 >= min * min) continue;
        moved = true;
        let d = Math.sqrt(d2);
        let ux;
        let uy;
        if (d < 1e-6) {
          // Same spot: split along a fixed, index-dependent direction.
          const a = (i * 7 + j * 13) * 0.7;
          ux = Math.cos(a);
          uy = Math.sin(a);
          d = 0;
        } else {
          ux = dx / d;
          uy = dy / d;
        }
        const push = (min - d) / 2;
        x[i] -= ux * push;
        y[i] -= uy * push;
        x[j] += ux * push;
        y[j] += uy * push;
      }
    }
    for (let i = 0; i < n; i++) {
      const r = radius[i];
      x[i] = Math.max(r + 2, Math.min(width - r - 2, x[i]));
      y[i] = Math.max(r + 2, Math.min(height - r - 2, y[i]));
    }
    if (!moved) break;
  }
}

/**
 * Positions for `nodes` given `edges`, inside width × height: an array of
 * {x, y, r} in the order of `nodes`. Deterministic: the same graph gives
 * the same picture.
 */
export function layout(nodes, edges, width, height) {
  const n = nodes.length;
  if (!n) return [];
  // The simulation works in a fixed order, by text (ids are random, texts
  // are what the picture shows), so the picture depends neither on the
  // order the memories come in nor on their ids: screenshots of the same
  // memories come out the same.
  const texts = nodes.map((d) => String(d.label || d.id));
  const order = nodes.map((d, i) => i).sort((p, q) => compareText(texts[p], texts[q]) || p - q);
  const rank = new Int32Array(n);
  order.forEach((i, r) => {
    rank[i] = r;
  });
  const index = new Map(nodes.map((d, i) => [d.id, rank[i]]));
  const radius = new Float64Array(n);
  for (let i = 0; i < n; i++) radius[rank[i]] = nodeRadius(nodes[i].importance);
  const cx = width / 2;
  const cy = height / 2;

  // One spring per linked pair, however many links the pair has; the
  // strongest link sets its length.
  const pairs = new Map();
  for (const e of edges) {
    const s = index.get(e.source);
    const t = index.get(e.target);
    if (s === undefined || t === undefined || s === t) continue;
    const w = Math.max(0.1, Math.min(1, Number(e.weight) || 0.5));
    const key = s < t ? s * n + t : t * n + s;
    const had = pairs.get(key);
    if (had === undefined || had < w) pairs.set(key, w);
  }
  const m = pairs.size;
  const src = new Int32Array(m);
  const dst = new Int32Array(m);
  const weight = new Float64Array(m);
  const degree = new Float64Array(n);
  let k = 0;
  for (const key of [...pairs.keys()].sort((p, q) => p - q)) {
    const w = pairs.get(key);
    src[k] = Math.floor(key / n);
    dst[k] = key % n;
    weight[k] = w;
    degree[src[k]] += 1;
    degree[dst[k]] += 1;
    k++;
  }

  // The scale of the picture: the room each node would have if the
  // memories filled the box evenly sets the length of a link.
  const innerW = Math.max(40, width - 2 * PAD_X);
  const innerH = Math.max(40, height - 2 * PAD_Y);
  const unit = Math.max(26, Math.min(120, Math.sqrt((innerW * innerH) / n) * 0.45));
  const rest = new Float64Array(m);
  const stiffness = new Float64Array(m);
  const bias = new Float64Array(m);
  for (let e = 0; e < m; e++) {
    const s = src[e];
    const t = dst[e];
    // Stronger links are a little shorter; circles keep their gap.
    rest[e] = radius[s] + radius[t] + GAP + unit * (1.1 - 0.35 * weight[e]);
    // Hubs would be pulled from all sides at once: soften their springs.
    stiffness[e] = 0.7 / Math.min(degree[s], degree[t]);
    bias[e] = degree[s] / (degree[s] + degree[t]);
  }

  // Repulsion falls off as 1/distance. The pull toward the centre is
  // stronger vertically, in proportion to the box, so that a cloud of n
  // nodes settles into an ellipse about the size of the box: for a
  // uniform cloud under 1/d repulsion of strength q in a trap of
  // stiffness gx, gy the semi-axes a, b satisfy gx = 2nq / (a(a + b)) and
  // gy = 2nq / (b(a + b)).
  const charge = unit * 1.1;
  const a = innerW * 0.42;
  const b = innerH * 0.42;
  const gx = (2 * n * charge) / (a * (a + b));
  const gy = (2 * n * charge) / (b * (a + b));

  // Seeded start inside that ellipse, from a hash of each memory's text
  // (and its rank among memories with the same text).
  const x = new Float64Array(n);
  const y = new Float64Array(n);
  const vx = new Float64Array(n);
  const vy = new Float64Array(n);
  const seen = new Map();
  for (let i = 0; i < n; i++) {
    const text = texts[order[i]];
    const dup = seen.get(text) || 0;
    seen.set(text, dup + 1);
    const next = random(hash(`${text}\u0000${dup}`));
    const r = Math.sqrt(next()) * 0.6;
    const angle = next() * 2 * Math.PI;
    x[i] = cx + a * r * Math.cos(angle);
    y[i] = cy + b * r * Math.sin(angle);
  }

  // Cooling: alpha falls geometrically from 1 to 0.002; every force but
  // collision is scaled by it.
  const iterations = 300;
  const alphaEnd = 0.002;
  const decay = 1 - Math.pow(alphaEnd, 1 / iterations);
  const keep = 0.6; // velocity kept from one step to the next
  let alpha = 1;
  for (let it = 0; it < iterations; it++) {
    springForces(src, dst, rest, stiffness, bias, x, y, vx, vy, alpha);
    // Repulsion and collision between every pair.
    pairForces(x, y, vx, vy, radius, charge * alpha);
    // Pull toward the centre, then move.
    const pullX = gx * alpha;
    const pullY = gy * alpha;
    for (let i = 0; i < n; i++) {
      vx[i] += (cx - x[i]) * pullX;
      vy[i] += (cy - y[i]) * pullY;
      vx[i] *= keep;
      vy[i] *= keep;
      x[i] += vx[i];
      y[i] += vy[i];
    }
    alpha *= 1 - decay;
  }

  // Fit into the box: scale and move so the drawing fills it, with a
  // margin. Each axis may stretch a little more than the other, and small
  // graphs are not blown up beyond a reasonable size. Labels mostly go to
  // the right of their circles, so some room is kept there.
  let minX = Infinity;
  let maxX = -Infinity;
  let minY = Infinity;
  let maxY = -Infinity;
  for (let i = 0; i < n; i++) {
    minX = Math.min(minX, x[i] - radius[i]);
    maxX = Math.max(maxX, x[i] + radius[i] + LABEL_ROOM);
    minY = Math.min(minY, y[i] - radius[i]);
    maxY = Math.max(maxY, y[i] + radius[i]);
  }
  const spanX = Math.max(1, maxX - minX);
  const spanY = Math.max(1, maxY - minY);
  const fitX = innerW / spanX;
  const fitY = innerH / spanY;
  const even = Math.min(fitX, fitY);
  const maxScale = 1.8;
  const sx = Math.min(fitX, even * 1.3, maxScale);
  const sy = Math.min(fitY, even * 1.3, maxScale);
  const midX = (minX + maxX) / 2;
  const midY = (minY + maxY) / 2;
  for (let i = 0; i < n; i++) {
    x[i] = cx + (x[i] - midX) * sx;
    y[i] = cy + (y[i] - midY) * sy;
  }
  // Radii do not scale: shrinking may have made circles touch again.
  separate(x, y, radius, width, height, 60);

  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    const r = rank[i];
    out[i] = { x: x[r], y: y[r], r: radius[r] };
  }
  return out;
}

function truncate(text, max) {
  const s = String(text ?? '');
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

// Label text metrics, in SVG units (matches .graph .node-label in app.css).
const LABEL_SIZE = 11;
const LABEL_ASCENT = 9;
const LABEL_DESCENT = 3;

/** Measures label widths with a canvas when there is one, else estimates. */
function labelMeasurer() {
  let ctx = null;
  try {
    ctx = document.createElement('canvas').getContext('2d');
    const family = getComputedStyle(document.body).fontFamily || 'sans-serif';
    ctx.font = `${LABEL_SIZE}px ${family}`;
  } catch {
    ctx = null;
  }
  return (text) => {
    if (ctx) {
      const w = ctx.measureText(text).width;
      if (w > 0) return w + 2;
    }
    return text.length * LABEL_SIZE * 0.58;
  };
}

// Free space kept between a label and other labels or circles.
const LABEL_GAP = 2;

function boxesOverlap(a, b) {
  return a.x0 < b.x1 + LABEL_GAP && b.x0 < a.x1 + LABEL_GAP && a.y0 < b.y1 + LABEL_GAP && b.y0 < a.y1 + LABEL_GAP;
}

function boxHitsCircle(box, x, y, r) {
  const px = Math.max(box.x0, Math.min(x, box.x1));
  const py = Math.max(box.y0, Math.min(y, box.y1));
  const dx = x - px;
  const dy = y - py;
  return dx * dx + dy * dy < r * r;
}

/** Whether the segment (x1, y1)–(x2, y2) crosses the box (Liang–Barsky). */
function segmentHitsBox(box, x1, y1, x2, y2) {
  const dx = x2 - x1;
  const dy = y2 - y1;
  let t0 = 0;
  let t1 = 1;
  const clip = (p, q) => {
    if (p === 0) return q >= 0;
    const t = q / p;
    if (p < 0) {
      if (t > t1) return false;
      if (t > t0) t0 = t;
    } else {
      if (t < t0) return false;
      if (t < t1) t1 = t;
    }
    return true;
  };
  return clip(-dx, x1 - box.x0) && clip(dx, box.x1 - x1) && clip(-dy, y1 - box.y0) && clip(dy, box.y1 - y1);
}

/**
 * Greedy label placement, most important memories first: a short label
 * goes to the right, left, below or above its circle, wherever it stays
 * inside the box and covers no placed label and no circle; among those
 * places the one crossing the fewest links wins, ties going in that
 * order. A label that fits nowhere is tried shorter, then left out: the
 * node still shows it on hover and focus.
 * `segments` holds the links as [x1, y1, x2, y2, …].
 * Returns [{i, text, x, y, anchor}].
 */
function placeLabels(nodes, pos, segments, width, height, maxLabels) {
  const measure = labelMeasurer();
  const order = nodes.map((d, i) => i)
    .sort((p, q) => (Number(nodes[q].importance) || 0) - (Number(nodes[p].importance) || 0)
      || compareText(String(nodes[p].label ?? nodes[p].id), String(nodes[q].label ?? nodes[q].id)) || p - q);
  const placed = [];
  const boxes = [];
  const h = LABEL_ASCENT + LABEL_DESCENT;
  const lengths = [28, 16];
  for (const i of order) {
    if (placed.length >= maxLabels) break;
    const label = String(nodes[i].label ?? nodes[i].id);
    const p = pos[i];
    for (const max of lengths) {
      const text = truncate(label, max);
      const w = measure(text);
      const candidates = [
        { x: p.x + p.r + 4, y: p.y + 4, anchor: 'start', x0: p.x + p.r + 3, y0: p.y + 4 - LABEL_ASCENT },
        { x: p.x - p.r - 4, y: p.y + 4, anchor: 'end', x0: p.x - p.r - 5 - w, y0: p.y + 4 - LABEL_ASCENT },
        { x: p.x, y: p.y + p.r + 3 + LABEL_ASCENT, anchor: 'middle', x0: p.x - w / 2 - 1, y0: p.y + p.r + 3 },
        { x: p.x, y: p.y - p.r - 3 - LABEL_DESCENT, anchor: 'middle', x0: p.x - w / 2 - 1, y0: p.y - p.r - 3 - h },
      ];
      let best = null;
      let bestBox = null;
      let bestCrossings = Infinity;
      for (const c of candidates) {
        const box = { x0: c.x0, y0: c.y0, x1: c.x0 + w + 2, y1: c.y0 + h };
        if (box.x0 < 2 || box.y0 < 2 || box.x1 > width - 2 || box.y1 > height - 2) continue;
        if (boxes.some((o) => boxesOverlap(box, o))) continue;
        let hit = false;
        for (let j = 0; j < pos.length && !hit; j++) {
          hit = boxHitsCircle(box, pos[j].x, pos[j].y, pos[j].r + (j === i ? 1 : LABEL_GAP + 1));
        }
        if (hit) continue;
        let crossings = 0;
        for (let k = 0; k < segments.length && crossings < bestCrossings; k += 4) {
          if (segmentHitsBox(box, segments[k], segments[k + 1], segments[k + 2], segments[k + 3])) crossings++;
        }
        if (crossings < bestCrossings) {
          best = c;
          bestBox = box;
          bestCrossings = crossings;
          if (crossings === 0) break;
        }
      }
      if (best) {
        boxes.push(bestBox);
        placed.push({ i, text, x: best.x, y: best.y, anchor: best.anchor });
        break;
      }
    }
  }
  return placed;
}

/** A taller drawing for more memories, so big graphs keep room for labels. */
function defaultHeight(n) {
  if (n <= 30) return 460;
  return n <= 200 ? 620 : 760;
}

/**
 * Draws the graph. Returns {element, legend}. `onOpen(id)` runs on click
 * or Enter.
 */
export function renderGraph({ nodes, edges }, { onOpen, width = 960, height = defaultHeight(nodes.length) } = {}) {
  const pos = layout(nodes, edges, width, height);
  const byId = new Map(nodes.map((d, i) => [d.id, i]));
  const root = svg('svg', {
    class: 'graph',
    viewBox: `0 0 ${width} ${height}`,
    role: 'group',
    'aria-label': `Knowledge graph: ${nodes.length} memories, ${edges.length} links. Use Tab to move between memories and Enter to open one.`,
  });
  const edgeLayer = svg('g', { class: 'edges', 'aria-hidden': 'true' });
  const labelLayer = svg('g', { class: 'labels', 'aria-hidden': 'true' });
  const nodeLayer = svg('g', { class: 'nodes' });
  const edgeEls = [];
  const neighbours = nodes.map(() => new Set());
  // Links between the same two memories lie on top of each other: draw
  // them in a fixed order, faint co-retrieval links first, so the picture
  // does not depend on the order they come in.
  const endText = (id) => {
    const d = nodes[byId.get(id)];
    return d ? String(d.label || d.id) : '';
  };
  const drawOrder = [...edges].sort((p, q) => (p.relation === 'co_retrieved' ? 0 : 1) - (q.relation === 'co_retrieved' ? 0 : 1)
    || compareText(String(p.relation), String(q.relation))
    || (Number(p.weight) || 0) - (Number(q.weight) || 0)
    || compareText(endText(p.source), endText(q.source))
    || compareText(endText(p.target), endText(q.target)));
  for (const e of drawOrder) {
    const s = byId.get(e.source);
    const t = byId.get(e.target);
    if (s === undefined || t === undefined) continue;
    neighbours[s].add(t);
    neighbours[t].add(s);
    const color = RELATION_COLORS[e.relation] || '#94a3b8';
    const line = svg('line', {
      class: 'edge',
      x1: pos[s].x.toFixed(1), y1: pos[s].y.toFixed(1),
      x2: pos[t].x.toFixed(1), y2: pos[t].y.toFixed(1),
      stroke: color,
      'stroke-width': (1 + 2 * Math.max(0, Math.min(1, Number(e.weight) || 0.5))).toFixed(2),
      'stroke-dasharray': e.relation === 'contradicts' ? '5 4' : null,
    });
    edgeEls.push({ line, s, t });
    edgeLayer.append(line);
  }

  // Permanent short labels wherever they fit, so the picture reads
  // without hovering.
  const labelEls = nodes.map(() => null);
  const segments = [];
  for (const e of edgeEls) segments.push(pos[e.s].x, pos[e.s].y, pos[e.t].x, pos[e.t].y);
  for (const l of placeLabels(nodes, pos, segments, width, height, 60)) {
    labelEls[l.i] = svg('text', { class: 'node-label', x: l.x.toFixed(1), y: l.y.toFixed(1), 'text-anchor': l.anchor }, l.text);
    labelLayer.append(labelEls[l.i]);
  }
  const tip = svg('g', { class: 'tip', 'aria-hidden': 'true', visibility: 'hidden' });
  const tipRect = svg('rect', { rx: 5, ry: 5 });
  const tipText = svg('text', {});
  tip.append(tipRect, tipText);

  const nodeEls = nodes.map((d, i) => {
    const p = pos[i];
    const label = String(d.label ?? d.id);
    const g = svg('g', {
      class: 'node',
      tabindex: 0,
      role: 'link',
      'aria-label': `${truncate(label, 120)} (${d.type || 'memory'}, topic ${d.topic || 'none'}, importance ${Number(d.importance ?? 0).toFixed(2)})`,
      'data-id': d.id,
    });
    g.append(svg('circle', { cx: p.x.toFixed(1), cy: p.y.toFixed(1), r: p.r.toFixed(1), fill: typeColor(d.type) }));
    const show = () => {
      root.classList.add('dimmed');
      g.classList.add('hl');
      if (labelEls[i]) labelEls[i].classList.add('hl');
      for (const j of neighbours[i]) {
        nodeElsRef[j].classList.add('hl');
        if (labelEls[j]) labelEls[j].classList.add('hl');
      }
      for (const e of edgeEls) if (e.s === i || e.t === i) e.line.classList.add('hl');
      tipText.textContent = truncate(label, 70);
      tip.setAttribute('visibility', 'visible');
      let tw = 200;
      try {
        tw = tipText.getComputedTextLength();
      } catch {
        // not laid out yet
      }
      const boxW = tw + 16;
      let tx = p.x - boxW / 2;
      tx = Math.max(4, Math.min(width - boxW - 4, tx));
      let ty = p.y - p.r - 34;
      if (ty < 4) ty = p.y + p.r + 8;
      tipRect.setAttribute('x', tx.toFixed(1));
      tipRect.setAttribute('y', ty.toFixed(1));
      tipRect.setAttribute('width', boxW.toFixed(1));
      tipRect.setAttribute('height', '24');
      tipText.setAttribute('x', (tx + 8).toFixed(1));
      tipText.setAttribute('y', (ty + 16).toFixed(1));
    };
    const hide = () => {
      root.classList.remove('dimmed');
      for (const el of root.querySelectorAll('.hl')) el.classList.remove('hl');
      tip.setAttribute('visibility', 'hidden');
    };
    g.addEventListener('mouseenter', show);
    g.addEventListener('focus', show);
    g.addEventListener('mouseleave', hide);
    g.addEventListener('blur', hide);
    g.addEventListener('click', () => onOpen && onOpen(d.id));
    g.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        if (onOpen) onOpen(d.id);
      }
    });
    nodeLayer.append(g);
    return g;
  });
  const nodeElsRef = nodeEls;
  root.append(edgeLayer, nodeLayer, labelLayer, tip);

  const presentTypes = [...new Set(nodes.map((d) => d.type || 'other'))].sort();
  const presentRelations = [...new Set(edges.map((e) => e.relation))].sort();
  const key = legend([
    ...presentTypes.map((t) => ({ label: t, color: typeColor(t) })),
    ...presentRelations.map((r) => ({ label: `link: ${r.replace(/_/g, ' ')}`, color: RELATION_COLORS[r] || '#94a3b8', dashed: true })),
  ]);
  return { element: root, legend: key };
}
