// Watch a run tree live with the npm graphql-ws client (5.x or 6.x): every event of the tree
// as one JSON line, until the server completes the stream because the whole tree has ended.
//
//   npm install graphql-ws ws
//   TOKEN=evf_... node watch_tree.mjs RUN_ID [ws://127.0.0.1:8000/graphql]
//
// On Node 22+ the global WebSocket works and `ws` is not needed.
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [root, url = "ws://127.0.0.1:8000/graphql"] = process.argv.slice(2);
if (!root || !process.env.TOKEN) {
  console.error("usage: TOKEN=evf_... node watch_tree.mjs RUN_ID [WS_URL]");
  process.exit(2);
}

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  // Browsers cannot set headers on a websocket: the token goes in connection_init.
  connectionParams: { Authorization: `Bearer ${process.env.TOKEN}` },
  // A refused token (close code 4403) does not get better by retrying; a restarted server does.
  shouldRetry: (event) => event?.code !== 4403,
});
const query = `subscription ($root: ID!) {
  runTree(rootRunId: $root) { seq type runId parentRunId status stepId agentName payload }
}`;
try {
  for await (const { data, errors } of client.iterate({ query, variables: { root } })) {
    if (errors) throw new Error(errors[0].message); // e.g. "run not found" for another workspace's run
    console.log(JSON.stringify(data.runTree));
  } // ends when the server sends complete: the whole tree has ended
} catch (error) {
  // An error of the operation, or the socket's close event (4403: the token was refused).
  console.error(`watch failed: ${error.reason || error.message || error}`);
  process.exitCode = 1;
} finally {
  await client.dispose();
}
