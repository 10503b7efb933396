// An Apollo Client 4 for Enverif: queries and mutations over HTTP, subscriptions over
// graphql-ws, and an InMemoryCache that needs no keys (every object has an id) but merges the
// pages of each list with relayStylePagination.
//
//   npm install @apollo/client graphql graphql-ws rxjs
//   import { enverifClient } from "./apollo_client.mjs";
//   const client = enverifClient({ httpUrl: "http://127.0.0.1:8000/graphql",
//                                  wsUrl: "ws://127.0.0.1:8000/graphql", token });
//
// In node 20, which has no global WebSocket, pass `webSocketImpl` (npm `ws`).
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from "@apollo/client";
import { GraphQLWsLink } from "@apollo/client/link/subscriptions";
import { getMainDefinition, relayStylePagination } from "@apollo/client/utilities";
import { createClient } from "graphql-ws";

// A list's filters and order name a different list; `first`, `after`, `last` and `before`
// are pages of the same one.
const RUN_FILTERS = ["status", "agentId", "rootsOnly", "trigger", "createdAfter", "createdBefore", "orderBy"];

export function enverifClient({ httpUrl, wsUrl, token, webSocketImpl }) {
  const http = new HttpLink({ uri: httpUrl, headers: { authorization: `Bearer ${token}` } });
  const ws = new GraphQLWsLink(
    createClient({ url: wsUrl, webSocketImpl, connectionParams: { Authorization: `Bearer ${token}` } }),
  );
  const isSubscription = ({ query }) => {
    const definition = getMainDefinition(query);
    return definition.kind === "OperationDefinition" && definition.operation === "subscription";
  };
  return new ApolloClient({
    link: ApolloLink.split(isSubscription, ws, http),
    cache: new InMemoryCache({
      typePolicies: { Query: { fields: { runs: relayStylePagination(RUN_FILTERS) } } },
    }),
  });
}

export const RUNS = gql`
  query Runs($first: Int, $after: String) {
    runs(first: $first, after: $after) {
      totalCount
      edges { cursor node { id status createdAt agent { id name } } }
      pageInfo { hasNextPage endCursor }
    }
  }
`;

export const START_RUN = gql`
  mutation StartRun($agentId: ID!, $input: JSON) {
    startRun(agentId: $agentId, input: $input) { id status }
  }
`;

export const RUN_TREE = gql`
  subscription RunTree($root: ID!) {
    runTree(rootRunId: $root) { id seq type runId status agentName approvalId }
  }
`;

export const DECIDE = gql`
  mutation Decide($id: ID!, $approve: Boolean!) {
    decideApproval(id: $id, approve: $approve) { id status }
  }
`;

// Start a run and follow its whole tree, approving what it asks for; resolves with the tree's
// events once the server completes the stream (the whole tree has ended).
export async function runAndApprove(client, agentId, input) {
  const { data } = await client.mutate({ mutation: START_RUN, variables: { agentId, input } });
  const root = data.startRun.id;
  const events = [];
  await new Promise((resolve, reject) => {
    client.subscribe({ query: RUN_TREE, variables: { root } }).subscribe({
      next: ({ data: event, error }) => {
        if (error) return reject(error);
        events.push(event.runTree);
        if (event.runTree.type === "APPROVAL_REQUESTED") {
          const id = event.runTree.approvalId;
          client.mutate({ mutation: DECIDE, variables: { id, approve: true } }).catch(reject);
        }
      },
      error: reject,
      complete: resolve,
    });
  });
  return { root, events };
}
