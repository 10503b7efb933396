// An agent's administration (admins only): create, edit with a diff against the current
// version, pause, resume, archive, and the version history. Every change goes through
// createAgent / updateAgent; a refusal is shown beside its control with its code.

import { gql } from './api.js';
import { act, errorSlot, field, fill, h, json, parseJson, settled, table, when } from './dom.js';

const POLICY = 'policy { default rules { tool decision } }';
const CONFIG = `description instructions model tools ${POLICY} memoryBudget { maxItems maxChars } budget`;

const CREATE = `mutation Create($input: CreateAgentInput!) { createAgent(input: $input) { id } }`;
const UPDATE = `mutation Update($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { id version status } }`;
const VERSIONS = `
query Versions($id: ID!) {
  agent(id: $id) { versions(first: 20) { edges { node { version createdAt createdBy { kind name } ${CONFIG.replace('description ', '')} } } } }
}`;

// The fields an edit may change, as the form shows them and as updateAgent takes them.
const EDITABLE = [
  ['description', 'Description', 'text'],
  ['instructions', 'Instructions', 'text'],
  ['model', 'Model (JSON)', 'json'],
  ['tools', 'Tool patterns (JSON list)', 'json'],
  ['policy', 'Policy (JSON)', 'json'],
  ['memoryBudget', 'Memory budget (JSON)', 'json'],
  ['budget', 'Budget (JSON: maxTurns, maxTokens, maxCostUsd, maxWallS, …)', 'json'],
];

const asText = (kind, value) => (kind === 'json' ? JSON.stringify(value ?? null, null, 2) : value ?? '');

function configOf(agent) {
  return Object.fromEntries(EDITABLE.map(([key]) => [key, key === 'policy'
    ? { default: agent.policy.default, rules: agent.policy.rules.map(({ tool, decision }) => ({ tool, decision })) }
    : agent[key]]));
}

function editors(prefix, config) {
  return EDITABLE.map(([key, label, kind]) => {
    const id = `${prefix}-${key}`;
    const control = kind === 'json' || key === 'instructions'
      ? h('textarea', { id, rows: kind === 'json' ? 4 : 3, spellcheck: false }, asText(kind, config[key]))
      : h('input', { id, value: config[key] ?? '' });
    return [key, kind, field(label, control, { class: 'wide' })];
  });
}

function readEditors(fields) {
  return Object.fromEntries(fields.map(([key, kind, label]) => {
    const text = label.querySelector('input, textarea').value;
    return [key, kind === 'json' ? parseJson(text, key) : text || null];
  }));
}

/** The form on the agents list: a name, a model and, optionally, the rest. */
export function createAgentForm() {
  const slot = errorSlot();
  const name = h('input', { id: 'new-agent-name', required: true, autocomplete: 'off' });
  const fields = editors('new-agent', {
    model: { provider: 'scripted', steps: [{ final: 'done' }] }, tools: [], policy: { default: null, rules: [] },
    memoryBudget: { maxItems: 5, maxChars: 2000 }, budget: {},
  });
  return h('form', { 'aria-label': 'Create an agent', class: 'panel', onsubmit: async (event) => {
    event.preventDefault();
    const created = await act(event.submitter, slot, () => {
      const input = { name: name.value.trim(), ...readEditors(fields) };
      return gql(CREATE, { input });
    });
    if (created) location.hash = `#/agents/${created.createAgent.id}`;
  } },
  h('h2', {}, 'Create an agent'),
  h('div', { class: 'grid' }, field('Name', name), fields.map(([, , label]) => label)),
  h('button', { type: 'submit', class: 'primary' }, 'Create agent'),
  slot.el);
}

/** Status buttons, the edit form with its diff, and the version history. */
export function agentAdmin(agent, changed) {
  return h('section', { 'aria-labelledby': 'admin-h', id: 'admin' },
    h('h2', { id: 'admin-h' }, 'Administration'),
    statusControls(agent, changed),
    editForm(agent, changed),
    versionHistory(agent));
}

function statusControls(agent, changed) {
  const slot = errorSlot();
  const button = (status, text, cls) => agent.status === status ? null
    : h('button', { type: 'button', class: cls, onclick: async (event) => {
      if (await act(event.currentTarget, slot, () => gql(UPDATE, { id: agent.id, input: { status } }))) {
        await settled(changed, `Agent ${agent.name} is ${status} now.`);
      }
    } }, text);
  return h('div', { class: 'inline', role: 'group', 'aria-label': 'Agent status' },
    button('ACTIVE', 'Resume agent', 'primary'), button('PAUSED', 'Pause agent'),
    button('ARCHIVED', 'Archive agent', 'danger'), slot.el);
}

function editForm(agent, changed) {
  const slot = errorSlot();
  const current = configOf(agent);
  const fields = editors('edit', current);
  const review = h('div', { id: 'diff', 'aria-live': 'polite' });
  let pending = null; // the changed fields, once reviewed

  function showDiff() {
    const next = readEditors(fields);
    pending = Object.fromEntries(Object.entries(next)
      .filter(([key, value]) => JSON.stringify(value ?? null) !== JSON.stringify(current[key] ?? null)));
    const keys = Object.keys(pending);
    fill(review, keys.length === 0 ? h('p', {}, 'No changes against the current version.') : [
      h('h3', {}, `Changes against version ${agent.version}`),
      table(['Field', `Version ${agent.version}`, 'New'], keys.map((key) => h('tr', { 'data-field': key },
        h('th', { scope: 'row' }, key), h('td', { class: 'before' }, json(current[key])),
        h('td', { class: 'after' }, json(pending[key]))))),
      h('button', { type: 'button', class: 'primary', onclick: save }, `Save as version ${agent.version + 1}`),
    ]);
    review.querySelector('button')?.focus();
  }

  async function save(event) {
    if (await act(event.currentTarget, slot, () => gql(UPDATE, { id: agent.id, input: pending }))) {
      await settled(changed, `Saved as version ${agent.version + 1}.`);
    }
  }

  return h('details', { class: 'panel', id: 'edit-agent' }, h('summary', {}, 'Edit configuration'),
    h('form', { 'aria-label': 'Edit the agent', onsubmit: (event) => {
      event.preventDefault();
      slot.clear();
      try { showDiff(); } catch (error) { slot.show(error); }
    } },
    h('div', { class: 'grid' }, fields.map(([, , label]) => label)),
    h('button', { type: 'submit' }, 'Review changes')),
    review, slot.el);
}

function versionHistory(agent) {
  const box = h('div', { id: 'versions' }, h('p', { class: 'muted' }, 'Loading…'));
  const details = h('details', { class: 'panel' }, h('summary', {}, `Version history (${agent.version})`), box);
  details.addEventListener('toggle', async () => {
    if (!details.open || box.dataset.loaded) return;
    box.dataset.loaded = 'yes';
    try {
      const { agent: found } = await gql(VERSIONS, { id: agent.id });
      fill(box, h('ol', { reversed: true }, found.versions.edges.map(({ node: v }) => h('li', { 'data-version': v.version },
        h('strong', {}, `Version ${v.version}`), ' ', when(v.createdAt),
        v.createdBy ? ` by ${v.createdBy.kind}${v.createdBy.name ? ` ${v.createdBy.name}` : ''}` : '',
        h('details', {}, h('summary', {}, 'Configuration'), json(v))))));
    } catch (error) {
      fill(box, h('p', { class: 'error' }, `${error.message} (${error.code})`));
    }
  });
  return details;
}

export { CONFIG };
