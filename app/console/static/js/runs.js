// Runs: newest first, filtered by status, agent and roots only, paged by cursor.

import { gql } from './api.js';
import { agentLink, duration, fill, h, runLink, status, when } from './dom.js';

const STATUSES = ['QUEUED', 'RUNNING', 'WAITING_APPROVAL', 'WAITING_CHILD', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
const PAGE_SIZE = 20;

const RUNS = `
query Runs($first: Int, $after: String, $status: [RunStatus!], $agentId: ID, $rootsOnly: Boolean) {
  runs(first: $first, after: $after, status: $status, agentId: $agentId, rootsOnly: $rootsOnly) {
    edges { node { id status trigger depth createdAt startedAt finishedAt agent { id name } } }
    pageInfo { hasNextPage endCursor }
  }
}`;

const AGENTS = 'query { agents(first: 100) { edges { node { id name } } } }';

export async function runsPage(main) {
  const { agents } = await gql(AGENTS);
  const statusSelect = h('select', { id: 'f-status', name: 'status' },
    h('option', { value: '' }, 'any'), STATUSES.map((s) => h('option', { value: s }, s)));
  const agentSelect = h('select', { id: 'f-agent', name: 'agent' },
    h('option', { value: '' }, 'any'), agents.edges.map(({ node }) => h('option', { value: node.id }, node.name)));
  const rootsOnly = h('input', { id: 'f-roots', type: 'checkbox', name: 'rootsOnly' });
  const results = h('div', { 'aria-live': 'polite' });
  const cursors = [null]; // the cursor of every page seen so far: "Previous" walks back

  async function load() {
    const data = await gql(RUNS, {
      first: PAGE_SIZE,
      after: cursors[cursors.length - 1],
      status: statusSelect.value ? [statusSelect.value] : null,
      agentId: agentSelect.value || null,
      rootsOnly: rootsOnly.checked || null,
    });
    render(data.runs);
  }

  function render(runs) {
    const prev = h('button', { type: 'button', disabled: cursors.length === 1,
      onclick: () => { cursors.pop(); load(); } }, 'Previous page');
    const next = h('button', { type: 'button', disabled: !runs.pageInfo.hasNextPage,
      onclick: () => { cursors.push(runs.pageInfo.endCursor); load(); } }, 'Next page');
    fill(results,
      runs.edges.length === 0 ? h('p', {}, 'No runs match.') : h('div', { class: 'scroll' }, h('table', {},
        h('caption', { class: 'muted' }, `Page ${cursors.length}`),
        h('thead', {}, h('tr', {}, ['Run', 'Status', 'Agent', 'Trigger', 'Started', 'Duration']
          .map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, runs.edges.map(({ node: run }) => h('tr', {},
          h('td', {}, runLink(run, run.depth ? `child run (depth ${run.depth})` : 'root run')),
          h('td', {}, status(run.status)),
          h('td', {}, agentLink(run.agent)),
          h('td', {}, run.trigger),
          h('td', {}, when(run.startedAt ?? run.createdAt)),
          h('td', {}, duration(run.startedAt, run.finishedAt))))))),
      h('p', {}, prev, ' ', next));
  }

  const form = h('form', { class: 'filters', 'aria-label': 'Filter runs',
    onsubmit: (event) => { event.preventDefault(); cursors.splice(1); load(); } },
  h('label', { for: 'f-status' }, 'Status', statusSelect),
  h('label', { for: 'f-agent' }, 'Agent', agentSelect),
  h('label', { class: 'check', for: 'f-roots' }, rootsOnly, 'Roots only'),
  h('button', { type: 'submit' }, 'Apply'));
  fill(main, h('h1', {}, 'Runs'), form, results);
  await load();
}
