"""Tests of pglease.py against a real Postgres: PGLEASE_TEST_DATABASE_URL, else
127.0.0.1:5432 as postgres. Each test gets a database of its own, a copy of
a template with migrations/*.up.sql applied in order, dropped at the end.

Run: /usr/bin/python3 -m unittest -v   (from examples/python; make test-clients)
"""

import os
import pathlib
import threading
import time
import unittest
import uuid

import psycopg
from psycopg.conninfo import make_conninfo

import pglease

ADMIN = os.environ.get("PGLEASE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MIGRATIONS = sorted((pathlib.Path(__file__).parent / "../../migrations").glob("*.up.sql"))


TEMPLATE = "pglease_py_" + uuid.uuid4().hex[:12]


def setUpModule():
    """The schema, applied once to a template that each test's database copies."""
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{TEMPLATE}"')
    unittest.addModuleCleanup(PgleaseTest.drop, TEMPLATE)
    with psycopg.connect(make_conninfo(ADMIN, dbname=TEMPLATE), autocommit=True) as conn:
        for path in MIGRATIONS:
            conn.execute(path.read_text())


class PgleaseTest(unittest.TestCase):
    def setUp(self):
        db = TEMPLATE + "_" + uuid.uuid4().hex[:8]
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{db}" TEMPLATE "{TEMPLATE}"')
        self.addCleanup(self.drop, db)
        self.url = make_conninfo(ADMIN, dbname=db)
        self.conn = self.connect()

    @staticmethod
    def drop(db):
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    def connect(self):
        conn = psycopg.connect(self.url, autocommit=True)
        self.addCleanup(conn.close)
        return conn

    def fence_row(self, name):
        return self.conn.execute(
            "SELECT holder, fence, state FROM pglease.lease_status WHERE name = %s", (name,)).fetchone()


class LeaseTest(PgleaseTest):
    def test_acquire_renew_release(self):
        before = time.monotonic()
        lease = pglease.try_acquire(self.conn, "job", "a", 30)
        self.assertEqual(lease.fence, 1)
        self.assertTrue(before + 27 <= lease.deadline <= time.monotonic() + 27, "deadline = send time + TTL - TTL/10")
        with self.assertRaises(pglease.Held) as refused:
            pglease.try_acquire(self.conn, "job", "b", 30)
        self.assertEqual(refused.exception.holder, "a")
        self.assertGreater(refused.exception.retry_in, 0)
        # A retry after a lost reply is the same tenure: same fence.
        self.assertEqual(pglease.try_acquire(self.conn, "job", "a", 30).fence, 1)
        first = lease.deadline
        pglease.renew(self.conn, lease)
        self.assertGreaterEqual(lease.deadline, first)
        self.assertTrue(pglease.release(self.conn, lease))
        self.assertFalse(pglease.release(self.conn, lease), "a second release finds the tenure over")
        with self.assertRaises(pglease.Lost):
            pglease.renew(self.conn, lease)
        self.assertEqual(pglease.try_acquire(self.conn, "job", "b", 30).fence, 2, "the fence never goes back")

    def test_fenced_writes_commit_only_while_current(self):
        self.conn.execute("CREATE TABLE reports (fence bigint)")
        lease = pglease.try_acquire(self.conn, "job", "a", 30)
        with pglease.fenced(self.conn, lease) as tx:
            tx.execute("INSERT INTO reports VALUES (%s)", (lease.fence,))
        pglease.release(self.conn, lease)
        pglease.try_acquire(self.connect(), "job", "b", 30)
        with self.assertRaises(pglease.Lost) as stale:
            with pglease.fenced(self.conn, lease) as tx:
                tx.execute("INSERT INTO reports VALUES (%s)", (lease.fence,))
        self.assertIn("current fence is 2", str(stale.exception))
        self.assertEqual(self.conn.execute("SELECT array_agg(fence) FROM reports").fetchone()[0], [1])
        with self.assertRaises(psycopg.errors.InvalidParameterValue):
            with pglease.fenced(self.conn, pglease.Lease("job", "b", -1, 30, 0)):
                pass

    def test_fenced_transaction_paused_past_the_ttl_does_not_commit(self):
        self.conn.execute("CREATE TABLE reports (fence bigint)")
        lease = pglease.try_acquire(self.conn, "job", "a", 1)
        # The server ends the stalled session (or, on a slow machine, assert_held
        # already finds the tenure over): either way nothing commits.
        with self.assertRaises((psycopg.OperationalError, pglease.Lost)):
            with pglease.fenced(self.conn, lease) as tx:
                tx.execute("INSERT INTO reports VALUES (%s)", (lease.fence,))
                threading.Event().wait(2.5)  # the pause: GC, a stopped VM, a cut-off network
        other = self.connect()
        self.assertEqual(pglease.try_acquire(other, "job", "b", 30).fence, 2)
        self.assertEqual(other.execute("SELECT count(*) FROM reports").fetchone()[0], 0)

    def test_acquire_wakes_at_release(self):
        holder = self.connect()
        held = pglease.try_acquire(holder, "job", "a", 60)

        def release_once(refusal):
            self.assertEqual(refusal.holder, "a")
            pglease.release(holder, held)

        start = time.monotonic()
        lease = pglease.acquire(self.conn, "job", "b", 60, timeout=30, on_refused=release_once)
        self.assertEqual(lease.fence, 2)
        self.assertLess(time.monotonic() - start, 30, "woken by the release's NOTIFY, not the 60 s expiry")

    def test_acquire_wakes_at_expiry(self):
        pglease.try_acquire(self.connect(), "job", "a", 0.3)
        lease = pglease.acquire(self.conn, "job", "b", 30, timeout=30)
        self.assertEqual(lease.fence, 2)

    def test_acquire_times_out(self):
        pglease.try_acquire(self.connect(), "job", "a", 60)
        start = time.monotonic()
        with self.assertRaises(TimeoutError):
            pglease.acquire(self.conn, "job", "b", 60, timeout=0.3)
        self.assertGreaterEqual(time.monotonic() - start, 0.3)
        self.assertEqual(self.conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone()[0], 0)


class HoldTest(PgleaseTest):
    def test_hold_renews_while_the_body_runs(self):
        with pglease.hold(self.url, "job", "a", 1.5) as lease:
            self.assertFalse(lease.ended.wait(3), "held for two TTLs: only if the renewals ran")
            self.assertTrue(lease.live())
            self.assertEqual(self.fence_row("job"), ("a", 1, "held"))
        self.assertEqual(self.fence_row("job"), (None, 1, "free"), "released at the end")

    def test_hold_reports_a_refused_renewal(self):
        with self.assertRaises(pglease.Lost):
            with pglease.hold(self.url, "job", "a", 1.5) as lease:
                self.conn.execute("SELECT pglease.force_release('job')")
                self.assertTrue(lease.ended.wait(30), "the refused renewal ends the tenure")
                self.assertFalse(lease.live())

    def test_hold_ends_at_the_deadline_without_replies(self):
        with self.assertRaises(pglease.Lost):
            with pglease.hold(self.url, "job", "a", 0.6) as lease:
                self.conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                  " WHERE datname = current_database() AND pid <> pg_backend_pid()")
                self.assertTrue(lease.ended.wait(30), "no renewal gets through: the deadline passes")
                self.assertEqual(self.fence_row("job")[:2], ("a", 1), "the server was never told")

    def test_hold_ends_when_the_tenure_ended_unnoticed(self):
        with self.assertRaises(pglease.Lost):
            with pglease.hold(self.url, "job", "a", 30) as lease:
                self.conn.execute("SELECT pglease.force_release('job')")
                self.assertTrue(lease.live(), "nothing told the holder yet")

    def test_hold_releases_when_the_body_fails(self):
        with self.assertRaises(ZeroDivisionError):
            with pglease.hold(self.url, "job", "a", 30):
                1 / 0
        self.assertEqual(self.fence_row("job"), (None, 1, "free"))

    def test_hold_refused(self):
        pglease.try_acquire(self.conn, "job", "a", 60)
        with self.assertRaises(pglease.Held):
            with pglease.hold(self.url, "job", "b", 60):
                self.fail("the body must not run")


class SlotTest(PgleaseTest):
    def test_claim_slot(self):
        a = pglease.claim_slot(self.conn, "gpu", "a", 2, 30)
        b = pglease.claim_slot(self.conn, "gpu", "b", 2, 30)
        self.assertEqual({a.slot, b.slot}, {1, 2})
        with self.assertRaises(pglease.Held) as full:
            pglease.claim_slot(self.conn, "gpu", "c", 2, 30)
        self.assertIn("2 of 2", str(full.exception))
        self.assertTrue(pglease.release_slot(self.conn, a))
        self.assertFalse(pglease.release_slot(self.conn, a))
        self.assertEqual(pglease.claim_slot(self.conn, "gpu", "c", 2, 30).slot, a.slot)


if __name__ == "__main__":
    unittest.main()
