// Policies: every agent's policy, and the "what would be decided" preview — pick a tool and
// a run path (root first, the calling agent last; a run page links here with its own path)
// and the server answers with the effective decision and its reason, computed by the
// engine's own policy code (policyPreview).
// Policies are edited on each agent's page (admins), with a diff against the current version.

import { gql } from './api.js';
import { act, agentLink, errorSlot, field, fill, h, status, table } from './dom.js';
import { loadServers } from './connectors.js';

const AGENTS = `
query PolicyAgents { agents(first: 100) { edges { node { id name status tools policy { default rules { tool decision } } } } } }`;
const PREVIEW = `
query Preview($tool: String!, $agentIds: [ID!]!) {
  policyPreview(tool: $tool, agentIds: $agentIds) { tool risk decision reason links { agentId agentName decision source } }
}`;
// Suggestions only (the server knows the registered tools and judges the name).
const BUILT_INS = ['agents.delegate', 'agents.list', 'http.get', 'memory.forget', 'memory.remember', 'memory.search', 'webhook.post'];

export async function policiesPage(main, path = []) {
  const [{ agents }, servers] = await Promise.all([gql(AGENTS), loadServers()]);
  const list = agents.edges.map((e) => e.node);
  fill(main, h('h1', {}, 'Policies'),
    previewForm(list, [...BUILT_INS, ...servers.flatMap((s) => s.tools.map((t) => t.name))], path),
    h('h2', {}, 'Every agent\'s policy'),
    h('p', { class: 'muted' }, 'Admins change a policy on the agent\'s page (Edit configuration).'),
    table(['Agent', 'Status', 'Default', 'Rules'], list.map((a) => h('tr', {},
      h('td', {}, agentLink(a)), h('td', {}, status(a.status)), h('td', {}, a.policy.default ?? 'by risk class'),
      h('td', {}, a.policy.rules.length ? h('ul', {}, a.policy.rules.map((r) => h('li', {}, h('code', {}, r.tool), ` → ${r.decision}`)))
        : 'none')))));
}

function previewForm(agents, tools, path) {
  const slot = errorSlot();
  const tool = h('input', { id: 'preview-tool', list: 'preview-tools', required: true, autocomplete: 'off' });
  const levels = h('ol', { class: 'levels', id: 'preview-path' });
  const result = h('div', { id: 'preview-result', 'aria-live': 'polite' });
  const addLevel = (chosen) => {
    const n = levels.children.length;
    const select = h('select', { id: `preview-agent-${n}` },
      agents.map((a) => h('option', { value: a.id, selected: a.id === chosen }, a.name)));
    levels.append(h('li', {}, field(n === 0 ? 'Root agent' : `Delegated to (level ${n})`, select)));
    return select;
  };
  // A run page links here with its path (root first): the same agents, ready to preview.
  for (const id of path.length ? path : [null]) addLevel(id);
  return h('section', { 'aria-labelledby': 'preview-h', class: 'panel' },
    h('h2', { id: 'preview-h' }, 'What would be decided'),
    h('p', { class: 'muted' }, 'The strictest decision along the path wins: a child never escapes a parent\'s policy.'),
    h('form', { 'aria-label': 'Preview a decision', onsubmit: async (event) => {
      event.preventDefault();
      const agentIds = [...levels.querySelectorAll('select')].map((s) => s.value);
      const data = await act(event.submitter, slot, () => gql(PREVIEW, { tool: tool.value.trim(), agentIds }));
      fill(result, data ? previewView(data.policyPreview) : null);
    } },
    field('Tool', tool), h('datalist', { id: 'preview-tools' }, tools.map((t) => h('option', { value: t }))),
    h('h3', {}, 'Run path (root first, the calling agent last)'), levels,
    h('div', { class: 'inline' },
      h('button', { type: 'button', onclick: () => addLevel(null).focus() }, 'Add a delegation level'),
      h('button', { type: 'button', onclick: () => { if (levels.children.length > 1) levels.lastChild.remove(); } },
        'Remove the last level'),
      h('button', { type: 'submit', class: 'primary' }, 'Preview decision'))),
    slot.el, result);
}

function previewView(p) {
  return [
    h('p', { class: 'verdict' }, h('code', {}, p.tool), ` (${p.risk}): `, status(p.decision)),
    h('p', { id: 'preview-reason' }, `Reason: ${p.reason}`),
    table(['Agent', 'Its own decision', 'Decided by'], p.links.map((l) => h('tr', {},
      h('td', {}, agentLink({ id: l.agentId, name: l.agentName })), h('td', {}, status(l.decision)), h('td', {}, l.source)))),
  ];
}
