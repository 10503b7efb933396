// Approvals inbox: every pending approval of the workspace, each with the tool, the exact
// arguments and the run path (root → … → run); approve or reject with a reason.
//
// Live by polling: the API has no workspace-wide approval stream (runTree is per tree), and a
// short poll of one indexed query is cheap. Decisions re-read at once.

import { gql, session } from './api.js';
import { act, errorSlot, fill, h, json, runLink, when } from './dom.js';

const POLL_MS = 2000;

const PENDING = `
query Pending {
  approvals(status: PENDING, first: 100) {
    edges { node {
      id tool arguments requestedAt
      step { seq decision decisionReason }
      run { id agent { name } path { id depth agent { name } } }
    } }
  }
}`;

const DECIDE = `
mutation Decide($id: ID!, $approve: Boolean!, $reason: String) {
  decideApproval(id: $id, approve: $approve, reason: $reason) { id status }
}`;

export async function approvalsPage(main) {
  const list = h('div', { id: 'inbox' });
  const live = h('p', { class: 'muted', role: 'status' });
  fill(main, h('h1', {}, 'Approvals inbox'), live, list);
  // Cards being typed into are kept across polls: a poll must not wipe a half-written reason.
  const cards = new Map();
  let closed = false;

  async function poll() {
    const { approvals } = await gql(PENDING);
    if (closed) return;
    const pending = approvals.edges.map((e) => e.node);
    const ids = new Set(pending.map((a) => a.id));
    for (const [id, card] of cards) if (!ids.has(id)) { card.remove(); cards.delete(id); }
    for (const approval of pending) {
      if (!cards.has(approval.id)) {
        const card = approvalCard(approval, poll);
        cards.set(approval.id, card);
        list.append(card);
      }
    }
    fill(live, pending.length ? `${pending.length} pending; checked ${new Date().toLocaleTimeString()}.`
      : `Nothing waits for a decision; checked ${new Date().toLocaleTimeString()}.`);
  }

  await poll();
  const timer = setInterval(() => poll().catch((error) => fill(live, h('span', { class: 'error' },
    `${error.message} (${error.code})`))), POLL_MS);
  return () => { closed = true; clearInterval(timer); };
}

function approvalCard(approval, changed) {
  const slot = errorSlot();
  const reasonId = `reason-${approval.id}`;
  const decide = (approve) => async (event) => {
    const reason = document.getElementById(reasonId).value || null;
    if (await act(event.currentTarget, slot, () => gql(DECIDE, { id: approval.id, approve, reason }))) {
      await changed();
    }
  };
  const path = approval.run.path;
  return h('article', { class: 'card', 'data-approval': approval.id, 'aria-labelledby': `h-${approval.id}` },
    h('h2', { id: `h-${approval.id}` }, h('code', {}, approval.tool), ` by ${approval.run.agent.name}`),
    h('nav', { 'aria-label': 'Run path' }, h('ol', { class: 'path' }, path.map((run, i) =>
      h('li', {}, runLink(run, `${i === 0 ? 'root: ' : ''}${run.agent.name}`))))),
    h('p', { class: 'muted' }, 'Requested ', when(approval.requestedAt), ` · step ${approval.step.seq}`,
      approval.step.decisionReason ? ` · ${approval.step.decisionReason}` : ''),
    h('h3', {}, 'Arguments'), json(approval.arguments),
    session.canOperate ? h('form', { class: 'inline', onsubmit: (e) => e.preventDefault() },
      h('label', { for: reasonId }, 'Reason', h('input', { id: reasonId })),
      h('button', { type: 'button', class: 'primary', onclick: decide(true) }, 'Approve'),
      h('button', { type: 'button', class: 'danger', onclick: decide(false) }, 'Reject'))
      : h('p', { class: 'muted' }, 'Viewers see approvals; an operator decides them.'),
    slot.el);
}
