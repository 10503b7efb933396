// The Apollo Client 4 flow of a frontend, on the manual's client (docs/examples/apollo_client.mjs,
// copied beside this file and the pinned packages by tests/integration/test_frontend_clients_js.py):
// start a run and follow its tree over GraphQLWsLink to `complete`, approving mid-stream; read
// the run's detail; keep Delegation.task in the normalised cache when another query selects
// other Delegation fields; page `runs` with relayStylePagination. One JSON line per step done,
// {"done": true} at the end; any failed step, or any warning Apollo logs, exits 1.
//
//   ENVERIF_TOKEN=<operator token> node apollo_flow.mjs HTTP_URL WS_URL AGENT_ID (flow.mjs)
import assert from "node:assert/strict";
import { gql } from "@apollo/client";
import WebSocket from "ws";
import { done, runFlow } from "./flow.mjs";
import { RUNS, enverifClient, runAndApprove } from "./apollo_client.mjs";

const RUN_DETAIL = gql`
  query RunDetail($id: ID!) {
    run(id: $id) {
      id status result
      agent { id name }
      stepsConnection(first: 10) { totalCount edges { node { id seq tool status } } }
      childrenConnection(first: 10) { edges { node { id status delegation { id task } } } }
    }
  }
`;
const DELEGATION_TASK = gql`
  query DelegationTask($id: ID!) { run(id: $id) { id delegation { id task } } }
`;
const DELEGATION_STEP = gql`
  query DelegationStep($id: ID!) { run(id: $id) { id delegation { id parentStep { id tool status } } } }
`;

async function main({ httpUrl, wsUrl, agentId, token }) {
  const client = enverifClient({ httpUrl, wsUrl, token, webSocketImpl: WebSocket });

  const { root, events } = await runAndApprove(client, agentId, { topic: "apollo" });
  const seqs = events.map((e) => e.seq);
  assert.deepEqual(seqs, seqs.map((_, i) => i + 1), `a gap-free, ordered tree: ${seqs}`);
  assert.ok(events.some((e) => e.type === "APPROVAL_REQUESTED"), "the tree asked for an approval");
  const ends = events.filter((e) => e.type === "RUN_STATUS_CHANGED" && e.runId === root);
  assert.equal(ends.at(-1)?.status, "SUCCEEDED");
  done("runTree", { root, events: events.length });

  const { data: detail } = await client.query({ query: RUN_DETAIL, variables: { id: root } });
  assert.equal(detail.run.status, "SUCCEEDED");
  assert.equal(detail.run.stepsConnection.edges[0].node.tool, "agents.delegate");
  const [child] = detail.run.childrenConnection.edges.map((edge) => edge.node);
  assert.equal(child.delegation.task, "enrich");
  done("detail", { child: child.id });

  // Two queries select different fields of one Delegation: normalised by its id, the cache
  // merges them, and the first query still reads whole from the cache.
  await client.query({ query: DELEGATION_TASK, variables: { id: child.id }, fetchPolicy: "network-only" });
  const { data: step } = await client.query({ query: DELEGATION_STEP, variables: { id: child.id } });
  assert.equal(step.run.delegation.parentStep.tool, "agents.delegate");
  const cached = client.readQuery({ query: DELEGATION_TASK, variables: { id: child.id } });
  assert.equal(cached?.run.delegation.task, "enrich", "Delegation.task kept in the cache");
  done("delegation");

  // Page by one: relayStylePagination merges the pages into one list under `runs`.
  let page = (await client.query({ query: RUNS, variables: { first: 1 } })).data.runs;
  while (page.pageInfo.hasNextPage) {
    const variables = { first: 1, after: page.pageInfo.endCursor };
    page = (await client.query({ query: RUNS, variables, fetchPolicy: "network-only" })).data.runs;
  }
  const merged = client.readQuery({ query: RUNS, variables: { first: 1 } }).runs;
  const all = (await client.query({ query: RUNS, variables: { first: 50 }, fetchPolicy: "no-cache" })).data.runs;
  assert.deepEqual(merged.edges.map((e) => e.node.id), all.edges.map((e) => e.node.id));
  assert.equal(merged.edges.length, all.totalCount);
  assert.ok(merged.edges.some((e) => e.node.id === root));
  done("paging", { runs: merged.edges.length });

  client.stop();
}

await runFlow(main);
