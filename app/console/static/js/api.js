// The console's only way to the server: GraphQL over HTTP (fetch) and graphql-transport-ws.
// The token lives in sessionStorage: it is kept for this browser tab's session only.

const TOKEN_KEY = 'enverif.token';
const NOTICE_KEY = 'enverif.signin-notice';

/** A GraphQL error as the API reports it: message and extensions.code (and field). */
export class ApiError extends Error {
  constructor(message, code, field) {
    super(message);
    this.code = code;
    this.field = field;
  }
}

export const session = {
  get token() { return sessionStorage.getItem(TOKEN_KEY); },
  role: null,
  workspace: null,
  /** operator and admin may act; a viewer only reads. */
  get canOperate() { return this.role === 'operator' || this.role === 'admin'; },
  /** Only admins change agents, policies, budgets, connectors and tokens. */
  get isAdmin() { return this.role === 'admin'; },
};

export function signIn(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

/** Forget the token and go back to sign-in, saying why (expired, revoked, signed out). */
export function signOut(message) {
  // Once is enough: a page with two open sockets (a run's tree and its output) hears the
  // same revocation twice, and a second sign-out would redraw sign-in without the notice.
  if (!session.token && !session.role) return;
  sessionStorage.removeItem(TOKEN_KEY);
  session.role = null;
  if (message) sessionStorage.setItem(NOTICE_KEY, message);
  if (location.hash !== '#/signin') location.hash = '#/signin';
  else window.dispatchEvent(new HashChangeEvent('hashchange'));
}

export function takeNotice() {
  const notice = sessionStorage.getItem(NOTICE_KEY);
  sessionStorage.removeItem(NOTICE_KEY);
  return notice;
}

function toError(error) {
  const code = error?.extensions?.code ?? 'ERROR';
  return new ApiError(error?.message ?? 'request failed', code, error?.extensions?.field);
}

/** Post one GraphQL operation; resolves to `data`, or throws ApiError (the first error). */
export async function gql(query, variables = {}) {
  const headers = { 'Content-Type': 'application/json' };
  if (session.token) headers.Authorization = `Bearer ${session.token}`;
  let response;
  try {
    response = await fetch('/graphql', { method: 'POST', headers, body: JSON.stringify({ query, variables }) });
  } catch {
    throw new ApiError('the server cannot be reached', 'NETWORK');
  }
  let body;
  try {
    body = await response.json();
  } catch {
    throw new ApiError(`the server answered HTTP ${response.status}`, `HTTP_${response.status}`);
  }
  if (body.errors?.length) {
    const error = toError(body.errors[0]);
    if (error.code === 'UNAUTHENTICATED') signOut(`Signed out: ${error.message}. Sign in with a valid token.`);
    throw error;
  }
  return body.data;
}

const PING_EVERY_MS = 15_000;

/**
 * Subscribe over graphql-transport-ws (the protocol spelled out in the graphql-ws project's
 * PROTOCOL.md): connection_init with the bearer token, subscribe, then next* and complete.
 * Handlers: next(data), error(ApiError), complete(), closed(event) for a dropped socket.
 * Returns a function that stops the subscription.
 */
export function subscribe(query, variables, handlers) {
  const url = new URL('/graphql', location.href);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  const socket = new WebSocket(url, 'graphql-transport-ws');
  let finished = false;
  let pinger = null;

  socket.addEventListener('open', () => {
    socket.send(JSON.stringify({ type: 'connection_init', payload: { Authorization: `Bearer ${session.token}` } }));
  });
  socket.addEventListener('message', (event) => {
    const message = JSON.parse(event.data);
    switch (message.type) {
      case 'connection_ack':
        socket.send(JSON.stringify({ id: '1', type: 'subscribe', payload: { query, variables } }));
        // Keep-alive is the client's job in this protocol; the server only answers.
        pinger = setInterval(() => socket.send(JSON.stringify({ type: 'ping' })), PING_EVERY_MS);
        break;
      case 'ping':
        socket.send(JSON.stringify({ type: 'pong' }));
        break;
      case 'next':
        if (message.payload.errors?.length) handlers.error?.(toError(message.payload.errors[0]));
        else handlers.next(message.payload.data);
        break;
      case 'error': {
        finished = true;
        const error = toError(message.payload?.[0]);
        socket.close(1000);
        // The token stopped working while the socket was open: the API says so to each
        // operation before it closes the socket (4403), as an HTTP answer would.
        if (error.code === 'UNAUTHENTICATED') signOut(`Signed out: ${error.message}. Sign in with a valid token.`);
        else handlers.error?.(error);
        break;
      }
      case 'complete':
        finished = true;
        handlers.complete?.();
        socket.close(1000);
        break;
    }
  });
  socket.addEventListener('close', (event) => {
    clearInterval(pinger);
    if (finished) return;
    finished = true;
    // 4401/4403: the token stopped working (expired, revoked) while the socket was open.
    if (event.code === 4401 || event.code === 4403) {
      signOut(`Signed out: ${event.reason || 'the token no longer works'}. Sign in with a valid token.`);
      return;
    }
    handlers.closed?.(event);
  });
  return () => {
    if (finished) return;
    finished = true;
    if (socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ id: '1', type: 'complete' }));
      socket.close(1000);
    } else {
      socket.addEventListener('open', () => socket.close(1000));
    }
  };
}
