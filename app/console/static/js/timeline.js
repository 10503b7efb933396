// The run page's account of where the time and the budget went: the steps on a time axis
// with the waits (queue, approval, child) drawn as their own bars, each model turn beside the
// calls it asked for (RunStep.modelAskedAt/modelAnsweredAt and the turn's tokens, on the
// turn's first step; the worker's clock, as the steps' times are), usage of the run and of
// its subtree, each budget limit with who imposed it, and the model's output as it streams.

import { subscribe } from './api.js';
import { duration, fill, h, table } from './dom.js';

export const TIMELINE_FIELDS = `
  usage { ...U } treeUsage { ...U }
  budget { name limit used remaining imposedBy }
  steps { startedAt finishedAt modelAskedAt modelAnsweredAt usage { inputTokens outputTokens }
    approval { requestedAt decidedAt } childRun { createdAt finishedAt } }`;
export const USAGE_FRAGMENT = `fragment U on Usage {
  inputTokens outputTokens cacheReadTokens cacheWriteTokens costUsd toolCalls children turns runs wallS }`;

const ms = (iso) => (iso ? new Date(iso).getTime() : null);

/** The spans to draw, in time order: [kind, label, startMs, endMs or null (still going)]. */
export function spans(run) {
  const out = [];
  const started = ms(run.startedAt);
  out.push(['queue', 'waiting in the queue', ms(run.createdAt), started]);
  for (const step of run.steps) {
    const what = step.tool ?? 'final answer';
    if (step.modelAskedAt) {
      const tokens = step.usage ? `, ${step.usage.inputTokens} in / ${step.usage.outputTokens} out tokens` : '';
      out.push(['model', `turn ${step.turn + 1}: the model${tokens}`, ms(step.modelAskedAt), ms(step.modelAnsweredAt)]);
    }
    if (step.childRun) {
      out.push(['child', `step ${step.seq}: waiting for the child run (${what})`, ms(step.childRun.createdAt), ms(step.childRun.finishedAt)]);
    } else if (step.approval) {
      out.push(['approval', `step ${step.seq}: waiting for approval of ${what}`, ms(step.approval.requestedAt), ms(step.approval.decidedAt)]);
    }
    if (step.startedAt && !step.childRun) {
      out.push(['step', `step ${step.seq}: ${what}`, ms(step.startedAt), ms(step.finishedAt)]);
    }
  }
  return out.filter(([, , start]) => start !== null);
}

export function timelineSection(run) {
  const items = spans(run);
  const now = Date.now();
  const t0 = ms(run.createdAt);
  const t1 = Math.max(ms(run.finishedAt) ?? now, ...items.map(([, , s, e]) => e ?? s));
  const total = Math.max(t1 - t0, 1);
  return h('section', { 'aria-labelledby': 'timeline-h' },
    h('h2', { id: 'timeline-h' }, 'Timeline'),
    h('p', { class: 'muted' }, `From creation to ${run.finishedAt ? 'the end' : 'now'}: `,
      duration(run.createdAt, run.finishedAt), '. Waits are drawn hatched.'),
    h('ol', { class: 'timeline', id: 'timeline' }, items.map(([kind, label, start, end]) => {
      const bar = h('span', { class: `bar bar-${kind}`, 'aria-hidden': 'true' });
      // CSSOM, not a style attribute: the console's CSP allows no inline styles.
      bar.style.left = `${((start - t0) / total) * 100}%`;
      bar.style.width = `${Math.max((((end ?? now) - start) / total) * 100, 0.5)}%`;
      const took = duration(new Date(start).toISOString(), end ? new Date(end).toISOString() : null);
      return h('li', { 'data-kind': kind }, h('span', { class: 'label' }, `${label} — ${took}${end ? '' : ' so far'}`),
        h('span', { class: 'track' }, bar));
    })));
}

const USAGE_ROWS = [
  ['Input tokens', 'inputTokens'], ['Output tokens', 'outputTokens'], ['Cache read tokens', 'cacheReadTokens'],
  ['Cache write tokens', 'cacheWriteTokens'], ['Cost (USD)', 'costUsd'], ['Turns', 'turns'],
  ['Tool calls', 'toolCalls'], ['Children', 'children'], ['Runs', 'runs'], ['Wall time (s)', 'wallS'],
];

const number = (value) => (Number.isInteger(value) ? String(value) : value.toFixed(4).replace(/\.?0+$/, ''));

export function usageSection(run) {
  return h('section', { 'aria-labelledby': 'usage-h' },
    h('h2', { id: 'usage-h' }, 'Usage and budget'),
    table(['', 'This run', 'Its subtree'], USAGE_ROWS.map(([label, key]) => h('tr', { 'data-usage': key },
      h('th', { scope: 'row' }, label), h('td', {}, number(run.usage[key])), h('td', {}, number(run.treeUsage[key])))),
    { id: 'usage' }),
    run.budget.length ? table(['Limit', 'Allowed', 'Used', 'Remaining', 'Imposed by'], run.budget.map((b) =>
      h('tr', { 'data-limit': b.name }, h('th', { scope: 'row' }, b.name), h('td', {}, number(b.limit)),
        h('td', {}, number(b.used)), h('td', { class: b.remaining <= 0 ? 'error' : null }, number(b.remaining)),
        h('td', {}, b.imposedBy))), { id: 'budget' }) : h('p', {}, 'No budget limits apply.'));
}

const OUTPUT = 'subscription Output($id: ID!) { runOutput(runId: $id) { stepSeq text done } }';

/**
 * The model's words as they come (runOutput; not stored — the step keeps the whole text).
 * Returns {el, stop}; the element survives the page's redraws (the caller re-inserts it).
 */
export function outputStream(runId) {
  const text = h('pre', { id: 'output', tabindex: 0, 'aria-live': 'polite' });
  const state = h('p', { class: 'muted', id: 'output-state' }, 'Listening for model output…');
  const el = h('section', { 'aria-labelledby': 'output-h' }, h('h2', { id: 'output-h' }, 'Model output (live)'), state, text);
  const stop = subscribe(OUTPUT, { id: runId }, {
    next({ runOutput: chunk }) {
      if (chunk.done) fill(state, `Turn of step ${chunk.stepSeq} done.`);
      else {
        fill(state, `Streaming step ${chunk.stepSeq}…`);
        text.append(chunk.text);
      }
    },
    complete() { fill(state, 'The run has ended; no more output.'); },
    error(error) { fill(state, h('span', { class: 'error' }, `${error.message} (${error.code})`)); },
  });
  return { el, stop };
}
