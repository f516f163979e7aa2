// pglease from Node.js: leases, fenced writes and slots over node-postgres.
//
// An example to read and copy (docs/sql-clients.md explains each rule), not
// a package. Functions take a connected pg.Client that they do not end; TTLs
// are seconds. Fences are bigint, which pg returns as strings: pass them back
// unchanged.
import pg from 'pg';

// HeldError: the call was refused, someone else held the lease or the scope
// was full. holder and retryIn (seconds) describe what the server saw when
// it ran the call; that is no proof the tenure is still live: retry, never
// act on it.
export class HeldError extends Error {
  constructor(name, holder, retryIn) {
    super(`${name} is held by ${holder}: retry in ${retryIn}s or at a release`);
    this.name = 'HeldError';
    this.holder = holder;
    this.retryIn = retryIn;
  }
}

// LostError: the tenure is over (renewal refused, deadline passed, or a
// fenced write refused).
export class LostError extends Error {
  name = 'LostError';
}

// The monotonic clock, in seconds.
const now = () => performance.now() / 1000;

// The local deadline of a grant or renewal sent at monotonic time sent.
export const deadline = (sent, ttl) => sent + ttl - ttl / 10;

// A lease is live while its local deadline is ahead.
export const live = (lease) => now() < lease.deadline;

// tryAcquire takes the lease now or throws HeldError. Retrying after a lost
// reply is safe: the same holder gets the same tenure back.
export async function tryAcquire(client, name, holder, ttl) {
  const sent = now();
  const { rows: [r] } = await client.query(
    `SELECT acquired, fence, holder, extract(epoch FROM expires_in)::float8 AS expires_in
     FROM pglease.acquire($1, $2, make_interval(secs => $3))`, [name, holder, ttl]);
  if (!r.acquired) throw new HeldError(name, r.holder, r.expires_in);
  return { name, holder, fence: r.fence, ttl, deadline: deadline(sent, ttl) };
}

// renew extends the tenure for another TTL from now, or throws LostError.
export async function renew(client, lease) {
  const sent = now();
  const { rows: [r] } = await client.query(
    'SELECT renewed FROM pglease.renew($1, $2, $3, make_interval(secs => $4))',
    [lease.name, lease.holder, lease.fence, lease.ttl]);
  if (!r.renewed) throw new LostError(`${lease.name}: renewal of fence ${lease.fence} refused: the tenure is over`);
  lease.deadline = deadline(sent, lease.ttl);
}

// release ends the tenure; false means it had already ended.
export async function release(client, lease) {
  const { rows: [r] } = await client.query('SELECT released FROM pglease.release($1, $2, $3)',
    [lease.name, lease.holder, lease.fence]);
  return r.released;
}

// acquire waits for the lease until signal aborts (AbortSignal.timeout(ms)),
// then throws signal.reason. It LISTENs first, so that no release between a
// refusal and the wait is missed; a notification only means "retry now",
// whatever its payload. onRefused sees each refusal.
export async function acquire(client, name, holder, ttl, { signal, onRefused } = {}) {
  let woke = false;
  let wake = () => {};
  const onNotification = () => { woke = true; wake(); };
  client.on('notification', onNotification);
  await client.query('LISTEN pglease');
  try {
    for (;;) {
      woke = false;
      try {
        return await tryAcquire(client, name, holder, ttl);
      } catch (err) {
        if (!(err instanceof HeldError)) throw err;
        await onRefused?.(err);
        signal?.throwIfAborted();
        if (!woke) {
          await new Promise((resolve) => {
            const timer = setTimeout(resolve, err.retryIn * 1000);
            wake = () => { clearTimeout(timer); resolve(); };
            signal?.addEventListener('abort', wake, { once: true });
          });
          signal?.removeEventListener('abort', wake);
        }
      }
    }
  } finally {
    client.removeListener('notification', onNotification);
    await client.query('UNLISTEN pglease');
  }
}

// fenced runs fn(client) in a transaction that commits only while lease's
// tenure is current: assert_held locks the lease row until COMMIT, so no
// takeover commits in between: a transaction paused past the TTL commits
// before the next tenure, or, ended by the server's timeouts, not at all.
// Throws LostError when the fence is stale.
export async function fenced(client, lease, fn) {
  await client.query('BEGIN');
  try {
    await client.query("SELECT set_config('idle_in_transaction_session_timeout', $1, true)",
      [`${Math.ceil(lease.ttl * 1000)}ms`]);
    await client.query('SELECT pglease.assert_held($1, $2)', [lease.name, lease.fence]);
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {}); // a broken connection has no transaction left
    if (err.code === 'PGL01') throw new LostError(err.message, { cause: err });
    throw err;
  }
}

// withLease keeps the lease while fn(lease, signal) runs: renewed every
// TTL/3 on a connection of its own (config is pg.Client's), released at the
// end. signal aborts the moment the tenure is no longer certain: a renewal
// refused, or the local deadline passed without one. Throws HeldError when
// the lease is taken, and LostError at the end if the tenure ended meanwhile.
export async function withLease(config, name, holder, ttl, fn) {
  const client = new pg.Client(config);
  client.on('error', () => {}); // a broken connection shows as failed renewals
  await client.connect();
  try {
    const lease = await tryAcquire(client, name, holder, ttl);
    const lost = new AbortController();
    const end = (why) => lost.abort(new LostError(`${name}: the tenure of fence ${lease.fence} ended: ${why}`));
    let deadlineTimer;
    const arm = () => {
      clearTimeout(deadlineTimer);
      deadlineTimer = setTimeout(end, (lease.deadline - now()) * 1000, 'no renewal before the deadline');
    };
    let stopped = false;
    let ticker;
    const tick = async () => {
      const next = now() + ttl / 3; // a slow reply must not delay the next renewal
      try {
        await renew(client, lease);
        arm();
      } catch (err) {
        if (err instanceof LostError) end('renewal refused');
        // Anything else is a lost reply: the deadline stands, retry at the next tick.
      }
      if (!stopped && !lost.signal.aborted) ticker = setTimeout(tick, Math.max(0, next - now()) * 1000);
    };
    arm();
    ticker = setTimeout(tick, (ttl / 3) * 1000);
    try {
      return await fn(lease, lost.signal);
    } finally {
      stopped = true;
      clearTimeout(ticker);
      clearTimeout(deadlineTimer);
      if (!lost.signal.aborted && !(live(lease) && await release(client, lease))) end('it ended before the release');
      lost.signal.throwIfAborted();
    }
  } finally {
    await client.end();
  }
}

// claimSlot takes one of capacity slots of scope, or throws HeldError when
// the scope is full.
export async function claimSlot(client, scope, holder, capacity, ttl) {
  const sent = now();
  const { rows: [r] } = await client.query(
    `SELECT claimed, slot, fence, in_use, extract(epoch FROM retry_in)::float8 AS retry_in
     FROM pglease.claim_slot($1, $2, $3, make_interval(secs => $4))`, [scope, holder, capacity, ttl]);
  if (!r.claimed) throw new HeldError(scope, `${r.in_use} of ${capacity} holders`, r.retry_in);
  return { name: scope, slot: r.slot, holder, fence: r.fence, ttl, deadline: deadline(sent, ttl) };
}

// releaseSlot gives the slot back; false means its tenure had already ended.
export async function releaseSlot(client, lease) {
  const { rows: [r] } = await client.query('SELECT released FROM pglease.release_slot($1, $2, $3, $4)',
    [lease.name, lease.slot, lease.holder, lease.fence]);
  return r.released;
}
