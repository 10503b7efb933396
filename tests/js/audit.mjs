// Runs graphql-http's server audits (GraphQL over HTTP conformance) against a running server
// and prints one JSON array of {id, name, status, reason} on stdout.
//
//   node tests/js/audit.mjs http://127.0.0.1:PORT/graphql   (ENVERIF_AUDIT_TOKEN=<bearer token>)
//
// The server needs a token for real queries; the audits know nothing of auth, so every request
// goes through a fetch wrapper that adds the Authorization header.
import { serverAudits } from 'graphql-http';

const url = process.argv[2];
const token = process.env.ENVERIF_AUDIT_TOKEN;
if (!url || !token) {
  console.error('usage: ENVERIF_AUDIT_TOKEN=... node audit.mjs URL');
  process.exit(2);
}

function fetchWithToken(input, init = {}) {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
}

const results = [];
for (const audit of serverAudits({ url, fetchFn: fetchWithToken })) {
  const result = await audit.fn();
  results.push({
    id: result.id,
    name: result.name,
    status: result.status,
    reason: result.status === 'ok' ? null : result.reason,
  });
}
console.log(JSON.stringify(results));
