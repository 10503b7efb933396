// Run detail: the whole tree (root → children → grandchildren) kept live over `runTree`,
// and the chosen run's timeline, usage and budget, live model output (timeline.js), steps,
// injected memories, policy chain and links both ways.
//
// Events say *that* something changed; the page then re-reads the tree and the run over
// HTTP (debounced), so what is drawn is always the server's current state, never a
// client-side reconstruction that could drift. A dropped socket resubscribes from the last
// seq seen (afterSeq), so nothing is missed; `complete` means the tree has ended.

import { gql, session, subscribe } from './api.js';
import { act, agentLink, duration, errorSlot, facts, fill, h, json, runLink, status, when } from './dom.js';
import { outputStream, TIMELINE_FIELDS, timelineSection, USAGE_FRAGMENT, usageSection } from './timeline.js';

const RUN_FIELDS = 'id status depth agent { id name } parent { id }';
const TREE = `query Tree($id: ID!) { run(id: $id) { id root { ${RUN_FIELDS} descendants { ${RUN_FIELDS} } } } }`;

const RUN = `
query Run($id: ID!) {
  run(id: $id) {
    id status trigger depth input result error errorCode cancelReason heldReason policyChain turns
    createdAt startedAt finishedAt
    agent { id name }
    agentVersion { version }
    path { id agent { id name } }
    children { id status agent { name } }
    delegation { task }
    steps {
      id seq turn tool arguments status decision decisionReason result error errorCode
      usage { inputTokens outputTokens costUsd }
      childRun { id agent { name } }
      approval { id status reason }
    }
    injectedMemories { id key value tags }
    ${TIMELINE_FIELDS}
  }
}
${USAGE_FRAGMENT}`;

const EVENTS = `
subscription Tree($id: ID!, $after: Int) {
  runTree(rootRunId: $id, afterSeq: $after) { seq type runId }
}`;

const CANCEL = 'mutation Cancel($id: ID!, $reason: String) { cancelRun(id: $id, reason: $reason) { id status } }';
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
const REFRESH_MS = 150;
const RECONNECT_MS = 1000;

export async function runPage(main, runId) {
  const live = h('p', { id: 'live', class: 'muted', role: 'status' }, 'Connecting to the live tree…');
  const treeBox = h('section', { 'aria-labelledby': 'tree-h' });
  const detail = h('section', { 'aria-labelledby': 'run-h' });
  fill(main, h('div', { class: 'split' }, h('div', {}, treeBox, live), detail));

  let lastSeq = null;
  let timer = null;
  let stop = null;
  let closed = false;
  let output = null; // the live model output, while the run can still produce some

  let drawn = null; // what is on screen: redraw only on change, so focus and typing survive
  async function refresh() {
    const [tree, run] = await Promise.all([gql(TREE, { id: runId }), gql(RUN, { id: runId })]);
    if (closed) return;
    if (!run.run) {
      fill(detail, h('h1', { id: 'run-h' }, 'Run not found'), h('p', {}, 'No such run in your workspace.'));
      treeBox.replaceChildren();
      return;
    }
    const snapshot = JSON.stringify([tree, run]);
    if (snapshot === drawn) return;
    drawn = snapshot;
    const reason = detail.querySelector('#cancel-reason')?.value;
    renderTree(treeBox, tree.run.root, runId);
    renderRun(detail, run.run, () => schedule());
    if (!output && !TERMINAL.has(run.run.status)) output = outputStream(runId);
    if (output) detail.querySelector('#output-slot').replaceWith(output.el);
    const reasonInput = detail.querySelector('#cancel-reason');
    if (reasonInput && reason) reasonInput.value = reason;
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(() => refresh().catch(showError), REFRESH_MS);
  }

  function showError(error) {
    fill(live, h('span', { class: 'error' }, `${error.message} (${error.code ?? 'ERROR'})`));
  }

  function connect() {
    stop = subscribe(EVENTS, { id: runId, after: lastSeq }, {
      next(data) {
        lastSeq = data.runTree.seq;
        fill(live, `Live: event ${lastSeq} (${data.runTree.type})`);
        schedule();
      },
      complete() {
        fill(live, 'The tree has ended: the live stream is complete.');
        schedule();
      },
      error: showError,
      closed() {
        if (closed) return;
        fill(live, 'Connection lost; reconnecting…');
        setTimeout(() => { if (!closed) connect(); }, RECONNECT_MS);
      },
    });
  }

  await refresh();
  connect();
  return () => {
    closed = true;
    clearTimeout(timer);
    stop?.();
    output?.stop();
  };
}

function renderTree(box, root, currentId) {
  const byParent = new Map();
  for (const run of root.descendants) {
    const list = byParent.get(run.parent.id) ?? [];
    list.push(run);
    byParent.set(run.parent.id, list);
  }
  const item = (run) => h('li', { 'data-run': run.id },
    h('a', { href: `#/runs/${run.id}`, 'aria-current': run.id === currentId ? 'true' : null },
      `${run.agent.name}`), ' ', status(run.status),
    run.depth ? h('span', { class: 'muted' }, ` depth ${run.depth}`) : h('span', { class: 'muted' }, ' root'),
    byParent.has(run.id) ? h('ul', {}, byParent.get(run.id).map(item)) : null);
  fill(box, h('h2', { id: 'tree-h' }, `Run tree (${root.descendants.length + 1} runs)`),
    h('ul', { class: 'tree', id: 'tree' }, item(root)));
}

function renderRun(box, run, changed) {
  const cancelSlot = errorSlot();
  const canCancel = session.canOperate && !TERMINAL.has(run.status);
  const cancel = canCancel ? h('button', { type: 'button', class: 'danger', onclick: async (event) => {
    const reason = box.querySelector('#cancel-reason').value || null;
    if (await act(event.currentTarget, cancelSlot, () => gql(CANCEL, { id: run.id, reason }))) changed();
  } }, 'Cancel run and its subtree') : null;
  fill(box,
    h('h1', { id: 'run-h' }, `${run.agent.name} run `, status(run.status)),
    h('nav', { 'aria-label': 'Run path' }, h('ol', { class: 'path', id: 'path' },
      run.path.map((p, i) => h('li', {}, i === run.path.length - 1
        ? h('span', { 'aria-current': 'page' }, `${p.agent.name} (this run)`)
        : runLink(p, `${i === 0 ? 'root: ' : ''}${p.agent.name}`))))),
    h('p', {}, h('a', { href: `#/policies?path=${run.path.map((p) => p.agent.id).join(',')}` },
      'What would be decided along this path')),
    facts([
      ['Agent', agentLink(run.agent)],
      ['Status', status(run.status)],
      ['Agent version', `${run.agentVersion.version} (pinned when the run was created)`],
      ['Held', run.heldReason ?? '—'],
      ['Trigger', run.trigger],
      ['Depth', String(run.depth)],
      ['Parent', run.path.length > 1 ? runLink(run.path[run.path.length - 2], `${run.path[run.path.length - 2].agent.name} (parent)`) : 'none: this is the root'],
      ['Root', run.path.length > 1 ? runLink(run.path[0], `${run.path[0].agent.name} (root)`) : 'this run'],
      ['Children', run.children.length ? h('ul', { id: 'children' }, run.children.map((c) =>
        h('li', {}, runLink(c, `${c.agent.name} (child)`), ' ', status(c.status)))) : 'none'],
      ['Delegated task', run.delegation?.task ?? '—'],
      ['Created', when(run.createdAt)],
      ['Started', when(run.startedAt)],
      ['Finished', when(run.finishedAt)],
      ['Duration', duration(run.startedAt, run.finishedAt)],
      ['Turns', String(run.turns)],
    ]),
    canCancel ? h('form', { class: 'inline', onsubmit: (e) => e.preventDefault() },
      h('label', { for: 'cancel-reason' }, 'Cancel reason', h('input', { id: 'cancel-reason' })), cancel) : null,
    cancelSlot.el,
    run.error ? h('p', { class: 'error' }, `Error: ${run.error}`, run.errorCode ? [' ', h('code', {}, `(${run.errorCode})`)] : null) : null,
    run.cancelReason ? h('p', {}, `Cancel reason: ${run.cancelReason}`) : null,
    timelineSection(run),
    usageSection(run),
    h('div', { id: 'output-slot' }),
    h('h2', {}, 'Steps'),
    run.steps.length ? h('div', { class: 'scroll' }, h('table', { id: 'steps' },
      h('thead', {}, h('tr', {}, ['#', 'Tool', 'Arguments', 'Decision', 'Status', 'Result or error']
        .map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, run.steps.map(stepRow)))) : h('p', {}, 'No steps yet.'),
    h('h2', {}, 'Input and result'),
    facts([['Input', json(run.input)], ['Result', json(run.result)]]),
    h('h2', {}, 'Injected memories'),
    run.injectedMemories.length ? h('ul', {}, run.injectedMemories.map((m) =>
      h('li', {}, h('strong', {}, m.key), `: ${m.value}`, m.tags.length ? h('span', { class: 'muted' }, ` [${m.tags.join(', ')}]`) : null)))
      : h('p', {}, 'None.'),
    h('h2', {}, 'Policy chain'),
    h('p', { class: 'muted' }, 'Root agent first; the strictest decision along the chain wins.'),
    h('ol', { id: 'policy-chain' }, (run.policyChain ?? []).map(policyLink)),
    h('details', {}, h('summary', {}, 'Policy chain as stored (JSON)'), json(run.policyChain)));
}

function policyLink(link) {
  const policy = link.policy ?? {};
  const rules = policy.rules ?? [];
  return h('li', {}, h('strong', {}, link.agentName ?? `agent ${link.agentId}`),
    `: default ${policy.default ?? 'by risk class'}; `,
    rules.length ? ['rules ', rules.map((r, i) => [i ? ', ' : '', h('code', {}, r.tool), ` → ${r.decision}`])] : 'no rules');
}

function stepRow(step) {
  return h('tr', { 'data-step': step.seq },
    h('td', {}, String(step.seq)),
    h('td', {}, step.tool ? h('code', {}, step.tool) : 'final answer',
      step.childRun ? h('div', {}, 'child: ', runLink(step.childRun, step.childRun.agent.name)) : null),
    h('td', {}, json(step.arguments)),
    h('td', {}, step.decision ?? '—', step.decisionReason ? h('div', { class: 'muted' }, step.decisionReason) : null),
    h('td', {}, status(step.status),
      step.approval ? h('div', {}, `approval ${step.approval.status}`, step.approval.reason ? `: ${step.approval.reason}` : '',
        step.approval.status === 'PENDING' ? [' ', h('a', { href: '#/approvals' }, 'decide in the inbox')] : null) : null),
    h('td', {}, step.error ? h('span', { class: 'error' }, step.error, step.errorCode ? ` (${step.errorCode})` : '') : json(step.result),
      step.usage ? h('div', { class: 'muted' }, `turn used ${step.usage.inputTokens} in / ${step.usage.outputTokens} out tokens`,
        step.usage.costUsd ? `, $${step.usage.costUsd}` : '') : null));
}
