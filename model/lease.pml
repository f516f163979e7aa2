/*
 * A model of the core lease protocol, checked with spin: `make model-core`
 * (scripts/check-model.sh core).
 *
 * The server's side is what sql/functions/ decides, each call one atomic
 * step (a transaction, decided on the server's clock read after its row
 * lock): pglease.acquire (10_acquire.sql), pglease.renew (11_renew.sql),
 * pglease.release (12_release.sql), and a fenced write: pglease.assert_held
 * (13_assert_held.sql) and the write in one transaction, whose FOR SHARE
 * row lock keeps a takeover from committing in between. The client's side
 * is a supervisor (supervisor/supervisor.go: Run, hold) holding its lease
 * with internal/tenure and internal/hold: the local deadline is the send
 * time of the last successful acquire or renew plus TTL minus the safety
 * margin, on the process's monotonic clock (tenure.Core.Grant,
 * tenure.Tenure.Renew), and a timer cancels the workload at that deadline
 * even while a renewal hangs (hold.Run).
 *
 * Time is discrete. The server's clock is the reference: one tick of the
 * clock process is one server tick. Every time is a countdown (ticks left
 * to an expiry or a deadline, ticks since a send), so the state space is
 * finite without a horizon: executions of any length are checked.
 *
 * Bounds (the ones docs/reliability.md states):
 *   - N = 2 clients (holders) and one lease name (3 clients did not finish
 *     in 5 minutes: more than 12 million states);
 *   - TTL = 4 ticks, safety margin M = 2 ticks: the deadline comes TTL - M
 *     = 2 ticks of the client's clock after the send;
 *   - clock rates: each client's monotonic clock advances 1 tick per server
 *     tick, except that at most once per K = 4 server ticks it advances 0
 *     (slow) or 2 (fast): a rate difference up to 1/4, so at most one tick
 *     over a TTL. The margin covers it and the tick's own granularity
 *     (M = 1 fails: the deadline and the expiry fall on the same tick);
 *   - message delay: any, in both directions (a request may be applied at
 *     any time after it was sent, or never; an answer may be read at any
 *     time after), in order per client (see abandon; REORDER drops this);
 *   - process pauses: a client holding the lease may stop for any time
 *     (GC, SIGSTOP, VM migration) while its clock runs on; its workload
 *     and timers take no steps meanwhile. A running process's timer fires
 *     on time (a late timer is a pause);
 *   - crashes and restarts, any number, at any time; a restarted process
 *     keeps its holder string (supervisor.Config.Holder set): its acquire
 *     re-pins the tenure it had, as a retry of a lost reply does;
 *   - G = 3 tenures (grants of a new fence) in all: after the third, an
 *     acquire that would grant a new tenure waits for ever. Renewals,
 *     re-pins, releases, expiries, pauses and crashes are not bounded.
 * -DTTL=6 -DK=6 checks a longer TTL with the same margin (6.3 million
 * states, 54 s of CPU, 1.1 GB).
 * Renewal and retry pacing (RenewInterval, RetryDelay, backoff) matter only
 * for liveness: a client renews or retries at any time, a superset of what
 * the pacing allows.
 *
 * Checked in every reachable state (ltl safety), and at every grant
 * (assert):
 *   ahead:   a client whose local deadline is ahead holds the server's live
 *            tenure: the deadline comes before the server's expiry, also
 *            for a paused client (its clock runs on);
 *   running: a client whose workload runs (not cancelled, the process
 *            running) holds the server's live tenure, unless it resumed
 *            from a pause, or read its grant, past its deadline and its
 *            timer has not fired yet (late);
 *   one:     never two clients whose workloads run, never two whose
 *            deadlines are ahead;
 *   fences:  every grant's fence is larger than every earlier grant's.
 *            A fenced write (assert_held and the write in one transaction)
 *            commits only under live(c), the tenure the client holds: a
 *            late client's are refused, and with increasing fences they
 *            commit in fence order.
 *
 * Mutants (-DMUTANT_...), each of which must fail (scripts/check-model.sh):
 *   RENEW_AFTER_DEADLINE  the deadline timer waits for a renewal in flight
 *                         and keeps the workload running meanwhile;
 *   CLIENT_CLOCK_GRANT    the client judges the holder's expiry on its own
 *                         clock (a refusal's expires_in counted down) and
 *                         the server grants on that judgement;
 *   DEADLINE_FROM_RECEIVE the deadline counts from the answer's arrival,
 *                         not from the request's send;
 *   NO_MARGIN             safety margin 0;
 *   FENCE_RESTART         release deletes the row: the next fence restarts.
 * Limits, also expected to fail (what the model shows is not guaranteed):
 *   UNFENCED              the workload's unfenced effects: a client that
 *                         resumes past its deadline acts before its timer
 *                         cancels it (docs/reliability.md, process pauses);
 *   REORDER               an abandoned release applied after the same
 *                         holder's next acquire re-pinned the same tenure.
 */

#define N 2
#ifndef TTL
#define TTL 4
#endif
#ifdef MUTANT_NO_MARGIN
#define MARGIN 0
#else
#define MARGIN 2
#endif
#define LOCAL (TTL - MARGIN)   /* the deadline: send + TTL - margin, local ticks */
#ifndef K
#define K 4
#endif
#ifndef G
#define G 3
#endif

/* Client states (the supervisor's). */
#define IDLE 0   /* standing by (supervisor.standby): may call acquire */
#define ACQ 1    /* acquire sent, no answer yet */
#define RUN 2    /* holding: the workload runs (hold.Run); a renewal may be in flight */
#define RELW 3   /* the workload returned; release sent (tenure.Run) */
#define DOWN 4   /* crashed */

/* Requests and answers. */
#define NONE 0
#define RACQ 1
#define RREN 2
#define RREL 3
#define GRANTED 1
#define REFUSED 2
#define RENEWED 3
#define NOTRENEWED 4
#define DONE 5   /* release answered (released or not: the client moves on either way) */

/* The server's row of the lease (pglease.leases). */
byte owner = 0;   /* 0: no holder; else client + 1 */
byte fence = 0;
byte sleft = 0;   /* server ticks until expires_at; 0: expired or released */
byte maxf = 0;    /* ghost: the largest fence ever granted */

/* Each client. */
byte cs[N];       /* IDLE .. DOWN */
byte f[N];        /* the fence it holds (RUN) */
byte dleft[N];    /* local ticks until its deadline (RUN); 0: passed */
byte ssent[N];    /* local ticks since its request in flight was sent, up to LOCAL */
bool renewing[N]; /* a renewal in flight (hold: h.renewing) */
bool paused[N];
bool late[N];     /* ghost: resumed, or read its grant, past its deadline */
byte dc[N];       /* server ticks since its clock last drifted, up to K */
/* The connection: its request in flight, an abandoned one, the answer. */
byte req[N];
byte reqf[N];     /* the fence of a renew or release; for an acquire, its take flag (mutant) */
#ifdef REORDER
byte orph[N];     /* an abandoned request still in flight */
byte orphf[N];

#endif
byte resp[N];
byte respf[N];    /* the fence granted; for a refusal, expires_in (mutant) */
#ifdef MUTANT_CLIENT_CLOCK_GRANT
byte est[N];      /* local ticks until the holder's expiry, as the client reckons */
bool refused[N];  /* it was refused and reckons since */
#endif

#define live(c) (owner == (c) + 1 && sleft > 0 && fence == f[c])
#define ahead(c) (cs[c] == RUN && dleft[c] > 0)
#define running(c) (cs[c] == RUN && !paused[c] && !late[c])

/* A request that would grant a new tenure once G were granted waits. */
#ifdef MUTANT_CLIENT_CLOCK_GRANT
#define takes(c, t, x) ((owner == 0 || sleft == 0 || x) && !(owner == (c) + 1 && sleft > 0))
#else
#define takes(c, t, x) ((owner == 0 || sleft == 0) && !(owner == (c) + 1 && sleft > 0))
#endif
#define blocked(c, t, x) ((t) == RACQ && takes(c, t, x) && fence >= G)

/* The server's call t of client c with fence (or flag) x; answer says
 * whether the client still waits for the answer. One transaction. */
inline apply(c, t, x, answer) {
    if
    :: t == RACQ && takes(c, t, x) ->
        /* acquire: free, released or expired (or, mutant, judged so by the
         * client): a new tenure, fence = previous + 1, expires now + TTL */
        fence++;
        assert(fence > maxf);   /* fences strictly increase across grants */
        maxf = fence;
        owner = c + 1; sleft = TTL;
        if :: answer -> resp[c] = GRANTED; respf[c] = fence :: else fi
    :: t == RACQ && !takes(c, t, x) && owner == c + 1 && sleft > 0 ->
        /* acquire: live and held by p_holder: same fence, re-pinned */
        sleft = TTL;
        if :: answer -> resp[c] = GRANTED; respf[c] = fence :: else fi
    :: t == RACQ && !takes(c, t, x) && !(owner == c + 1 && sleft > 0) ->
        /* acquire: live and held by another holder: refused, expires_in */
        if :: answer -> resp[c] = REFUSED; respf[c] = sleft :: else fi
    :: t == RREN ->
        /* renew: compare-and-swap on (holder, fence) of a live lease */
        if
        :: owner == c + 1 && fence == x && sleft > 0 ->
            sleft = TTL;
            if :: answer -> resp[c] = RENEWED :: else fi
        :: else ->
            if :: answer -> resp[c] = NOTRENEWED :: else fi
        fi
    :: t == RREL ->
        /* release: compare-and-release of a live tenure; the row and its
         * fence stay (mutant: the row is deleted, the fence restarts) */
        if
        :: owner == c + 1 && fence == x && sleft > 0 ->
            owner = 0; sleft = 0;
#ifdef MUTANT_FENCE_RESTART
            fence = 0
#else
            skip
#endif
        :: else
        fi;
        if :: answer -> resp[c] = DONE :: else fi
    fi
}

#ifdef REORDER
/* REORDER: an abandoned request in flight is applied or lost. */
inline settle(c) {
    if
    :: orph[c] != NONE && !blocked(c, orph[c], orphf[c]) -> apply(c, orph[c], orphf[c], false)
    :: true
    fi;
    orph[c] = NONE; orphf[c] = 0
}
#endif

/* The caller gives up on its call (a connection error, a timeout, or the
 * call's context cancelled: hold.Run cancels a renewal in flight once the
 * workload returned, tenure.Run bounds its release by the TTL): the
 * outcome is unknown, and an answer already on its way is lost.
 *
 * By default a request not yet applied is applied now or never. That
 * stands for any request applied later but before the same client's next
 * one (in order per client), for these properties: a late renewal or
 * acquire only keeps the client's own tenure live longer (its deadline
 * never moves on an answer it did not read), and a late release can only
 * end a tenure the client gave up, since a grant it reads again is applied
 * after it. With REORDER the request stays in flight (orph) and may be
 * applied after the client's later requests. */
inline abandon(c) {
    if
    :: req[c] != NONE ->
#ifdef REORDER
        settle(c);   /* one abandoned request in flight at a time */
        orph[c] = req[c]; orphf[c] = reqf[c];
#else
        if :: !blocked(c, req[c], reqf[c]) -> apply(c, req[c], reqf[c], false) :: true fi;
#endif
        req[c] = NONE; reqf[c] = 0
    :: else
    fi;
    resp[c] = NONE; respf[c] = 0; ssent[c] = 0
}

/* Back to standing by: what the process knew of its tenure is gone. */
inline idle(c) {
    cs[c] = IDLE; f[c] = 0; dleft[c] = 0; renewing[c] = false; late[c] = false
}

inline send(c, t, x) {
    req[c] = t; reqf[c] = x; ssent[c] = 0
}

proctype client(byte c) {
end:
    do
    /* The server applies this client's request: at any time after its
     * send, or never (then the caller gives up: abandon) */
    :: atomic {
           req[c] != NONE && !blocked(c, req[c], reqf[c]) ->
           apply(c, req[c], reqf[c], true); req[c] = NONE; reqf[c] = 0
       }
#ifdef REORDER
    /* REORDER: an abandoned request, applied or lost at any later time */
    :: atomic { orph[c] != NONE -> settle(c) }
#endif

    /* supervisor.standby: pglease Client.Acquire, the send time recorded
     * (pglease/lease.go: try, res.sent = time.Now()) */
    :: atomic {
           cs[c] == IDLE ->
#ifdef MUTANT_CLIENT_CLOCK_GRANT
           send(c, RACQ, refused[c] && est[c] == 0); refused[c] = false; est[c] = 0;
#else
           send(c, RACQ, 0);
#endif
           cs[c] = ACQ
       }
    /* The acquire's answer: tenure.Core.Grant, deadline = sent + TTL - margin */
    :: atomic {
           cs[c] == ACQ && resp[c] == GRANTED ->
           f[c] = respf[c];
#ifdef MUTANT_DEADLINE_FROM_RECEIVE
           dleft[c] = LOCAL;
#else
           dleft[c] = LOCAL - ssent[c];
#endif
           /* hold.Run starts the workload, then arms the deadline timer:
            * a grant read past its deadline runs until the timer fires */
           late[c] = (dleft[c] == 0);
           cs[c] = RUN; resp[c] = NONE; respf[c] = 0; ssent[c] = 0
       }
    :: atomic {
           cs[c] == ACQ && resp[c] == REFUSED ->
#ifdef MUTANT_CLIENT_CLOCK_GRANT
           est[c] = respf[c]; refused[c] = true;
#endif
           cs[c] = IDLE; resp[c] = NONE; respf[c] = 0; ssent[c] = 0
       }
    :: atomic { cs[c] == ACQ && !paused[c] -> abandon(c); cs[c] = IDLE }

    /* hold.Run: a renewal every RenewInterval while not lost (h.renew);
     * tenure.Tenure.Renew records its send time */
    :: atomic {
           cs[c] == RUN && !paused[c] && !renewing[c] && dleft[c] > 0 ->
           send(c, RREN, f[c]); renewing[c] = true
       }
    /* hold.renewed: renewed, the deadline moves to sent + TTL - margin
     * (never backwards) */
    :: atomic {
           cs[c] == RUN && !paused[c] && resp[c] == RENEWED ->
#ifdef MUTANT_DEADLINE_FROM_RECEIVE
           dleft[c] = LOCAL;
#else
           if :: LOCAL - ssent[c] > dleft[c] -> dleft[c] = LOCAL - ssent[c] :: else fi;
#endif
           renewing[c] = false; resp[c] = NONE; ssent[c] = 0
       }
    /* hold.renewed: refused, the workload is cancelled (ErrRefused) and
     * the supervisor stands by again */
    :: atomic { cs[c] == RUN && !paused[c] && resp[c] == NOTRENEWED -> resp[c] = NONE; ssent[c] = 0; idle(c) }
    /* hold.renewed: outcome unknown; retried while the deadline allows
     * (when it does not: ErrNoTime, the workload cancelled) */
    :: atomic { cs[c] == RUN && !paused[c] && renewing[c] -> abandon(c); renewing[c] = false }
    :: atomic { cs[c] == RUN && !paused[c] && !renewing[c] && resp[c] == NONE -> idle(c) }   /* ErrNoTime */
    /* hold.Run: the deadline timer cancels the workload (ErrDeadline),
     * also while a renewal hangs; once the workload returned, the renewal
     * in flight is cancelled */
    :: atomic {
           cs[c] == RUN && !paused[c] && dleft[c] == 0 ->
#ifdef MUTANT_RENEW_AFTER_DEADLINE
           !renewing[c];
#endif
           abandon(c); idle(c)
       }
    /* The workload returns on its own: tenure.Run cancels a renewal in
     * flight (hold.Run) and releases by compare-and-set on the fence */
    :: atomic {
           cs[c] == RUN && !paused[c] && resp[c] == NONE ->
           if :: renewing[c] -> abandon(c) :: else fi;
           send(c, RREL, f[c]);
           cs[c] = RELW; f[c] = 0; dleft[c] = 0; renewing[c] = false; late[c] = false
       }
    :: atomic { cs[c] == RELW && resp[c] == DONE -> resp[c] = NONE; ssent[c] = 0; cs[c] = IDLE }
    :: atomic { cs[c] == RELW -> abandon(c); cs[c] = IDLE }   /* release failed: it frees at expiry */

#ifdef UNFENCED
    /* An unfenced effect of the workload: nothing checks it */
    :: atomic { cs[c] == RUN && !paused[c] -> assert(live(c)) }
#endif

    /* The environment: pauses, crashes, restarts. */
    :: atomic { cs[c] == RUN && !paused[c] -> paused[c] = true }
    :: atomic { paused[c] -> paused[c] = false; late[c] = (dleft[c] == 0) }
    :: atomic {
           cs[c] == ACQ || cs[c] == RUN || cs[c] == RELW ->
           abandon(c); idle(c); paused[c] = false; cs[c] = DOWN
       }
    :: atomic { cs[c] == DOWN -> cs[c] = IDLE }
    od
}

/* One client's clock over one server tick: 1, or at most once per K
 * ticks 0 or 2. A clock that times nothing may drift at once. */
inline advance(c) {
    if
    :: adv = 1
    :: dc[c] == K -> adv = 0
    :: dc[c] == K -> adv = 2
    fi;
    if :: adv == 1 && dc[c] < K -> dc[c]++ :: adv != 1 -> dc[c] = 0 :: else fi;
    if :: cs[c] == RUN -> dleft[c] = (dleft[c] > adv -> dleft[c] - adv : 0) :: else fi;
    if
    :: (cs[c] == ACQ || renewing[c]) && req[c] + resp[c] != NONE ->
        ssent[c] = (ssent[c] + adv < LOCAL -> ssent[c] + adv : LOCAL)
    :: else
    fi;
#ifdef MUTANT_CLIENT_CLOCK_GRANT
    est[c] = (est[c] > adv -> est[c] - adv : 0);
    if :: cs[c] == IDLE && !refused[c] || cs[c] == DOWN -> dc[c] = K :: else fi
#else
    if :: cs[c] == IDLE || cs[c] == DOWN -> dc[c] = K :: else fi
#endif
}

/* A timer of a running process fires on time: no tick passes while a
 * running client's deadline has passed and its workload is not cancelled. */
#ifdef MUTANT_RENEW_AFTER_DEADLINE
#define due(c) (cs[c] == RUN && !paused[c] && dleft[c] == 0 && !renewing[c])
#else
#define due(c) (cs[c] == RUN && !paused[c] && dleft[c] == 0)
#endif
#define anydue (due(0) || due(1))

proctype clock() {
    byte adv, c;
end:
    do
    :: atomic {
           !anydue ->
           if :: sleft > 0 -> sleft-- :: else fi;
           for (c : 0 .. N - 1) { advance(c) };
           c = 0; adv = 0
       }
    od
}

#define okc(c) ((!ahead(c) || live(c)) && (!running(c) || live(c)))
#define safe (okc(0) && okc(1) && !(running(0) && running(1)) && !(ahead(0) && ahead(1)))

init {
    byte c;
    atomic {
        for (c : 0 .. N - 1) { dc[c] = K; run client(c) };
        run clock()
    }
}

ltl safety { [] safe }
