/*
 * A model of the shard-group protocol (sql/functions/70_groups.sql,
 * shardgroup/), checked with spin: `make model`.
 *
 * N members share M shards. The server's state is what the SQL holds:
 * owner[s] and fence[s] (the shard's lease), asked[s] (release requested),
 * inTable[m] (the member row). group_sync is one atomic step, as the SQL
 * takes it under the group's row lock. A member's process knows what its
 * last sync returned (believe, bfence) and runs a shard's function
 * (running) only for a shard it believes it owns; it stops the function
 * before releasing, and a stalled member's functions stop at its local
 * deadline, which comes before the server's expiry (the safety margin:
 * encoded as the expiry's guard).
 *
 * The environment makes at most EVENTS events: a join, a graceful leave, a
 * crash (the process and its functions die; the server keeps its rows
 * until expiry), a stall (the member stops syncing; it may resume).
 *
 * Checked:
 *   safety:      never two members running one shard's function, and a
 *                running function's fence is the shard's current fence
 *                (the monitor's assert, every reachable state);
 *   convergence: once the events are over, eventually for ever every
 *                shard is owned by a live member and each live member owns
 *                floor(M/n) or ceil(M/n) (ltl converge, weak fairness).
 */
#define M 3
#define N 3
#ifndef EVENTS
#define EVENTS 3
#endif

#define OUT 0
#define MEMBER 1
#define LEAVING 2
#define CRASHED 3
#define STALLED 4

byte owner[M];       /* 0: none; else member + 1 */
byte fence[M];
bool asked[M];
bool inTable[N];
byte state[N];
bool believe[N * M];
byte bfence[N * M];
bool running[N * M];
byte events = 0;

#define idx(m, s) ((m) * M + (s))

inline countLive(n) {
    n = 0;
    for (j : 0 .. N - 1) { if :: inTable[j] -> n++ :: else fi }
}

/* group_sync of member m, atomically, as under the group lock. */
inline sync(m) {
    atomic {
        if
        :: state[m] != MEMBER -> goto synced   /* crashed, stalled or left meanwhile: no call */
        :: else
        fi;
        inTable[m] = true;
        countLive(n);
        lo = M / n; hi = (M + n - 1) / n;
        free = 0; pending = 0; deficit = 0;
        for (s : 0 .. M - 1) {
            if
            :: owner[s] == 0 -> free++
            :: owner[s] != 0 && (asked[s] || !inTable[owner[s] - 1]) -> pending++
            :: else
            fi
        }
        for (j : 0 .. N - 1) {
            if
            :: inTable[j] ->
                c = 0;
                for (s : 0 .. M - 1) { if :: owner[s] == j + 1 && !asked[s] -> c++ :: else fi }
                if :: c < lo -> deficit = deficit + lo - c :: else fi;
                if :: j == m -> cnt = c :: else fi
            :: else
            fi
        }
        need = 0;
        if :: cnt < lo -> need = lo - cnt :: else fi;
        extra = 0;
        if
        :: free > deficit && hi > cnt && hi > lo ->
            extra = hi - (cnt > lo -> cnt : lo);
            if :: extra > free - deficit -> extra = free - deficit :: else fi
        :: else
        fi;
        take = need + extra;
        if :: take > free -> take = free :: else fi;
        taken = 0;
        for (s : 0 .. M - 1) {
            if
            :: taken < take && owner[s] == 0 ->
                owner[s] = m + 1; fence[s] = (fence[s] + 1) % 4; asked[s] = false; taken++
            :: else
            fi
        }
        give = 0;
        if
        :: cnt > hi -> give = cnt - hi
        :: cnt <= hi && taken == 0 && cnt > lo && deficit > free + pending ->
            give = cnt - lo;
            if :: give > deficit - free - pending -> give = deficit - free - pending :: else fi
        :: else
        fi;
        s = M;
        do
        :: give > 0 && s > 0 ->
            s--;
            if :: owner[s] == m + 1 && !asked[s] -> asked[s] = true; give-- :: else fi
        :: else -> break
        od;
        for (s : 0 .. M - 1) {
            believe[idx(m, s)] = (owner[s] == m + 1);
            bfence[idx(m, s)] = (owner[s] == m + 1 -> fence[s] : 0)
        }
synced:
        n = 0; lo = 0; hi = 0; free = 0; pending = 0; deficit = 0; need = 0;
        take = 0; give = 0; taken = 0; cnt = 0; c = 0; j = 0; s = 0; extra = 0
    }
}

/* The member's local pass after a sync: stop and release what it must
 * hand over (or everything when leaving), start what it owns. */
inline pass(m) {
    for (s : 0 .. M - 1) {
        atomic {
            if
            :: believe[idx(m, s)] && (asked[s] || state[m] == LEAVING) && running[idx(m, s)] ->
                running[idx(m, s)] = false   /* cancelled; the function returned */
            :: believe[idx(m, s)] && !asked[s] && state[m] == MEMBER && !running[idx(m, s)] ->
                running[idx(m, s)] = true
            :: else
            fi
        }
        atomic {
            if
            :: believe[idx(m, s)] && (asked[s] || state[m] == LEAVING) && !running[idx(m, s)] ->
                /* group_release: only the member's own current tenure */
                if
                :: owner[s] == m + 1 && fence[s] == bfence[idx(m, s)] -> owner[s] = 0; asked[s] = false
                :: else
                fi;
                believe[idx(m, s)] = false; bfence[idx(m, s)] = 0
            :: else
            fi
        }
    }
}

proctype member(byte m) {
    byte n, lo, hi, free, pending, deficit, need, take, give, taken, cnt, c, j, s, extra;
end:
    do
    :: state[m] == MEMBER -> sync(m); pass(m)
    :: state[m] == LEAVING ->
        pass(m);
        atomic {
            if
            :: believe[idx(m, 0)] || believe[idx(m, 1)] || believe[idx(m, 2)] -> skip
            :: else -> state[m] = OUT
            fi
        }
    :: state[m] == STALLED ->
        /* the local deadline: every function stops, nothing is believed */
        atomic {
            for (s : 0 .. M - 1) { running[idx(m, s)] = false; believe[idx(m, s)] = false; bfence[idx(m, s)] = 0 }
        }
        (state[m] != STALLED)
    :: state[m] == OUT || state[m] == CRASHED -> (state[m] == MEMBER)
    od
}

/* The server's expiry of a member that stopped syncing: only after its
 * functions stopped (the safety margin). */
proctype expiry() {
    byte m, s;
end:
    do
    :: for (m : 0 .. N - 1) {
           atomic {
               if
               :: (state[m] == CRASHED || state[m] == STALLED || state[m] == OUT) && inTable[m] &&
                  !running[idx(m, 0)] && !running[idx(m, 1)] && !running[idx(m, 2)] &&
                  !believe[idx(m, 0)] && !believe[idx(m, 1)] && !believe[idx(m, 2)] ->
                   inTable[m] = false;
                   for (s : 0 .. M - 1) { if :: owner[s] == m + 1 -> owner[s] = 0; asked[s] = false :: else fi };
                   s = 0
               :: else
               fi
           }
       };
       m = 0;
       (events >= EVENTS)   /* after the events, one last sweep is enough */
    od
}

proctype env() {
    byte m, s;
    do
    :: events < EVENTS ->
        select (m : 0 .. N - 1);
        atomic {
            if
            :: state[m] == OUT && !inTable[m] -> state[m] = MEMBER; events++
            :: state[m] == MEMBER -> state[m] = LEAVING; inTable[m] = false; events++   /* group_leave */
            :: state[m] == MEMBER ->
                state[m] = CRASHED; events++;
                for (s : 0 .. M - 1) { running[idx(m, s)] = false; believe[idx(m, s)] = false; bfence[idx(m, s)] = 0 }
            :: state[m] == MEMBER -> state[m] = STALLED; events++
            :: state[m] == STALLED -> state[m] = MEMBER; events++
            :: else
            fi
        }
    :: events >= EVENTS -> break
    od
}

/* Safety: a running function is its member's current tenure (so no two
 * members run one shard: the shard has one owner). */
#define ok(a, s) (!running[idx(a, s)] || (owner[s] == a + 1 && bfence[idx(a, s)] == fence[s]))
#define okShard(s) (ok(0, s) && ok(1, s) && ok(2, s))
#define safe (okShard(0) && okShard(1) && okShard(2))

/* Balanced: every member in the table is a live member, every shard is
 * owned and not being handed over, and each member owns floor or ceil of
 * M / n. */
#define live(j) (inTable[j] && state[j] == MEMBER)
#define nlive (live(0) + live(1) + live(2))
#define owns(j) ((owner[0] == j + 1) + (owner[1] == j + 1) + (owner[2] == j + 1))
#define fair(j) (!inTable[j] || (state[j] == MEMBER && owns(j) >= M / nlive && owns(j) <= (M + nlive - 1) / nlive))
#define settled(s) (owner[s] != 0 && !asked[s])
#define balanced (nlive == 0 || (fair(0) && fair(1) && fair(2) && settled(0) && settled(1) && settled(2)))

init {
    atomic {
        state[0] = MEMBER;
        run member(0); run member(1); run member(2);
        run expiry();
        run env()
    }
}

ltl safety { [] safe }
ltl converge { <> [] (events < EVENTS || balanced) }
