// The console's shell: sign-in, navigation and a hash router (#/runs, #/runs/ID,
// #/approvals, #/agents, #/agents/ID, #/policies[?path=ID,ID], #/connectors, #/tokens). Each
// page renders into <main> and may return a cleanup function (closing its subscription or
// timer) that runs when the user leaves it.

import { gql, session, signIn, signOut, takeNotice } from './api.js';
import { fill, h } from './dom.js';
import { agentPage, agentsPage } from './agents.js';
import { approvalsPage } from './approvals.js';
import { connectorsPage } from './connectors.js';
import { policiesPage } from './policies.js';
import { runPage } from './run.js';
import { runsPage } from './runs.js';
import { tokensPage } from './tokens.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');

const ROUTES = [
  [/^#\/runs\/([^/]+)$/, (box, id) => runPage(box, decodeURIComponent(id))],
  [/^#\/runs$/, (box) => runsPage(box)],
  [/^#\/approvals$/, (box) => approvalsPage(box)],
  [/^#\/agents\/([^/]+)$/, (box, id) => agentPage(box, decodeURIComponent(id))],
  [/^#\/agents$/, (box) => agentsPage(box)],
  [/^#\/policies(?:\?path=([^/]*))?$/, (box, path) => policiesPage(box, path ? decodeURIComponent(path).split(',') : [])],
  [/^#\/connectors$/, (box) => connectorsPage(box)],
  [/^#\/tokens$/, (box) => tokensPage(box)],
];

let cleanup = null;
let current = null; // the container of the page being shown

async function route() {
  if (cleanup) { cleanup(); cleanup = null; }
  // Each visit renders into its own container: a slow page that finishes after the user has
  // moved on fills a detached box, never the page now on screen.
  const box = h('div');
  current = box;
  const hash = location.hash || '#/runs';
  if (!session.token || hash === '#/signin') {
    showSignIn();
    return;
  }
  if (!session.role && !(await loadViewer())) return;
  if (current !== box) return;
  for (const link of nav.querySelectorAll('a')) {
    if (hash.startsWith(link.getAttribute('href'))) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const match = ROUTES.map(([pattern, page]) => [hash.match(pattern), page]).find(([m]) => m);
  if (!match) {
    fill(main, h('h1', {}, 'Not found'), h('p', {}, 'No page here. ', h('a', { href: '#/runs' }, 'Go to runs')));
    return;
  }
  const [found, page] = match;
  fill(main, box);
  try {
    const stop = (await page(box, ...found.slice(1))) ?? null;
    if (current === box) {
      cleanup = stop;
      // Keyboard and screen-reader users start at the new page, not on a link that is gone.
      if (!main.contains(document.activeElement)) {
        main.focus({ preventScroll: true });
      }
    } else {
      stop?.(); // the user left while it loaded
    }
  } catch (error) {
    if (error.code === 'UNAUTHENTICATED' || current !== box) return; // already elsewhere
    fill(box, h('h1', {}, 'Something went wrong'),
      h('p', { class: 'error', role: 'alert' }, error.message, ' ', h('code', {}, `(${error.code ?? 'ERROR'})`)));
  }
}

async function loadViewer() {
  try {
    const { viewer } = await gql('query { viewer { role workspace { id name } } }');
    session.role = viewer.role;
    session.workspace = viewer.workspace;
  } catch (error) {
    if (error.code !== 'UNAUTHENTICATED') signOut(`Could not sign in: ${error.message} (${error.code}).`);
    return false;
  }
  nav.hidden = false;
  // Links to pages a role cannot use are not offered (the pages say so too, if typed in).
  for (const link of nav.querySelectorAll('[data-role=admin]')) link.hidden = !session.isAdmin;
  fill(who, `${session.workspace.name} · ${session.role}`,
    h('button', { type: 'button', onclick: () => signOut('Signed out.') }, 'Sign out'));
  who.hidden = false;
  return true;
}

function showSignIn() {
  nav.hidden = true;
  who.hidden = true;
  const notice = takeNotice();
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true });
  const form = h('form', {
    class: 'signin',
    onsubmit: (event) => {
      event.preventDefault();
      signIn(input.value.trim());
      session.role = null;
      location.hash = '#/runs';
      if (location.hash === '#/runs') route();
    },
  },
  h('label', { for: 'token' }, 'API token'), input,
  h('p', { class: 'muted' }, 'Kept for this browser session only. `enverif dev` prints one; `enverif token create` makes more.'),
  h('p', {}, h('button', { class: 'primary', type: 'submit' }, 'Sign in')));
  fill(main, h('h1', {}, 'Sign in'), notice ? h('p', { class: 'notice', role: 'status' }, notice) : null, form);
  input.focus();
}

window.addEventListener('hashchange', route);
route();
