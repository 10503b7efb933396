// An agent's schedules: the next fire times and the firings of each, and (operators and
// admins) create, edit, pause and resume. Cron expressions are read in the schedule's
// timezone by the server; the console only shows what it computed.

import { gql, session } from './api.js';
import { act, errorSlot, field, fill, h, json, parseJson, runLink, settled, table, when } from './dom.js';

export const SCHEDULE_FIELDS = `id cron timezone enabled overlapPolicy nextFireAt lastFiredAt lastSkipReason input
  nextFireTimes(count: 3)
  firings(first: 5) { edges { node { id fireAt outcome reason missed run { id status } } } }`;

const CREATE = `mutation CreateSchedule($agentId: ID!, $input: CreateScheduleInput!) { createSchedule(agentId: $agentId, schedule: $input) { id } }`;
const UPDATE = `mutation UpdateSchedule($id: ID!, $input: UpdateScheduleInput!) { updateSchedule(id: $id, changes: $input) { id } }`;

export function schedulesSection(agent, changed) {
  const rows = agent.schedules.map((s) => scheduleRow(s, changed));
  return h('section', { 'aria-labelledby': 'schedules-h' },
    h('h2', { id: 'schedules-h' }, 'Schedules'),
    rows.length ? table(['Cron', 'Timezone', 'Enabled', 'Overlap', 'Next fire times', 'Firings', 'Input', ''],
      rows, { id: 'schedules' }) : h('p', {}, 'No schedules.'),
    session.canOperate ? scheduleForm('new-schedule', 'Add a schedule', {}, (input) =>
      gql(CREATE, { agentId: agent.id, input }), changed) : null);
}

function scheduleRow(s, changed) {
  const slot = errorSlot();
  const toggle = session.canOperate ? h('button', { type: 'button', onclick: async (event) => {
    if (await act(event.currentTarget, slot, () => gql(UPDATE, { id: s.id, input: { enabled: !s.enabled } }))) {
      await settled(changed, `Schedule ${s.cron} ${s.enabled ? 'paused' : 'resumed'}.`);
    }
  } }, s.enabled ? `Pause schedule ${s.cron}` : `Resume schedule ${s.cron}`) : null;
  const edit = session.canOperate ? h('details', {}, h('summary', {}, 'Edit'),
    scheduleForm(`edit-${s.id}`, `Edit schedule ${s.cron}`, s, (input) => gql(UPDATE, { id: s.id, input }), changed)) : null;
  const firings = s.firings.edges.map(({ node: f }) => h('li', {}, when(f.fireAt), ` ${f.outcome}`,
    f.missed ? ` (${f.missed} missed)` : '', f.reason ? `: ${f.reason}` : '',
    f.run ? [' ', runLink(f.run, `run ${f.run.status}`)] : null));
  return h('tr', { 'data-schedule': s.id },
    h('td', {}, h('code', {}, s.cron)), h('td', {}, s.timezone), h('td', {}, s.enabled ? 'yes' : 'no (paused)'),
    h('td', {}, s.overlapPolicy),
    h('td', {}, s.nextFireTimes.length ? h('ol', { class: 'times' }, s.nextFireTimes.map((t) => h('li', {}, when(t)))) : '—'),
    h('td', {}, firings.length ? h('ul', { class: 'firings' }, firings) : 'none yet'),
    h('td', {}, json(s.input)),
    h('td', {}, toggle, edit, slot.el));
}

function scheduleForm(prefix, label, current, send, changed) {
  const slot = errorSlot();
  const cron = h('input', { id: `${prefix}-cron`, value: current.cron ?? '', required: true, autocomplete: 'off' });
  const timezone = h('input', { id: `${prefix}-tz`, value: current.timezone ?? 'UTC' });
  const overlap = h('select', { id: `${prefix}-overlap` }, ['SKIP', 'ALLOW'].map((o) =>
    h('option', { value: o, selected: (current.overlapPolicy ?? 'SKIP') === o }, o)));
  const input = h('textarea', { id: `${prefix}-input`, rows: 2, spellcheck: false },
    current.input === undefined ? '' : JSON.stringify(current.input));
  return h('form', { class: 'inline', 'aria-label': label, onsubmit: async (event) => {
    event.preventDefault();
    const done = await act(event.submitter, slot, () => send({
      cron: cron.value.trim(), timezone: timezone.value.trim() || 'UTC', overlapPolicy: overlap.value,
      input: parseJson(input.value, 'input'),
    }));
    if (done) await settled(changed, `Schedule ${cron.value.trim()} ${current.id ? 'saved' : 'added'}.`);
  } },
  field('Cron', cron), field('Timezone', timezone), field('Overlap', overlap), field('Input (JSON)', input),
  h('button', { type: 'submit', class: 'primary' }, current.id ? 'Save schedule' : 'Add schedule'),
  slot.el);
}
