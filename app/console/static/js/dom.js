// Small DOM helpers: build elements without innerHTML (every value is text, never markup).

/** h('a', {href: '#/x'}, 'text', child, ...) -> element. `on*` props become listeners. */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2).toLowerCase(), value);
    else if (key === 'class') el.className = value;
    else if (key in el && typeof value !== 'string') el[key] = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace everything inside `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function status(value) {
  return h('span', { class: `status status-${value}` }, value ?? '—');
}

export function json(value) {
  // tabindex: a long value scrolls inside its box, and a keyboard user can scroll it too.
  return h('pre', { tabindex: 0 }, value === null || value === undefined ? '—' : JSON.stringify(value, null, 2));
}

export function when(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  return h('time', { datetime: iso, title: iso }, date.toLocaleString());
}

export function duration(startIso, endIso) {
  if (!startIso) return '—';
  const ms = (endIso ? new Date(endIso) : new Date()) - new Date(startIso);
  if (ms < 1000) return `${Math.max(ms, 0)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

export const runLink = (run, text) => h('a', { href: `#/runs/${run.id}` }, text ?? `${run.agent?.name ?? 'run'} run`);
export const agentLink = (agent) => h('a', { href: `#/agents/${agent.id}` }, agent.name);

/** A definition list from [term, value] pairs. */
export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.map(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]));
}

/**
 * Where a failed mutation says why: the GraphQL message and code, next to its control.
 * Returns {el, show(error), clear()}; role=alert so screen readers hear it.
 */
export function errorSlot() {
  // tabindex -1: act() moves the focus here, so a keyboard user is where the problem is said.
  const el = h('p', { class: 'error', role: 'alert', hidden: true, tabindex: -1 });
  return {
    el,
    show(error) {
      fill(el, error.message, ' ', h('code', {}, `(${error.code ?? 'ERROR'}${error.field ? `, field ${error.field}` : ''})`));
      el.hidden = false;
    },
    clear() { el.hidden = true; el.replaceChildren(); },
  };
}

/** Run `action` for a control: disables it meanwhile, shows a failure in `slot` and moves
 * the focus to it. */
export async function act(button, slot, action) {
  slot.clear();
  button.disabled = true;
  try {
    return await action();
  } catch (error) {
    slot.show(error);
    button.disabled = false; // focusable again before the focus moves on
    slot.el.focus();
    return undefined;
  } finally {
    button.disabled = false;
  }
}

/**
 * After a mutation succeeded: draw the page again (`redraw` returns a promise), then say what
 * happened in the page's result line, under its heading, and move the focus there. The control
 * that was used is usually gone with the redraw; a keyboard user goes on from the result, not
 * from the top of the document. `redraw` reads first and draws the whole page as its last
 * step: the result line and the focus then come in the same task, before the user can act on
 * the new page (a page shown early would move under a click when the focus arrives).
 */
export async function settled(redraw, text) {
  await redraw?.();
  const main = document.getElementById('main');
  let line = document.getElementById('result');
  if (!line || !main.contains(line)) {
    line = h('p', { id: 'result', class: 'notice', role: 'status', tabindex: -1 });
    const heading = main.querySelector('h1');
    if (heading) heading.after(line);
    else main.prepend(line);
  }
  fill(line, text);
  line.focus();
}

/** A table from column titles and rows of cells; wide tables scroll in their own box. */
export function table(columns, rows, props = {}) {
  return h('div', { class: 'scroll' }, h('table', props,
    h('thead', {}, h('tr', {}, columns.map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows)));
}

/** The JSON in a text box, or an error (code INVALID_JSON) naming the box. Empty: `empty`. */
export function parseJson(text, what, empty = null) {
  if (!text.trim()) return empty;
  try {
    return JSON.parse(text);
  } catch (error) {
    throw Object.assign(new Error(`${what} is not JSON: ${error.message}`), { code: 'INVALID_JSON', field: what });
  }
}

/** A labelled control: label text, then the control (id ties them for screen readers). */
export function field(label, control, props = {}) {
  return h('label', { for: control.id, ...props }, label, control);
}
