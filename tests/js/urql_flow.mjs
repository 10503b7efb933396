// An urql flow with graphcache and no `keys` configuration (tests/integration/test_frontend_clients_js.py):
// start a run and follow its tree through the graphql-ws subscription exchange to its end,
// approving mid-stream; read the agent's Policy, PolicyRule and MemoryBudget and a child run's
// Delegation twice with different selections; page `runs` with relayPagination. Graphcache
// warns (console.warn) about every object it cannot key; any warning or failed step exits 1.
// One JSON line per step done, {"done": true} at the end.
//
//   ENVERIF_TOKEN=<operator token> node urql_flow.mjs HTTP_URL WS_URL AGENT_ID (flow.mjs)
import assert from "node:assert/strict";
import { Client, fetchExchange, gql, subscriptionExchange } from "@urql/core";
import { cacheExchange } from "@urql/exchange-graphcache";
import { relayPagination } from "@urql/exchange-graphcache/extras";
import { createClient as createWsClient } from "graphql-ws";
import { onEnd, pipe, subscribe } from "wonka";
import WebSocket from "ws";
import { done, runFlow } from "./flow.mjs";

const START_RUN = gql`
  mutation StartRun($agentId: ID!) { startRun(agentId: $agentId) { id status } }
`;
const RUN_TREE = gql`
  subscription RunTree($root: ID!) { runTree(rootRunId: $root) { id seq type runId status approvalId } }
`;
const DECIDE = gql`
  mutation Decide($id: ID!) { decideApproval(id: $id, approve: true) { id status } }
`;
const AGENT = gql`
  query Agent($id: ID!) {
    agent(id: $id) {
      id name
      policy { id default rules { id tool decision timeoutS } }
      memoryBudget { id maxItems maxChars }
    }
  }
`;
const CHILDREN = gql`
  query Children($id: ID!) {
    run(id: $id) { id status childrenConnection(first: 10) { edges { node { id delegation { id task } } } } }
  }
`;
const DELEGATION_TASK = gql`
  query DelegationTask($id: ID!) { run(id: $id) { id delegation { id task } } }
`;
const DELEGATION_STEP = gql`
  query DelegationStep($id: ID!) { run(id: $id) { id delegation { id parentStep { id tool status } } } }
`;
const RUNS = gql`
  query Runs($first: Int, $after: String) {
    runs(first: $first, after: $after) {
      totalCount
      edges { cursor node { id status } }
      pageInfo { hasNextPage endCursor }
    }
  }
`;

async function ok(promise) {
  const result = await promise;
  if (result.error) throw result.error;
  return result.data;
}

async function main({ httpUrl, wsUrl, agentId, token }) {
  const ws = createWsClient({ url: wsUrl, webSocketImpl: WebSocket, connectionParams: { Authorization: `Bearer ${token}` } });
  const client = new Client({
    url: httpUrl,
    fetchOptions: { headers: { authorization: `Bearer ${token}` } },
    exchanges: [
      cacheExchange({ resolvers: { Query: { runs: relayPagination() } } }),
      fetchExchange,
      subscriptionExchange({
        forwardSubscription: (request) => ({
          subscribe: (sink) => ({ unsubscribe: ws.subscribe({ ...request, query: request.query ?? "" }, sink) }),
        }),
      }),
    ],
  });

  const root = (await ok(client.mutation(START_RUN, { agentId }).toPromise())).startRun.id;
  const events = [];
  await new Promise((resolve, reject) => {
    pipe(
      client.subscription(RUN_TREE, { root }),
      onEnd(resolve),
      subscribe((result) => {
        if (result.error) return reject(result.error);
        const event = result.data.runTree;
        // When the server completes the stream, urql's subscriptionExchange delivers the last
        // result once more with hasNext: false, as the end marker: not a new event.
        if (!result.hasNext && event.seq === events.at(-1)?.seq) return;
        events.push(event);
        if (event.type === "APPROVAL_REQUESTED") {
          ok(client.mutation(DECIDE, { id: event.approvalId }).toPromise()).catch(reject);
        }
      }),
    );
  });
  const seqs = events.map((e) => e.seq);
  assert.deepEqual(seqs, seqs.map((_, i) => i + 1), `a gap-free, ordered tree: ${seqs}`);
  const ends = events.filter((e) => e.type === "RUN_STATUS_CHANGED" && e.runId === root);
  assert.equal(ends.at(-1)?.status, "SUCCEEDED");
  done("runTree", { root, events: events.length });

  const { agent } = await ok(client.query(AGENT, { id: agentId }).toPromise());
  assert.ok(agent.policy.id && agent.memoryBudget.id);
  done("agent", { rules: agent.policy.rules.length });

  const { run } = await ok(client.query(CHILDREN, { id: root }).toPromise());
  assert.equal(run.status, "SUCCEEDED");
  const child = run.childrenConnection.edges[0].node;
  await ok(client.query(DELEGATION_TASK, { id: child.id }, { requestPolicy: "network-only" }).toPromise());
  const step = await ok(client.query(DELEGATION_STEP, { id: child.id }).toPromise());
  assert.equal(step.run.delegation.parentStep.tool, "agents.delegate");
  const cached = await ok(client.query(DELEGATION_TASK, { id: child.id }, { requestPolicy: "cache-only" }).toPromise());
  assert.equal(cached?.run.delegation.task, "enrich", "Delegation.task kept in the cache");
  done("delegation");

  let page = (await ok(client.query(RUNS, { first: 1 }).toPromise())).runs;
  while (page.pageInfo.hasNextPage) {
    const variables = { first: 1, after: page.pageInfo.endCursor };
    page = (await ok(client.query(RUNS, variables).toPromise())).runs;
  }
  const merged = (await ok(client.query(RUNS, { first: 1 }, { requestPolicy: "cache-only" }).toPromise())).runs;
  assert.equal(merged.edges.length, merged.totalCount);
  assert.equal(new Set(merged.edges.map((e) => e.node.id)).size, merged.totalCount);
  assert.ok(merged.edges.some((e) => e.node.id === root));
  done("paging", { runs: merged.edges.length });

  await ws.dispose();
}

await runFlow(main);
