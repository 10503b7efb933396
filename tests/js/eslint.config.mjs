// @graphql-eslint on schema.graphql (`make lint-schema`, part of `make test`): the plugin's
// schema-recommended and schema-relay rules. Each rule changed from those presets says why
// beside it; none is turned off.
import { fileURLToPath } from "node:url";

import graphql from "@graphql-eslint/eslint-plugin";

const schema = fileURLToPath(new URL("../../schema.graphql", import.meta.url));

export default [
  {
    files: ["**/*.graphql"],
    languageOptions: {
      parser: graphql.parser,
      parserOptions: { graphQLConfig: { schema } },
    },
    plugins: { "@graphql-eslint": graphql },
    rules: {
      ...graphql.configs["flat/schema-recommended"].rules,
      ...graphql.configs["flat/schema-relay"].rules,

      // Stricter than the preset (which asks only types and root fields): every field,
      // argument, input field and enum value, as docs/graphql/frontends.md promises and
      // tests/unit/test_schema_descriptions.py checks too.
      "@graphql-eslint/require-description": [
        "error",
        {
          types: true,
          rootField: true,
          DirectiveDefinition: true,
          FieldDefinition: true,
          InputValueDefinition: true,
          EnumValueDefinition: true,
        },
      ],

      // Every type a client can fetch twice has an `id` (a normalised cache keys it). These
      // have no identity of their own, so no id:
      // - connections, edges and PageInfo: Relay's paging wrappers, whose identity is the
      //   parent field and its arguments (Relay's connection spec gives them none);
      // - Viewer: the caller as its token sees itself, not a stored object;
      // - Usage, BudgetLimit: figures computed on read for their run, which has the id;
      // - Actor: the "who" of the object that names it; the token, run or schedule it
      //   points at has the id;
      // - ApprovalWebhook: a setting read through its Workspace;
      // - McpTool: an entry of its server's last sync listing, named uniquely within it;
      // - PolicyPreview, PolicyPreviewLink: the computed answer to policyPreview(...);
      // - RunOutputChunk, ApprovalEvent: live stream messages, not stored (the Approval an
      //   event carries has its id);
      // - CreatedApiToken: createApiToken's one-time payload (its apiToken has the id);
      // - Remove...Payload: what removeMemory, removeSchedule and removeMcpServer answer
      //   about an object that is gone (its old id is deletedId; the agent has its id).
      "@graphql-eslint/strict-id-in-types": [
        "error",
        {
          acceptedIdNames: ["id"],
          acceptedIdTypes: ["ID"],
          exceptions: {
            suffixes: ["Connection", "Edge", "Payload"],
            types: [
              "PageInfo",
              "Viewer",
              "Usage",
              "BudgetLimit",
              "Actor",
              "ApprovalWebhook",
              "McpTool",
              "PolicyPreview",
              "PolicyPreviewLink",
              "RunOutputChunk",
              "ApprovalEvent",
              "CreatedApiToken",
            ],
          },
        },
      ],

      // Edges must end in Edge and their nodes implement Node (kept). Relaxed:
      // - listTypeCanWrapOnlyEdgeType: plain lists are part of the public contract
      //   (Run.steps, Run.children, Agent.tools, Memory.tags, ...; docs/graphql/guide.md);
      //   the long ones are bounded first pages of a connection beside them
      //   (stepsConnection, childrenConnection, ...).
      "@graphql-eslint/relay-edge-types": [
        "error",
        { withEdgeSuffix: true, shouldImplementNode: true, listTypeCanWrapOnlyEdgeType: false },
      ],
    },
  },
];
