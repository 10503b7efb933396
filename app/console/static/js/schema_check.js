// The arguments editor's check before an EDIT is sent: the problems of a JSON value against
// a tool's JSON Schema (Query.tools), each with its path. It knows the keywords tools' schemas
// use (type, properties, required, additionalProperties, items, enum, const, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, minLength, maxLength, minItems, maxItems, pattern,
// anyOf, oneOf, allOf, $ref to #/$defs or #/definitions) and passes over any other: the server
// checks the arguments again with a full validator (docs/console.md, "Approvals").

const TYPES = {
  object: (v) => v !== null && typeof v === 'object' && !Array.isArray(v),
  array: Array.isArray,
  string: (v) => typeof v === 'string',
  number: (v) => typeof v === 'number',
  integer: Number.isInteger,
  boolean: (v) => typeof v === 'boolean',
  null: (v) => v === null,
};

const MAX_DEPTH = 64; // a schema that refers to itself stops here rather than looping

/** Problems of `value` against `schema`, e.g. ['/key: must be a string']; [] when it fits. */
export function schemaProblems(schema, value) {
  const problems = [];
  check(schema, value, '', schema, problems, 0);
  return problems;
}

function check(schema, value, path, root, problems, depth) {
  if (schema === true || schema === undefined || depth > MAX_DEPTH) return;
  const at = path || '/';
  if (schema === false) { problems.push(`${at}: no value is allowed here`); return; }
  if (typeof schema !== 'object' || schema === null) return;
  if (typeof schema.$ref === 'string') check(resolve(root, schema.$ref), value, path, root, problems, depth + 1);
  const types = schema.type === undefined ? [] : [].concat(schema.type);
  if (types.length && !types.some((t) => TYPES[t]?.(value) ?? true)) {
    problems.push(`${at}: must be ${types.join(' or ')}`);
    return;
  }
  if ('const' in schema && !same(schema.const, value)) problems.push(`${at}: must be ${JSON.stringify(schema.const)}`);
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => same(e, value))) {
    problems.push(`${at}: must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}`);
  }
  if (typeof value === 'number') numberProblems(schema, value, at, problems);
  if (typeof value === 'string') stringProblems(schema, value, at, problems);
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) problems.push(`${at}: needs at least ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) problems.push(`${at}: takes at most ${schema.maxItems} items`);
    if (schema.items && typeof schema.items === 'object') {
      value.forEach((item, i) => check(schema.items, item, `${path}/${i}`, root, problems, depth + 1));
    }
  }
  if (TYPES.object(value)) objectProblems(schema, value, path, root, problems, depth);
  for (const part of schema.allOf ?? []) check(part, value, path, root, problems, depth + 1);
  for (const [keyword, want] of [['anyOf', (n) => n >= 1], ['oneOf', (n) => n === 1]]) {
    if (!Array.isArray(schema[keyword])) continue;
    const fits = schema[keyword].filter((part) => schemaProblems({ ...part, $defs: root.$defs, definitions: root.definitions }, value).length === 0).length;
    if (!want(fits)) problems.push(`${at}: must match ${keyword === 'oneOf' ? 'exactly one' : 'at least one'} of its allowed forms`);
  }
}

function numberProblems(schema, value, at, problems) {
  if (schema.minimum !== undefined && value < schema.minimum) problems.push(`${at}: must be at least ${schema.minimum}`);
  if (schema.maximum !== undefined && value > schema.maximum) problems.push(`${at}: must be at most ${schema.maximum}`);
  if (typeof schema.exclusiveMinimum === 'number' && value <= schema.exclusiveMinimum) problems.push(`${at}: must be more than ${schema.exclusiveMinimum}`);
  if (typeof schema.exclusiveMaximum === 'number' && value >= schema.exclusiveMaximum) problems.push(`${at}: must be less than ${schema.exclusiveMaximum}`);
}

function stringProblems(schema, value, at, problems) {
  const length = [...value].length; // code points, as JSON Schema counts
  if (schema.minLength !== undefined && length < schema.minLength) problems.push(`${at}: needs at least ${schema.minLength} characters`);
  if (schema.maxLength !== undefined && length > schema.maxLength) problems.push(`${at}: takes at most ${schema.maxLength} characters`);
  if (typeof schema.pattern === 'string') {
    let pattern = null;
    try { pattern = new RegExp(schema.pattern, 'u'); } catch { /* a pattern JS cannot read: the server judges */ }
    if (pattern && !pattern.test(value)) problems.push(`${at}: must match ${schema.pattern}`);
  }
}

function objectProblems(schema, value, path, root, problems, depth) {
  const properties = schema.properties ?? {};
  for (const key of schema.required ?? []) {
    if (!(key in value)) problems.push(`${path}/${key}: is required`);
  }
  for (const [key, item] of Object.entries(value)) {
    if (key in properties) check(properties[key], item, `${path}/${key}`, root, problems, depth + 1);
    else if (schema.additionalProperties === false) problems.push(`${path}/${key}: is not an argument of this tool`);
    else if (typeof schema.additionalProperties === 'object') check(schema.additionalProperties, item, `${path}/${key}`, root, problems, depth + 1);
  }
}

function resolve(root, ref) {
  const match = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref);
  return match ? root?.[match[1]]?.[decodeURIComponent(match[2])] : undefined;
}

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}
