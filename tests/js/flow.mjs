// What tests/js/apollo_flow.mjs and urql_flow.mjs share: their arguments, the warnings the
// client logs (collected, and a failure), one JSON line per step, and the exit code.
//
//   ENVERIF_TOKEN=<operator token> node NAME_flow.mjs HTTP_URL WS_URL AGENT_ID

const [httpUrl, wsUrl, agentId] = process.argv.slice(2);
const token = process.env.ENVERIF_TOKEN;

// Clients report lost cache data, unkeyable objects and the like through console.warn/error.
const warnings = [];
for (const level of ["warn", "error"]) {
  console[level] = (...args) => warnings.push(args.map(String).join(" "));
}

export const done = (step, detail = {}) => console.log(JSON.stringify({ step, ...detail }));

// Runs main({ httpUrl, wsUrl, agentId, token }); exits 0 after {"done": true} if it resolves
// and no warning was logged, 1 after {"error": ...} otherwise.
export async function runFlow(main) {
  if (!httpUrl || !wsUrl || !agentId || !token) {
    process.stdout.write("usage: ENVERIF_TOKEN=... node NAME_flow.mjs HTTP_URL WS_URL AGENT_ID\n");
    process.exit(2);
  }
  try {
    await main({ httpUrl, wsUrl, agentId, token });
    if (warnings.length) throw new Error(`the client logged warnings: ${JSON.stringify(warnings)}`);
    console.log(JSON.stringify({ done: true }));
    process.exit(0);
  } catch (error) {
    console.log(JSON.stringify({ error: String(error?.stack ?? error), warnings }));
    process.exit(1);
  }
}
