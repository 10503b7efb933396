// Subscribes to runTree with the reference graphql-transport-ws client (npm graphql-ws), as a
// browser app would, and prints one JSON line per message: {"event": {...}} for each event,
// then {"complete": true} when the server completes the stream, or {"error": ...} (exit 1).
//
//   ENVERIF_TOKEN=<bearer token> node tests/js/watch_tree.mjs ws://127.0.0.1:PORT/graphql ROOT_RUN_ID [AFTER_SEQ]
//
// Node 20 has no global WebSocket: the `ws` package is the implementation.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const [url, root, after] = process.argv.slice(2);
const token = process.env.ENVERIF_TOKEN;
if (!url || !root || !token) {
  console.error('usage: ENVERIF_TOKEN=... node watch_tree.mjs WS_URL ROOT_RUN_ID [AFTER_SEQ]');
  process.exit(2);
}

const query = `subscription Watch($root: ID!, $after: Int) {
  runTree(rootRunId: $root, afterSeq: $after) {
    seq type runId parentRunId status agentName stepTool stepDecision approvalId
  }
}`;

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: `Bearer ${token}` },
  retryAttempts: 0,
});

const variables = { root };
if (after !== undefined) variables.after = Number(after);

let failed = false;
await new Promise((resolve) => {
  client.subscribe(
    { query, variables },
    {
      next: (result) => {
        if (result.errors) {
          failed = true;
          console.log(JSON.stringify({ error: result.errors }));
        } else {
          console.log(JSON.stringify({ event: result.data.runTree }));
        }
      },
      error: (error) => {
        failed = true;
        console.log(JSON.stringify({ error: String(error?.reason ?? error?.message ?? error) }));
        resolve();
      },
      complete: () => {
        if (!failed) console.log(JSON.stringify({ complete: true }));
        resolve();
      },
    },
  );
});
await client.dispose();
process.exit(failed ? 1 : 0);
