// Connectors: the workspace's MCP servers and the tools each listed at its last sync (named
// mcp.<server>.<tool>, as agents are offered them)
// (docs/extending/mcp.md). Admins register, sync, enable or disable, and remove them; an
// agent's page shows the MCP tools its patterns offer.

import { gql, session } from './api.js';
import { act, errorSlot, field, fill, h, json, parseJson, settled, status, table, when } from './dom.js';

const SERVERS = `
query Servers {
  mcpServers(first: 100) { edges { node {
    id name transport url command enabled headers toolRisk lastSyncedAt lastError
    tools { name description risk annotations inputSchema }
  } } }
}`;

const CREATE = `mutation CreateServer($input: CreateMcpServerInput!) { createMcpServer(input: $input) { id name } }`;
const UPDATE = `mutation UpdateServer($id: ID!, $input: UpdateMcpServerInput!) { updateMcpServer(id: $id, input: $input) { id } }`;
const SYNC = 'mutation Sync($id: ID!) { syncMcpServer(id: $id) { id lastError } }';
const DELETE = 'mutation DeleteServer($id: ID!) { removeMcpServer(id: $id) { deletedId } }';

export const loadServers = async () => (await gql(SERVERS)).mcpServers.edges.map((e) => e.node);

/** fnmatch as the server's policy compares names (app.domain.policy.tool_matches): trimmed, case-folded. */
export function toolMatches(name, pattern) {
  const source = [...pattern.trim().toLowerCase()].map((c) => (c === '*' ? '.*' : c === '?' ? '.'
    : c.replace(/[.+^${}()|[\]\\]/g, '\\$&'))).join('');
  return new RegExp(`^${source}$`, 's').test(name.trim().toLowerCase());
}

/** The MCP tools an agent's patterns offer, with their risk (for the agent page). */
export async function agentConnectors(agent) {
  const servers = await loadServers();
  const offered = servers.flatMap((s) => s.tools.map((t) => ({ server: s, tool: t, name: t.name })))
    .filter(({ name }) => agent.tools.some((p) => toolMatches(name, p)));
  return h('section', { 'aria-labelledby': 'agent-mcp-h', id: 'agent-mcp' },
    h('h2', { id: 'agent-mcp-h' }, 'MCP tools this agent is offered'),
    offered.length ? table(['Tool', 'Risk', 'Server', 'Description'], offered.map(({ server, tool, name }) => h('tr', {},
      h('td', {}, h('code', {}, name)), h('td', {}, tool.risk),
      h('td', {}, h('a', { href: '#/connectors' }, server.name), server.enabled ? '' : ' (disabled)'),
      h('td', {}, tool.description ?? '')))) : h('p', {}, 'None: no pattern of this agent names a synced MCP tool.'));
}

export async function connectorsPage(main) {
  const servers = await loadServers();
  const reload = () => connectorsPage(main);
  fill(main, h('h1', {}, 'Connectors (MCP servers)'),
    servers.length ? h('div', { class: 'cards' }, servers.map((s) => serverCard(s, reload)))
      : h('p', {}, 'No MCP servers registered.'),
    session.isAdmin ? createForm(reload) : h('p', { class: 'muted' }, 'Admins register MCP servers.'));
}

function serverCard(server, reload) {
  const slot = errorSlot();
  const run = (mutation, variables, said) => async (event) => {
    if (await act(event.currentTarget, slot, () => gql(mutation, variables))) await settled(reload, said);
  };
  return h('article', { class: 'card', 'data-server': server.name, 'aria-labelledby': `mcp-${server.id}` },
    h('h2', { id: `mcp-${server.id}` }, server.name, ' ', status(server.enabled ? 'ENABLED' : 'DISABLED')),
    h('p', {}, `${server.transport}: `, h('code', {}, server.url ?? (server.command ?? []).join(' '))),
    h('p', { class: 'muted' }, 'Last synced ', when(server.lastSyncedAt)),
    server.lastError ? h('p', { class: 'error' }, `Last error: ${server.lastError}`) : null,
    Object.keys(server.headers).length ? h('p', {}, 'Headers from environment variables: ',
      Object.entries(server.headers).map(([k, v]) => h('code', {}, `${k} ← ${v} `))) : null,
    h('h3', {}, `Tools (${server.tools.length})`),
    server.tools.length ? table(['Tool', 'Risk', 'Description'], server.tools.map((t) => h('tr', { 'data-tool': t.name },
      h('td', {}, h('code', {}, t.name)), h('td', {}, t.risk),
      h('td', {}, t.description ?? '', h('details', {}, h('summary', {}, 'Input schema'), json(t.inputSchema)))))) : null,
    session.isAdmin ? h('div', { class: 'inline', role: 'group', 'aria-label': `Manage ${server.name}` },
      h('button', { type: 'button', onclick: run(SYNC, { id: server.id }, `${server.name} synced.`) }, `Sync ${server.name}`),
      h('button', { type: 'button', onclick: run(UPDATE, { id: server.id, input: { enabled: !server.enabled } },
        `${server.name} ${server.enabled ? 'disabled' : 'enabled'}.`) },
        server.enabled ? `Disable ${server.name}` : `Enable ${server.name}`),
      h('button', { type: 'button', class: 'danger', onclick: run(DELETE, { id: server.id }, `${server.name} removed.`) }, `Remove ${server.name}`))
      : null,
    session.isAdmin ? riskForm(server, reload) : null,
    slot.el);
}

// An admin's override of what the annotations say (audited by the API), e.g. {"send_email": "EXTERNAL_WRITE"}.
function riskForm(server, reload) {
  const slot = errorSlot();
  const text = h('textarea', { id: `risk-${server.id}`, rows: 2, spellcheck: false }, JSON.stringify(server.toolRisk));
  return h('details', {}, h('summary', {}, 'Tool risk overrides'),
    h('form', { 'aria-label': `Tool risk overrides of ${server.name}`, onsubmit: async (event) => {
      event.preventDefault();
      const done = await act(event.submitter, slot, () =>
        gql(UPDATE, { id: server.id, input: { toolRisk: parseJson(text.value, 'toolRisk', {}) } }));
      if (done) await settled(reload, `Risk overrides of ${server.name} saved.`);
    } },
    field('Tool → risk class (JSON)', text, { class: 'wide' }),
    h('button', { type: 'submit' }, 'Save overrides'), slot.el));
}

function createForm(reload) {
  const slot = errorSlot();
  const name = h('input', { id: 'mcp-name', required: true, autocomplete: 'off' });
  const transport = h('select', { id: 'mcp-transport' }, ['STREAMABLE_HTTP', 'STDIO'].map((t) => h('option', { value: t }, t)));
  const url = h('input', { id: 'mcp-url', autocomplete: 'off' });
  const command = h('input', { id: 'mcp-command', autocomplete: 'off' });
  const headers = h('textarea', { id: 'mcp-headers', rows: 2, spellcheck: false }, '{}');
  const toolRisk = h('textarea', { id: 'mcp-risk', rows: 2, spellcheck: false }, '{}');
  return h('form', { class: 'panel', 'aria-label': 'Register an MCP server', onsubmit: async (event) => {
    event.preventDefault();
    const done = await act(event.submitter, slot, () => gql(CREATE, { input: {
      name: name.value.trim(), transport: transport.value, url: url.value.trim() || null,
      command: command.value.trim() ? command.value.trim().split(/\s+/) : null,
      headers: parseJson(headers.value, 'headers'), toolRisk: parseJson(toolRisk.value, 'toolRisk'),
    } }));
    if (done) await settled(reload, `${done.createMcpServer.name} registered.`);
  } },
  h('h2', {}, 'Register an MCP server'),
  h('div', { class: 'grid' }, field('Name', name), field('Transport', transport), field('URL (streamable HTTP)', url),
    field('Command (STDIO, space-separated)', command),
    field('Headers (JSON: header → environment variable name)', headers), field('Tool risk overrides (JSON)', toolRisk)),
  h('button', { type: 'submit', class: 'primary' }, 'Register server'),
  slot.el);
}
