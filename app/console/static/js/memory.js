// An agent's memory: search and tag filter, add, edit, delete, and each memory's revisions
// (who and when). Edits and deletes are operator controls; a viewer reads only.
// A rejected write (the credential guard, a duplicate key) shows the API's message and code
// beside the form and changes nothing: the list is re-read only after a write succeeded.

import { gql, session } from './api.js';
import { act, errorSlot, fill, h, runLink, when } from './dom.js';

const MEMORY_FIELDS = `
  id key value tags importance createdAt updatedAt lastUsedAt sourceRun { id agent { name } }
  revisions { action key oldValue newValue byOperator apiTokenId at sourceRun { id agent { name } } }`;

const SEARCH = `
query Memories($agentId: ID!, $query: String, $tags: [String!], $after: String) {
  memories(agentId: $agentId, query: $query, tags: $tags, first: 20, after: $after) {
    edges { node { ${MEMORY_FIELDS} } }
    pageInfo { hasNextPage endCursor }
  }
}`;

const CREATE = `mutation Create($agentId: ID!, $input: CreateMemoryInput!) { createMemory(agentId: $agentId, memory: $input) { id } }`;
const UPDATE = `mutation Update($id: ID!, $input: UpdateMemoryInput!) { updateMemory(id: $id, changes: $input) { id } }`;
const DELETE = 'mutation Delete($id: ID!) { removeMemory(id: $id) { deletedId } }';

const parseTags = (text) => text.split(',').map((t) => t.trim()).filter(Boolean);

export async function memorySection(box, agent) {
  const query = h('input', { id: 'm-query', type: 'search' });
  const tags = h('input', { id: 'm-tags', placeholder: 'comma separated' });
  const list = h('div', { id: 'memories', 'aria-live': 'polite' });
  const cursors = [null];

  async function load() {
    const { memories } = await gql(SEARCH, {
      agentId: agent.id, query: query.value.trim() || null, after: cursors[cursors.length - 1],
      tags: parseTags(tags.value).length ? parseTags(tags.value) : null,
    });
    const more = memories.pageInfo.hasNextPage ? h('button', { type: 'button',
      onclick: () => { cursors.push(memories.pageInfo.endCursor); load(); } }, 'Next page') : null;
    const back = cursors.length > 1 ? h('button', { type: 'button',
      onclick: () => { cursors.pop(); load(); } }, 'Previous page') : null;
    fill(list, memories.edges.length === 0 ? h('p', {}, 'No memories match.') : null,
      memories.edges.map(({ node }) => memoryCard(node, reload)), h('p', {}, back, ' ', more));
  }
  const reload = () => { cursors.splice(1); return load(); };

  fill(box,
    h('h2', { id: 'memory-h' }, 'Memory'),
    h('form', { class: 'filters', role: 'search', 'aria-label': 'Search memories',
      onsubmit: (event) => { event.preventDefault(); reload(); } },
    h('label', { for: 'm-query' }, 'Search', query),
    h('label', { for: 'm-tags' }, 'Tags (all of)', tags),
    h('button', { type: 'submit' }, 'Search')),
    session.canOperate ? memoryForm({ title: 'Add a memory', submit: 'Add memory', id: 'm-new',
      save: (input) => gql(CREATE, { agentId: agent.id, input }), done: reload }) : null,
    list);
  await load();
}

/** The add and edit form; `memory` given: edit it (only changed fields are sent). */
function memoryForm({ title, submit, id, memory, save, done, cancel }) {
  const slot = errorSlot();
  const field = (name, label, control) => h('label', { for: `${id}-${name}` }, label, control);
  const key = h('input', { id: `${id}-key`, required: true, value: memory?.key ?? '' });
  const value = h('textarea', { id: `${id}-value`, required: true, rows: 2 }, memory?.value ?? '');
  const tags = h('input', { id: `${id}-tags`, value: memory?.tags.join(', ') ?? '', placeholder: 'comma separated' });
  const importance = h('input', { id: `${id}-importance`, type: 'number', min: 0, max: 1, step: 0.05,
    value: memory?.importance ?? 0.5 });
  return h('form', { class: 'card', 'aria-label': title, 'data-form': id, onsubmit: async (event) => {
    event.preventDefault();
    const input = { key: key.value.trim(), value: value.value, tags: parseTags(tags.value),
      importance: Number(importance.value) };
    if (memory) {
      for (const name of Object.keys(input)) {
        const before = name === 'tags' ? memory.tags.join(',') : memory[name];
        const after = name === 'tags' ? input.tags.join(',') : input[name];
        if (before === after) delete input[name];
      }
    }
    const form = event.currentTarget;
    if (await act(event.submitter ?? form.querySelector('[type=submit]'), slot, () => save(input))) {
      if (!memory) form.reset(); // added: the form is ready for the next one
      await done();
    }
  } },
  h('h3', {}, title),
  h('div', { class: 'inline' }, field('key', 'Key', key), field('tags', 'Tags', tags),
    field('importance', 'Importance (0 to 1)', importance)),
  field('value', 'Value', value),
  h('p', {}, h('button', { type: 'submit', class: 'primary' }, submit), ' ',
    cancel ? h('button', { type: 'button', onclick: cancel }, 'Cancel') : null),
  slot.el);
}

function memoryCard(memory, changed) {
  const card = h('article', { class: 'card', 'data-memory': memory.key });
  const slot = errorSlot();
  const view = () => fill(card,
    h('h3', {}, memory.key),
    h('p', {}, memory.value),
    h('p', { class: 'muted' }, memory.tags.length ? `Tags: ${memory.tags.join(', ')} · ` : 'No tags · ',
      `importance ${memory.importance} · updated `, when(memory.updatedAt),
      ' · last used ', when(memory.lastUsedAt),
      memory.sourceRun ? [' · last written by ', runLink(memory.sourceRun)] : ' · not written by a run'),
    session.canOperate ? h('p', {},
      h('button', { type: 'button', onclick: edit }, `Edit ${memory.key}`), ' ',
      h('button', { type: 'button', class: 'danger', onclick: askDelete }, `Delete ${memory.key}`)) : null,
    slot.el,
    revisions(memory));

  function edit() {
    fill(card, memoryForm({ title: `Edit ${memory.key}`, submit: 'Save changes', id: `m-${memory.id}`, memory,
      save: (input) => gql(UPDATE, { id: memory.id, input }), done: changed, cancel: view }));
    card.querySelector('input').focus();
  }

  function askDelete(event) {
    const confirm = h('button', { type: 'button', class: 'danger', onclick: async (e) => {
      if (await act(e.currentTarget, slot, () => gql(DELETE, { id: memory.id }))) await changed();
    } }, `Confirm: delete ${memory.key}`);
    event.currentTarget.replaceWith(confirm);
    confirm.focus();
  }

  view();
  return card;
}

function revisions(memory) {
  return h('details', { class: 'revisions' },
    h('summary', {}, `Revisions (${memory.revisions.length})`),
    h('ol', {}, memory.revisions.map((r) => h('li', {},
      h('strong', {}, r.action), ' ', when(r.at), ' by ',
      r.byOperator ? `operator token ${r.apiTokenId}` : r.sourceRun ? runLink(r.sourceRun) : 'the system',
      r.action === 'CREATE' ? `: "${r.newValue}"`
        : r.action === 'UPDATE' ? `: "${r.oldValue}" → "${r.newValue}"` : `: was "${r.oldValue}"`))));
}
