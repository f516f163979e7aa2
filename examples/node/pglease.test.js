// Tests of pglease.js against a real Postgres: PGLEASE_TEST_DATABASE_URL (a
// postgres:// URL), else 127.0.0.1:5432 as postgres. Each test gets a
// database of its own, a copy of a template with migrations/*.up.sql applied
// in order, dropped at the end.
//
// Run: npm test   (from examples/node, after npm ci; make test-clients)
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import pg from 'pg';
import * as pglease from './pglease.js';

const admin = process.env.PGLEASE_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const migrations = new URL('../../migrations/', import.meta.url);

const dbURL = (db) => Object.assign(new URL(admin), { pathname: `/${db}` }).href;

// The schema, applied once to a template that each test's database copies.
const template = `pglease_node_${randomBytes(6).toString('hex')}`;
const root = new pg.Client(admin);
before(async () => {
  await root.connect();
  await root.query(`CREATE DATABASE "${template}"`);
  const conn = new pg.Client(dbURL(template));
  await conn.connect();
  for (const file of readdirSync(migrations).filter((f) => f.endsWith('.up.sql')).sort()) {
    await conn.query(readFileSync(new URL(file, migrations), 'utf8'));
  }
  await conn.end();
});
after(async () => {
  await root.query(`DROP DATABASE IF EXISTS "${template}" WITH (FORCE)`);
  await root.end();
});

// newDatabase creates a database with the schema, dropped after t.
async function newDatabase(t) {
  const db = `${template}_${randomBytes(4).toString('hex')}`;
  await root.query(`CREATE DATABASE "${db}" TEMPLATE "${template}"`);
  t.after(() => root.query(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`));
  return { url: dbURL(db), conn: await connect(t, dbURL(db)) };
}

async function connect(t, url) {
  const client = new pg.Client(url);
  client.on('error', () => {}); // tests kill backends on purpose
  await client.connect();
  t.after(() => client.end());
  return client;
}

async function status(conn, name) {
  const { rows: [r] } = await conn.query('SELECT holder, fence, state FROM pglease.lease_status WHERE name = $1', [name]);
  return r;
}

test('acquire, renew, release', async (t) => {
  const { conn } = await newDatabase(t);
  const before = performance.now() / 1000;
  const lease = await pglease.tryAcquire(conn, 'job', 'a', 30);
  assert.equal(lease.fence, '1');
  assert.ok(before + 27 <= lease.deadline && lease.deadline <= performance.now() / 1000 + 27,
    'deadline = send time + TTL - TTL/10');
  await assert.rejects(pglease.tryAcquire(conn, 'job', 'b', 30), (err) => {
    assert.ok(err instanceof pglease.HeldError);
    assert.equal(err.holder, 'a');
    assert.ok(err.retryIn > 0);
    return true;
  });
  // A retry after a lost reply is the same tenure: same fence.
  assert.equal((await pglease.tryAcquire(conn, 'job', 'a', 30)).fence, '1');
  const first = lease.deadline;
  await pglease.renew(conn, lease);
  assert.ok(lease.deadline >= first);
  assert.equal(await pglease.release(conn, lease), true);
  assert.equal(await pglease.release(conn, lease), false, 'a second release finds the tenure over');
  await assert.rejects(pglease.renew(conn, lease), pglease.LostError);
  assert.equal((await pglease.tryAcquire(conn, 'job', 'b', 30)).fence, '2', 'the fence never goes back');
});

test('fenced writes commit only while the tenure is current', async (t) => {
  const { url, conn } = await newDatabase(t);
  await conn.query('CREATE TABLE reports (fence bigint)');
  const lease = await pglease.tryAcquire(conn, 'job', 'a', 30);
  const insert = (tx) => tx.query('INSERT INTO reports VALUES ($1)', [lease.fence]);
  await pglease.fenced(conn, lease, insert);
  await pglease.release(conn, lease);
  await pglease.tryAcquire(await connect(t, url), 'job', 'b', 30);
  await assert.rejects(pglease.fenced(conn, lease, insert), (err) => {
    assert.ok(err instanceof pglease.LostError);
    assert.match(err.message, /current fence is 2/);
    return true;
  });
  const { rows: [r] } = await conn.query('SELECT array_agg(fence) AS fences FROM reports');
  assert.deepEqual(r.fences, ['1']);
  await assert.rejects(pglease.fenced(conn, { ...lease, fence: -1 }, insert), { code: '22023' });
});

test('a fenced transaction paused past the TTL does not commit', async (t) => {
  const { url, conn } = await newDatabase(t);
  await conn.query('CREATE TABLE reports (fence bigint)');
  const lease = await pglease.tryAcquire(conn, 'job', 'a', 1);
  // The server ends the stalled session (or, on a slow machine, assert_held
  // already finds the tenure over): either way nothing commits.
  await assert.rejects(pglease.fenced(conn, lease, async (tx) => {
    await tx.query('INSERT INTO reports VALUES ($1)', [lease.fence]);
    await new Promise((resolve) => setTimeout(resolve, 2500)); // the pause: GC, a stopped VM, a cut-off network
  }));
  const other = await connect(t, url);
  assert.equal((await pglease.tryAcquire(other, 'job', 'b', 30)).fence, '2');
  const { rows: [r] } = await other.query('SELECT count(*)::int AS n FROM reports');
  assert.equal(r.n, 0);
});

test('acquire wakes at the release', async (t) => {
  const { url, conn } = await newDatabase(t);
  const holder = await connect(t, url);
  const held = await pglease.tryAcquire(holder, 'job', 'a', 60);
  const start = performance.now();
  const lease = await pglease.acquire(conn, 'job', 'b', 60, {
    signal: AbortSignal.timeout(30_000),
    onRefused: async (err) => {
      assert.equal(err.holder, 'a');
      await pglease.release(holder, held);
    },
  });
  assert.equal(lease.fence, '2');
  assert.ok(performance.now() - start < 30_000, 'woken by the release NOTIFY, not the 60 s expiry');
});

test('acquire wakes at the expiry', async (t) => {
  const { url, conn } = await newDatabase(t);
  await pglease.tryAcquire(await connect(t, url), 'job', 'a', 0.3);
  const lease = await pglease.acquire(conn, 'job', 'b', 30, { signal: AbortSignal.timeout(30_000) });
  assert.equal(lease.fence, '2');
});

test('acquire times out', async (t) => {
  const { url, conn } = await newDatabase(t);
  await pglease.tryAcquire(await connect(t, url), 'job', 'a', 60);
  await assert.rejects(pglease.acquire(conn, 'job', 'b', 60, { signal: AbortSignal.timeout(300) }),
    { name: 'TimeoutError' });
  const { rows: [r] } = await conn.query('SELECT count(*)::int AS n FROM pg_listening_channels()');
  assert.equal(r.n, 0);
});

test('withLease renews while fn runs', async (t) => {
  const { url, conn } = await newDatabase(t);
  const result = await pglease.withLease(url, 'job', 'a', 1.5, async (lease, signal) => {
    // Two TTLs: held only if the renewals ran.
    const waited = await Promise.race([once(signal, 'abort').then(() => 'lost'),
      new Promise((resolve) => setTimeout(resolve, 3000, 'held'))]);
    assert.equal(waited, 'held');
    assert.ok(pglease.live(lease));
    assert.deepEqual(await status(conn, 'job'), { holder: 'a', fence: '1', state: 'held' });
    return 'done';
  });
  assert.equal(result, 'done');
  assert.deepEqual(await status(conn, 'job'), { holder: null, fence: '1', state: 'free' }, 'released at the end');
});

test('withLease aborts at a refused renewal', async (t) => {
  const { url, conn } = await newDatabase(t);
  await assert.rejects(pglease.withLease(url, 'job', 'a', 1.5, async (lease, signal) => {
    await conn.query("SELECT pglease.force_release('job')");
    await once(signal, 'abort');
    assert.match(signal.reason.message, /renewal refused/);
  }), pglease.LostError);
});

test('withLease aborts at the deadline when no reply comes', async (t) => {
  const { url, conn } = await newDatabase(t);
  await assert.rejects(pglease.withLease(url, 'job', 'a', 0.6, async (lease, signal) => {
    await conn.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()`);
    await once(signal, 'abort');
    assert.match(signal.reason.message, /no renewal before the deadline/);
    assert.deepEqual(await status(conn, 'job'), { holder: 'a', fence: '1', state: 'held' }, 'the server was never told');
  }), pglease.LostError);
});

test('withLease ends when the tenure expired unnoticed', async (t) => {
  const { url, conn } = await newDatabase(t);
  await assert.rejects(pglease.withLease(url, 'job', 'a', 30, async (lease) => {
    await conn.query("SELECT pglease.force_release('job')");
    assert.ok(pglease.live(lease), 'nothing told the holder yet');
  }), /ended before the release/);
});

test('withLease releases when fn fails', async (t) => {
  const { url, conn } = await newDatabase(t);
  await assert.rejects(pglease.withLease(url, 'job', 'a', 30, () => { throw new Error('boom'); }), /boom/);
  assert.deepEqual(await status(conn, 'job'), { holder: null, fence: '1', state: 'free' });
});

test('withLease refused', async (t) => {
  const { url, conn } = await newDatabase(t);
  await pglease.tryAcquire(conn, 'job', 'a', 60);
  await assert.rejects(pglease.withLease(url, 'job', 'b', 60, () => assert.fail('fn must not run')),
    pglease.HeldError);
});

test('claim a slot', async (t) => {
  const { conn } = await newDatabase(t);
  const a = await pglease.claimSlot(conn, 'gpu', 'a', 2, 30);
  const b = await pglease.claimSlot(conn, 'gpu', 'b', 2, 30);
  assert.deepEqual(new Set([a.slot, b.slot]), new Set([1, 2]));
  await assert.rejects(pglease.claimSlot(conn, 'gpu', 'c', 2, 30), /2 of 2/);
  assert.equal(await pglease.releaseSlot(conn, a), true);
  assert.equal(await pglease.releaseSlot(conn, a), false);
  assert.equal((await pglease.claimSlot(conn, 'gpu', 'c', 2, 30)).slot, a.slot);
});
