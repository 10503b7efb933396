// Agents: the list (and, for admins, a form to create one), and one agent's page —
// configuration, budget, MCP tools, schedules (schedules.js), recent runs, a form to start a
// run, its memory (memory.js) and, for admins, its administration (agent_admin.js).

import { gql, session } from './api.js';
import { act, agentLink, duration, errorSlot, facts, fill, h, json, runLink, status, table, when } from './dom.js';
import { agentAdmin, CONFIG, createAgentForm } from './agent_admin.js';
import { agentConnectors } from './connectors.js';
import { memorySection } from './memory.js';
import { SCHEDULE_FIELDS, schedulesSection } from './schedules.js';

const AGENTS = `
query Agents($after: String) {
  agents(first: 50, after: $after) {
    edges { node { id name description status } }
    pageInfo { hasNextPage endCursor }
  }
}`;

const AGENT = `
query Agent($id: ID!) {
  agent(id: $id) {
    id name status createdAt updatedAt version ${CONFIG}
    schedules { ${SCHEDULE_FIELDS} }
    runs(first: 10) { edges { node { id status trigger depth createdAt startedAt finishedAt } } }
  }
}`;

// Operators and admins only (the audit trail): asked for separately, so a viewer's page loads.
const AUDIT = `
query AgentAudit($id: ID!) {
  auditEvents(first: 10, objectId: $id) { edges { node { seq at action summary actor { kind name } } } }
}`;

const START = 'mutation Start($agentId: ID!, $input: JSON) { startRun(agentId: $agentId, input: $input) { id } }';

export async function agentsPage(main) {
  const { agents } = await gql(AGENTS);
  fill(main, h('h1', {}, 'Agents'), table(['Agent', 'Status', 'Description'], agents.edges.map(({ node }) => h('tr', {},
    h('td', {}, agentLink(node)), h('td', {}, status(node.status)), h('td', {}, node.description ?? '')))),
  session.isAdmin ? createAgentForm() : null);
}

export async function agentPage(main, agentId) {
  const { agent } = await gql(AGENT, { id: agentId });
  if (!agent) {
    fill(main, h('h1', {}, 'Agent not found'), h('p', {}, 'No such agent in your workspace.'));
    return;
  }
  const memory = h('section', { 'aria-labelledby': 'memory-h', id: 'memory' });
  const changed = () => agentPage(main, agentId);
  // Everything is read before the page is drawn, then drawn at once, so after a change the
  // redraw, its result line and the focus (settled) land in the same task. Drawn first and
  // completed later (memory, then the changes), the page looked ready while its result line
  // was still to come: an operator who went on (opened the version history, say) had the
  // line's focus scroll the page to the top between pressing and releasing, and the click
  // was lost. Read side by side, the page is also drawn sooner than one read after another.
  const [connectors, , changes] = await Promise.all([
    agentConnectors(agent),
    memorySection(memory, agent),
    session.canOperate ? changesSection(agent) : null,
  ]);
  fill(main,
    h('h1', {}, `Agent ${agent.name} `, status(agent.status)),
    agent.description ? h('p', {}, agent.description) : null,
    session.canOperate ? startForm(agent) : null,
    h('h2', {}, 'Configuration'),
    facts([
      ['Instructions', agent.instructions ?? '—'],
      ['Model', json(agent.model)],
      ['Tools', agent.tools.length ? agent.tools.map((t) => h('code', {}, t, ' ')) : 'none'],
      ['Policy', policyView(agent.policy)],
      ['Budget', Object.keys(agent.budget ?? {}).length ? json(agent.budget) : 'the deployment\'s defaults'],
      ['Memory budget', `${agent.memoryBudget.maxItems} items, ${agent.memoryBudget.maxChars} characters per run`],
      ['Version', `${agent.version} (new runs are pinned to it)`],
      ['Created', when(agent.createdAt)],
      ['Updated', when(agent.updatedAt)],
    ]),
    session.isAdmin ? agentAdmin(agent, changed) : null,
    connectors,
    schedulesSection(agent, changed),
    h('h2', {}, 'Recent runs'),
    agent.runs.edges.length ? table(['Run', 'Status', 'Trigger', 'Started', 'Duration'], agent.runs.edges.map(({ node: run }) => h('tr', {},
      h('td', {}, runLink(run, run.depth ? `child run (depth ${run.depth})` : 'root run')),
      h('td', {}, status(run.status)), h('td', {}, run.trigger),
      h('td', {}, when(run.startedAt ?? run.createdAt)), h('td', {}, duration(run.startedAt, run.finishedAt)))))
      : h('p', {}, 'No runs yet.'),
    memory,
    changes);
}

async function changesSection(agent) {
  const { auditEvents } = await gql(AUDIT, { id: agent.id });
  return h('section', { 'aria-labelledby': 'changes-h', id: 'changes' },
    h('h2', { id: 'changes-h' }, 'Recent changes'),
    auditEvents.edges.length ? h('ul', {}, auditEvents.edges.map(({ node: e }) => h('li', {},
      when(e.at), ' ', h('code', {}, e.action), ` by ${e.actor ? `${e.actor.kind}${e.actor.name ? ` ${e.actor.name}` : ''}` : 'unknown'}: ${e.summary}`)))
      : h('p', {}, 'No changes recorded.'));
}

function policyView(policy) {
  return h('div', {},
    h('p', {}, `Default: ${policy.default ?? 'by risk class'}`),
    policy.rules.length ? h('ul', {}, policy.rules.map((r) => h('li', {}, h('code', {}, r.tool), ` → ${r.decision}`)))
      : h('p', {}, 'No rules.'));
}

function startForm(agent) {
  const slot = errorSlot();
  const input = h('textarea', { id: 'run-input', rows: 3, spellcheck: false }, '{}');
  return h('form', { class: 'inline', 'aria-label': 'Start a run', onsubmit: async (event) => {
    event.preventDefault();
    const button = event.currentTarget.querySelector('button');
    const started = await act(button, slot, async () => {
      let parsed;
      try {
        parsed = input.value.trim() ? JSON.parse(input.value) : null;
      } catch (error) {
        throw Object.assign(new Error(`the input is not JSON: ${error.message}`), { code: 'INVALID_JSON' });
      }
      return gql(START, { agentId: agent.id, input: parsed });
    });
    if (started) location.hash = `#/runs/${started.startRun.id}`;
  } },
  h('label', { for: 'run-input' }, 'Run input (JSON)', input),
  h('button', { type: 'submit', class: 'primary' }, 'Start run'),
  slot.el);
}
