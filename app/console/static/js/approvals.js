// Approvals inbox: every pending approval of the workspace, each with the tool, the exact
// arguments and the run path (root → … → run).
//
// Where the API decides approvals in every way (docs/console.md, "Approvals"): live on the
// workspace-wide `approvalEvents` subscription (an event says that something changed; the
// inbox re-reads, as the run page does), and besides approve and reject with a reason, edit
// the arguments (the tool runs with them, decided again by policy), respond instead of running
// the tool, and approve the tool for the rest of the run. The arguments editor shows the
// tool's input schema (Query.tools: built-ins, plugins and MCP tools alike) and checks the
// edit against it before sending; the server checks it again. An API without them (the older
// `approve: Boolean` form only) is polled every 2 s and offers approve and reject.

import { gql, session, subscribe } from './api.js';
import { act, errorSlot, field, fill, h, json, parseJson, runLink, settled, when } from './dom.js';
import { schemaProblems } from './schema_check.js';

const POLL_MS = 2000;
const RECONNECT_MS = 1000;

const FIELDS = `id tool arguments requestedAt
  step { seq decision decisionReason }
  run { id agent { name } path { id depth agent { name } } }`;
const PENDING = `query Pending { approvals(status: PENDING, first: 100) { edges { node { ${FIELDS} } } } }`;
const PENDING_LIVE = `query PendingLive { approvals(status: PENDING, first: 100) { edges { node { ${FIELDS} expiresAt } } } }`;
const EVENTS = 'subscription Inbox { approvalEvents { type approval { id } } }';
const TOOLS = 'query Schemas { tools { name inputSchema } }';

const DECIDE = `
mutation Decide($id: ID!, $approve: Boolean!, $reason: String) {
  decideApproval(id: $id, approve: $approve, reason: $reason) { id status }
}`;
const DECIDE_AS = `
mutation DecideAs($id: ID!, $decision: ApprovalDecision!, $reason: String, $arguments: JSON, $response: JSON, $scope: ApprovalScope) {
  decideApproval(id: $id, decision: $decision, reason: $reason, arguments: $arguments, response: $response, scope: $scope) { id status }
}`;

/** The pending approvals, and whether the API has DESIGN §14's approvals (null: not known yet). */
async function readPending(modern) {
  if (modern !== false) {
    try {
      return { approvals: (await gql(PENDING_LIVE)).approvals, modern: true };
    } catch (error) {
      // An API before §14 has no Approval.expiresAt: graphql-core refuses the field.
      if (modern === true || !/Cannot query field/.test(error.message)) throw error;
    }
  }
  return { approvals: (await gql(PENDING)).approvals, modern: false };
}

export async function approvalsPage(main) {
  const list = h('div', { id: 'inbox' });
  const live = h('p', { class: 'muted', role: 'status', id: 'inbox-state' });
  fill(main, h('h1', {}, 'Approvals inbox'), live, list);
  // Cards being typed into are kept across re-reads: an event must not wipe a half-written reason.
  const cards = new Map();
  let closed = false;
  let modern = null;
  let schemas = new Map(); // tool name -> input schema, for the arguments editor
  let timer = null;
  let stop = null;

  async function refresh() {
    const found = await readPending(modern);
    if (closed) return;
    modern = found.modern;
    const pending = found.approvals.edges.map((e) => e.node);
    const ids = new Set(pending.map((a) => a.id));
    for (const [id, card] of cards) if (!ids.has(id)) { card.remove(); cards.delete(id); }
    for (const approval of pending) {
      if (!cards.has(approval.id)) {
        const card = approvalCard(approval, { modern, schema: schemas.get(approval.tool), changed: refresh });
        cards.set(approval.id, card);
        list.append(card);
      }
    }
    const how = modern ? 'live' : `checked ${new Date().toLocaleTimeString()}`;
    fill(live, pending.length ? `${pending.length} pending; ${how}.` : `Nothing waits for a decision; ${how}.`);
  }

  const showError = (error) => fill(live, h('span', { class: 'error' }, `${error.message} (${error.code})`));

  function listen() {
    stop = subscribe(EVENTS, {}, {
      next: () => refresh().catch(showError),
      error: showError,
      closed() {
        if (closed) return;
        fill(live, 'Connection lost; reconnecting…');
        // What happened meanwhile is read again once the socket is back.
        setTimeout(() => { if (!closed) { listen(); refresh().catch(showError); } }, RECONNECT_MS);
      },
    });
  }

  schemas = await loadSchemas(); // before the first cards are drawn
  await refresh();
  if (modern) {
    listen();
  } else {
    timer = setInterval(() => refresh().catch(showError), POLL_MS);
  }
  return () => { closed = true; clearInterval(timer); stop?.(); };
}

async function loadSchemas() {
  try {
    const { tools } = await gql(TOOLS);
    return new Map(tools.map((t) => [t.name, t.inputSchema]));
  } catch {
    return new Map(); // the editor works without a schema; the server checks the arguments
  }
}

function approvalCard(approval, { modern, schema, changed }) {
  const slot = errorSlot();
  const reasonId = `reason-${approval.id}`;
  const decide = (variables, said) => async (event) => {
    const reason = document.getElementById(reasonId).value || null;
    const send = modern
      ? () => gql(DECIDE_AS, { id: approval.id, reason, ...variables() })
      : () => gql(DECIDE, { id: approval.id, approve: variables().decision === 'APPROVE', reason });
    // The card is gone once decided: the focus goes to the page's result line.
    if (await act(event.currentTarget, slot, send)) await settled(changed, `${said}: ${approval.tool} of ${approval.run.agent.name}.`);
  };
  const path = approval.run.path;
  return h('article', { class: 'card', 'data-approval': approval.id, 'aria-labelledby': `h-${approval.id}` },
    h('h2', { id: `h-${approval.id}` }, h('code', {}, approval.tool), ` by ${approval.run.agent.name}`),
    h('nav', { 'aria-label': 'Run path' }, h('ol', { class: 'path' }, path.map((run, i) =>
      h('li', {}, runLink(run, `${i === 0 ? 'root: ' : ''}${run.agent.name}`))))),
    h('p', { class: 'muted' }, 'Requested ', when(approval.requestedAt), ` · step ${approval.step.seq}`,
      approval.step.decisionReason ? ` · ${approval.step.decisionReason}` : '',
      approval.expiresAt ? [' · expires ', when(approval.expiresAt), ' (then rejected)'] : null),
    h('h3', {}, 'Arguments'), Object.assign(json(approval.arguments), { id: `args-${approval.id}` }),
    session.canOperate ? [
      h('form', { class: 'inline', onsubmit: (e) => e.preventDefault() },
        h('label', { for: reasonId }, 'Reason', h('input', { id: reasonId })),
        h('button', { type: 'button', class: 'primary', onclick: decide(() => ({ decision: 'APPROVE' }), 'Approved') }, 'Approve'),
        h('button', { type: 'button', class: 'danger', onclick: decide(() => ({ decision: 'REJECT' }), 'Rejected') }, 'Reject'),
        modern ? h('button', { type: 'button', onclick: decide(() => ({ decision: 'APPROVE', scope: 'RUN' }), 'Approved for this run') },
          'Approve for this run') : null),
      modern ? editAndRespond(approval, schema, decide) : null,
    ] : h('p', { class: 'muted' }, 'Viewers see approvals; an operator decides them.'),
    slot.el);
}

function editAndRespond(approval, schema, decide) {
  const args = h('textarea', { id: `edit-${approval.id}`, rows: 6, spellcheck: false },
    JSON.stringify(approval.arguments ?? {}, null, 2));
  const response = h('textarea', { id: `respond-${approval.id}`, rows: 3, spellcheck: false });
  return [
    h('details', { class: 'panel' }, h('summary', {}, 'Edit the arguments'),
      field('Arguments to run with (JSON)', args, { class: 'wide' }),
      schema ? h('details', {}, h('summary', {}, 'The tool\'s input schema'), json(schema))
        : h('p', { class: 'muted' }, 'The server checks the arguments against the tool\'s schema and decides them again by policy.'),
      h('button', { type: 'button', class: 'primary', onclick: decide(() => ({
        decision: 'EDIT', arguments: checkedArguments(args.value, schema) }), 'Approved with edited arguments') },
        'Approve with these arguments')),
    h('details', { class: 'panel' }, h('summary', {}, 'Respond instead'),
      field('Response the model receives (JSON or text); the tool does not run', response, { class: 'wide' }),
      h('button', { type: 'button', onclick: decide(() => ({ decision: 'RESPOND', response: asJsonOrText(response.value) }), 'Responded') },
        'Send response')),
  ];
}

/** The edited arguments, refused here (code INVALID_ARGUMENTS, each problem with its path)
 * when they do not fit the tool's schema: nothing is sent. */
function checkedArguments(text, schema) {
  const args = parseJson(text, 'arguments', {});
  const problems = schema ? schemaProblems(schema, args) : [];
  if (problems.length) {
    throw Object.assign(new Error(`The arguments do not fit the tool's schema: ${problems.join('; ')}`),
      { code: 'INVALID_ARGUMENTS', field: 'arguments' });
  }
  return args;
}

function asJsonOrText(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
