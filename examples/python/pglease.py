"""pglease from Python: leases, fenced writes and slots over psycopg 3.

An example to read and copy (docs/sql-clients.md explains each rule), not a
package. Every function takes an autocommit psycopg.Connection that it does
not close; TTLs and timeouts are seconds.
"""

import contextlib
import dataclasses
import datetime
import select
import threading
import time

import psycopg


class Held(Exception):
    """The call was refused: someone else held the lease, or the scope was full.

    holder and retry_in describe what the server saw when it ran the call. It
    is not proof that this tenure is still live: retry, never act on it.
    """

    def __init__(self, name, holder, retry_in):
        super().__init__(f"{name} is held by {holder}: retry in {retry_in:.3f}s or at a release")
        self.holder, self.retry_in = holder, retry_in


class Lost(Exception):
    """The tenure is over (renewal refused, deadline passed, or a fenced write refused)."""


@dataclasses.dataclass
class Lease:
    """A granted tenure: deadline is time.monotonic() seconds, not the server's clock."""

    name: str
    holder: str
    fence: int
    ttl: float
    deadline: float
    slot: int | None = None  # set for slots: the lease's name is then the scope
    ended: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)

    def live(self):
        """Whether the local deadline, send time + TTL - margin, is still ahead."""
        return not self.ended.is_set() and time.monotonic() < self.deadline


def deadline(sent, ttl):
    """The local deadline of a grant or renewal sent at monotonic time sent."""
    return sent + ttl - ttl / 10


def interval(seconds):
    return datetime.timedelta(seconds=seconds)


def try_acquire(conn, name, holder, ttl):
    """Take the lease now or raise Held. Retrying after a lost reply is safe."""
    sent = time.monotonic()
    acquired, fence, who, expires_in = conn.execute(
        "SELECT acquired, fence, holder, expires_in FROM pglease.acquire(%s, %s, %s)",
        (name, holder, interval(ttl))).fetchone()
    if not acquired:
        raise Held(name, who, expires_in.total_seconds())
    return Lease(name, holder, fence, ttl, deadline(sent, ttl))


def renew(conn, lease):
    """Extend the tenure for another TTL from now, or raise Lost."""
    sent = time.monotonic()
    (renewed,) = conn.execute(
        "SELECT renewed FROM pglease.renew(%s, %s, %s, %s)",
        (lease.name, lease.holder, lease.fence, interval(lease.ttl))).fetchone()
    if not renewed:
        raise Lost(f"{lease.name}: renewal of fence {lease.fence} refused: the tenure is over")
    lease.deadline = deadline(sent, lease.ttl)


def release(conn, lease):
    """End the tenure; False means it had already ended."""
    return conn.execute("SELECT released FROM pglease.release(%s, %s, %s)",
                        (lease.name, lease.holder, lease.fence)).fetchone()[0]


def acquire(conn, name, holder, ttl, timeout, on_refused=None):
    """Wait up to timeout seconds for the lease, then raise TimeoutError.

    LISTEN first, so that no release between a refusal and the wait is missed;
    a notification only means "retry now", whatever its payload.
    """
    woke = threading.Event()
    handler = lambda _: woke.set()  # noqa: E731
    conn.add_notify_handler(handler)
    conn.execute("LISTEN pglease")
    end = time.monotonic() + timeout
    try:
        while True:
            woke.clear()
            try:
                return try_acquire(conn, name, holder, ttl)
            except Held as held:
                if on_refused:
                    on_refused(held)
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{name}: still held by {held.holder} after {timeout}s") from held
                wait = max(0, min(held.retry_in, left))
                if not woke.is_set() and select.select([conn.fileno()], [], [], wait)[0]:
                    conn.execute("SELECT")  # reads the notification
    finally:
        conn.execute("UNLISTEN pglease")
        conn.remove_notify_handler(handler)


@contextlib.contextmanager
def fenced(conn, lease):
    """A transaction whose writes commit only while lease's tenure is current.

    assert_held locks the lease row until COMMIT, so no takeover commits in
    between: a transaction paused past the TTL commits before the next tenure,
    or, ended by the server's timeouts, not at all. Lost when stale.
    """
    with conn.transaction():
        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                     (f"{int(lease.ttl * 1000)}ms",))
        try:
            conn.execute("SELECT pglease.assert_held(%s, %s)", (lease.name, lease.fence))
        except psycopg.Error as e:
            if e.sqlstate == "PGL01":
                raise Lost(e.diag.message_primary) from e
            raise
        yield conn


@contextlib.contextmanager
def hold(conninfo, name, holder, ttl):
    """Keep the lease while the with-body runs: renewed every TTL/3 on a
    connection of its own, released at the end. Raises Held when it is taken,
    and Lost at the end if the tenure ended meanwhile. The body checks
    lease.live() before each side effect (lease.ended is set within TTL/3 of
    the end, for waiting) and fences its writes."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        lease = try_acquire(conn, name, holder, ttl)
        stop = threading.Event()

        def renewer():
            next_at = time.monotonic() + ttl / 3
            while not stop.wait(max(0, next_at - time.monotonic())):
                next_at = time.monotonic() + ttl / 3  # a slow reply must not delay the next renewal
                try:
                    renew(conn, lease)
                except Lost:
                    lease.ended.set()
                except psycopg.OperationalError:
                    pass  # a lost reply: the deadline stands, retry at the next tick
                if not lease.live():
                    lease.ended.set()
                    return

        thread = threading.Thread(target=renewer, daemon=True)
        thread.start()
        try:
            yield lease
        finally:
            stop.set()
            thread.join()
            released = lease.live() and release(conn, lease)
        if not released:
            raise Lost(f"{name}: the tenure of fence {lease.fence} ended while the body ran")


def claim_slot(conn, scope, holder, capacity, ttl):
    """Take one of capacity slots of scope, or raise Held when it is full."""
    sent = time.monotonic()
    claimed, slot, fence, in_use, retry_in = conn.execute(
        "SELECT claimed, slot, fence, in_use, retry_in FROM pglease.claim_slot(%s, %s, %s, %s)",
        (scope, holder, capacity, interval(ttl))).fetchone()
    if not claimed:
        raise Held(scope, f"{in_use} of {capacity} holders", retry_in.total_seconds())
    return Lease(scope, holder, fence, ttl, deadline(sent, ttl), slot)


def release_slot(conn, lease):
    """Give the slot back; False means its tenure had already ended."""
    return conn.execute("SELECT released FROM pglease.release_slot(%s, %s, %s, %s)",
                        (lease.name, lease.slot, lease.holder, lease.fence)).fetchone()[0]
