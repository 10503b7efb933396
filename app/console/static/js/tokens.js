// API tokens (admins only): create one — its secret is shown once, here, and never again —
// revoke, and see when each was last used.

import { gql, session } from './api.js';
import { act, errorSlot, field, fill, h, settled, status, table, when } from './dom.js';

const TOKENS = `
query Tokens { apiTokens(first: 100) { edges { node { id name role createdAt expiresAt lastUsedAt revokedAt } } } }`;
const CREATE = `
mutation CreateToken($input: CreateApiTokenInput!) { createApiToken(input: $input) { token apiToken { id name } } }`;
const REVOKE = 'mutation Revoke($id: ID!) { revokeApiToken(id: $id) { id revokedAt } }';

export async function tokensPage(main, created = null) {
  if (!session.isAdmin) {
    fill(main, h('h1', {}, 'API tokens'), h('p', {}, 'Only admins see and manage tokens.'));
    return;
  }
  const { apiTokens } = await gql(TOKENS);
  const reload = (shown) => tokensPage(main, shown);
  fill(main, h('h1', {}, 'API tokens'),
    created ? h('div', { class: 'notice', role: 'status', id: 'new-token' },
      h('p', {}, `Token ${created.apiToken.name} created. Copy it now: it is shown only once.`),
      h('input', { id: 'new-token-value', readonly: true, value: created.token, 'aria-label': 'New token', size: 60 }))
      : null,
    createForm(reload),
    table(['Name', 'Role', 'Created', 'Expires', 'Last used', 'State', ''], apiTokens.edges.map(({ node: t }) =>
      tokenRow(t, () => reload(null))), { id: 'tokens' }));
  main.querySelector('#new-token-value')?.select();
}

function tokenRow(token, reload) {
  const slot = errorSlot();
  return h('tr', { 'data-token': token.name },
    h('td', {}, token.name), h('td', {}, token.role), h('td', {}, when(token.createdAt)),
    h('td', {}, token.expiresAt ? when(token.expiresAt) : 'never'),
    h('td', { class: 'last-used' }, token.lastUsedAt ? when(token.lastUsedAt) : 'never'),
    h('td', {}, token.revokedAt ? [status('REVOKED'), ' ', when(token.revokedAt)] : status('ACTIVE')),
    h('td', {}, token.revokedAt ? null : h('button', { type: 'button', class: 'danger', onclick: async (event) => {
      if (await act(event.currentTarget, slot, () => gql(REVOKE, { id: token.id }))) await settled(reload, `Token ${token.name} revoked.`);
    } }, `Revoke ${token.name}`), slot.el));
}

function createForm(reload) {
  const slot = errorSlot();
  const name = h('input', { id: 'token-name', required: true, autocomplete: 'off' });
  const role = h('select', { id: 'token-role' }, ['viewer', 'operator', 'admin'].map((r) => h('option', { value: r }, r)));
  const expires = h('input', { id: 'token-expires', type: 'datetime-local' });
  return h('form', { class: 'inline', 'aria-label': 'Create a token', onsubmit: async (event) => {
    event.preventDefault();
    const done = await act(event.submitter, slot, () => gql(CREATE, { input: {
      name: name.value.trim(), role: role.value,
      expiresAt: expires.value ? new Date(expires.value).toISOString() : null,
    } }));
    if (done) reload(done.createApiToken);
  } },
  field('Name', name), field('Role', role), field('Expires (optional)', expires),
  h('button', { type: 'submit', class: 'primary' }, 'Create token'),
  slot.el);
}
