// Subscribes to approvalEvents with the reference graphql-transport-ws client (npm graphql-ws),
// as the console's inbox would, and prints one JSON line per message: {"ready": true} once the
// server acknowledged the connection, {"event": {...}} for each approval event, and stops
// after COUNT events ({"error": ...} and exit 1 on an error).
//
//   ENVERIF_TOKEN=<bearer token> node tests/js/watch_approvals.mjs ws://127.0.0.1:PORT/graphql COUNT
//
// Node 20 has no global WebSocket: the `ws` package is the implementation.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const [url, count] = process.argv.slice(2);
const token = process.env.ENVERIF_TOKEN;
if (!url || !count || !token) {
  console.error('usage: ENVERIF_TOKEN=... node watch_approvals.mjs WS_URL COUNT');
  process.exit(2);
}

const query = `subscription Inbox {
  approvalEvents {
    type at
    approval { id tool status decision scope arguments run { id } }
  }
}`;

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: `Bearer ${token}` },
  retryAttempts: 0,
  on: { connected: () => console.log(JSON.stringify({ ready: true })) },
});

let failed = false;
let seen = 0;
await new Promise((resolve) => {
  const stop = client.subscribe(
    { query },
    {
      next: (result) => {
        if (result.errors) {
          failed = true;
          console.log(JSON.stringify({ error: result.errors }));
          resolve();
          return;
        }
        console.log(JSON.stringify({ event: result.data.approvalEvents, receivedAt: Date.now() }));
        seen += 1;
        if (seen >= Number(count)) {
          stop();
          resolve();
        }
      },
      error: (error) => {
        failed = true;
        console.log(JSON.stringify({ error: String(error?.reason ?? error?.message ?? error) }));
        resolve();
      },
      complete: () => resolve(),
    },
  );
});
await client.dispose();
process.exit(failed ? 1 : 0);
