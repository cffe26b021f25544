/*
 * runledger's checkpoint commit and fencing protocol, bounded, for SPIN.
 *
 * One run. The controller folds reports into the run state and decides; a
 * generation is two members (member 0 coordinates) that restore, write a shard
 * per checkpoint step, and propose a manifest; storage can tear a shard
 * silently or fail its write; the controller can decide a restart (a new
 * generation) or a cancel at any point, and a member of an old generation can
 * pause and wake at any point, since every process interleaves freely and none
 * of them checks its fence (the worst case: a zombie that ignores the fence).
 * Kafka's transaction makes each controller decision atomic, with the reports
 * it consumed: a crash between transaction steps aborts the whole step and the
 * inputs are read again, which is the same as the step not having happened,
 * so each decision is one `atomic` block here.
 *
 * docs/architecture.md, "The protocol, model-checked", maps every transition
 * to the code: events/fold.py (`_fenced`, the ManifestProposed and
 * CursorAdvanced rules, CheckpointRevoked), controller/checkpoints.py
 * (`missing_shards`, `commit_events`, `revocation`) and worker/restore.py.
 *
 * Properties, each an assertion on ghost variables the protocol never reads:
 *   P1 no fact is accepted from a generation that was revoked
 *   P2 a checkpoint is committed only with every member's shard written
 *   P3 the data cursor never names a step past the newest committed checkpoint
 *   P4 a restore loads only a committed checkpoint that verifies
 *   P5 "latest" is always the newest committed checkpoint (after a revocation,
 *      the previous one)
 *   P6 a stop command reaches an agent only for a revoked generation (a cancel
 *      and a restart revoke before they stop)
 *   L  with no faults, the run eventually commits its last step (-DNOFAULTS,
 *      ltl `commits`, weak fairness)
 * Mutants (-D<NAME>) each remove one rule; tests/proof/test_spin.py checks that
 * each one breaks its property: NO_GEN_CHECK (P1), NO_SHARD_CHECK (P2),
 * NO_CURSOR_RESET (P3), NO_VERIFY (P4), NO_STEP_CHECK and LATEST_STAYS (P5),
 * STOP_FIRST (P6).
 *
 * Every controller decision prints one "@..." line (proof/traces.py reads them and
 * replays them against the real controller core); pan ignores printf, so the
 * state space is the same with or without them. NOCANCEL and LOSS_AFTER only
 * steer SPIN's random simulations for those traces: each removes choices, so
 * their traces are traces of the full model.
 */

#ifndef G
#define G 2            /* generations the controller may start */
#endif
#ifndef S
#define S 2            /* checkpoint steps 1..S */
#endif
#define M 2            /* members of every generation; member 0 coordinates */
#define ALL 3          /* a bit per member */

#define OK 1           /* a shard in storage: 0 absent, OK, or TORN */
#define TORN 2

#define IX(g, s) ((g) * (S + 1) + (s))
#define SX(g, s, m) (IX(g, s) * M + (m))

/* Faults (a torn or failed write, a late duplicate, a lost node, a cancel) are
   bounded per run: any MAXF of them, in any order and at any point. */
#ifndef MAXF
#define MAXF 2
#endif
#ifdef NOFAULTS
#define FAULT false
#else
#define FAULT (faults < MAXF)
#endif

/* Trace generation only (proof.traces): a node is lost only once a step is committed.
   A guard added to one transition keeps every trace a trace of the full model. */
#ifdef LOSS_AFTER
#define LOSS_GUARD (latest >= LOSS_AFTER)
#else
#define LOSS_GUARD true
#endif

mtype = { SHARD, PROPOSE, VFAIL };

/* runledger.reports for this run's partition: one ordered log. */
chan reports = [1] of { mtype, byte, byte, byte };   /* kind, generation, step, member */
/* Stop commands to the agent; never full (at most one per generation, and a cancel). */
chan stops = [G + 1] of { byte };

/* ---- the folded run state (events/state.py RunState) ---- */
byte gen;                        /* current generation, 0 before the first */
bool awaiting;                   /* a restart is decided: the generation is revoked */
bool cancelled;                  /* RunCancelled is committed */
byte latest;                     /* newest committed checkpoint step, 0: none */
byte cursor;                     /* the committed data cursor's step, 0: none */
bool committed[S + 1];
byte cgen[S + 1];                /* the generation whose directory holds step s */
byte reported[(G + 1) * (S + 1)];   /* ShardWritten bits (controller/checkpoints.py) */

/* ---- storage ---- */
byte shard[(G + 1) * (S + 1) * M];
bool manifest[(G + 1) * (S + 1)];
byte attempted[(G + 1) * (S + 1)];  /* members whose write of (g, s) is over */
byte resumed[G + 1];             /* the step generation g's coordinator restored */
bool restored[G + 1];

byte faults;                     /* faults so far */

/* ---- ghosts: read by the properties only ---- */
bool revoked[G + 1];

#define fenced(g) (!cancelled && !awaiting && g == gen)
#ifdef NO_GEN_CHECK
#undef fenced
#define fenced(g) (!cancelled && !awaiting)
#endif

/* events/fold.py: a checkpoint step must be past the latest committed one. */
#ifdef NO_STEP_CHECK
#define forward(s) true
#else
#define forward(s) (s > latest)
#endif
/* controller/checkpoints.py missing_shards: every member reported its shard. */
#ifdef NO_SHARD_CHECK
#define complete(g, s) true
#else
#define complete(g, s) (reported[IX(g, s)] == ALL)
#endif

#define verified(g, s) (manifest[IX(g, s)] && shard[SX(g, s, 0)] == OK && shard[SX(g, s, 1)] == OK)

inline newest(out) {
    out = S;
    do
    :: out > 0 && !committed[out] -> out--
    :: else -> break
    od
}

inline invariants() {
    printf("@= %d %d\n", latest, cursor);   /* the state after each decision */
    newest(expect);
    assert(latest == expect);                                  /* P5 */
    assert(cursor == 0 || (committed[cursor] && cursor <= latest));   /* P3 */
}

inline accept_commit(g, s) {
    assert(!revoked[g]);                                       /* P1 */
    assert(shard[SX(g, s, 0)] != 0 && shard[SX(g, s, 1)] != 0);   /* P2 */
    committed[s] = true;
    cgen[s] = g;
    latest = s;
    cursor = s                  /* CursorAdvanced, in the same transaction */
}

inline revoke(s) {
    committed[s] = false;
#ifndef LATEST_STAYS
    newest(latest);
#endif
#ifndef NO_CURSOR_RESET
    if
    :: cursor > latest -> cursor = 0    /* it belonged to the revoked checkpoint */
    :: else -> skip
    fi
#endif
}

proctype Member(byte g; byte m; byte start) {
    byte s;
    if
    :: m == 0 ->
        /* worker/restore.py: the committed candidates, newest first; each one is
           verified (manifest and every shard's CRC32C) before it is loaded. */
        s = start;
        do
        :: atomic {
            s > 0 && committed[s] && nfull(reports) ->
#ifdef NO_VERIFY
            if :: true -> break :: true -> skip fi;
#endif
            if
            :: verified(cgen[s], s) -> break
            :: else -> reports!VFAIL, g, s, 0; s--   /* CheckpointVerificationFailed */
            fi
           }
        :: atomic { s > 0 && !committed[s] -> s-- }
        :: s == 0 -> break
        od;
        atomic {
            assert(s == 0 || (committed[s] && verified(cgen[s], s)));   /* P4 */
            resumed[g] = s;
            restored[g] = true
        }
    :: else ->
        atomic { restored[g] -> s = resumed[g] }
    fi;
    do
    :: s >= S || cancelled -> break     /* done, or stopped by the agent */
    :: atomic {                         /* write shard s + 1, then report it */
        s < S && nfull(reports) ->
        s++;
        if
        :: shard[SX(g, s, m)] = OK
        :: FAULT -> faults++; shard[SX(g, s, m)] = TORN   /* acknowledged, silently torn */
        :: FAULT -> faults++;                     /* the write failed: no report */
            attempted[IX(g, s)] = attempted[IX(g, s)] | (1 << m);
            goto gone
        fi;
        attempted[IX(g, s)] = attempted[IX(g, s)] | (1 << m);
        reports!SHARD, g, s, m
       }
        if
        :: m == 0 ->
end_barrier:
            atomic {                    /* every member's write is over: the manifest */
                attempted[IX(g, s)] == ALL && nfull(reports) ->
                manifest[IX(g, s)] = true;
                reports!PROPOSE, g, s, 0           /* ManifestProposed */
            }
            if
            :: atomic { FAULT && s > 1 -> faults++; reports!PROPOSE, g, s - 1, 0 }  /* a late duplicate */
            :: true -> skip
            fi
        :: else -> skip
        fi
    od;
gone:
    skip
}

active proctype Controller() {
    mtype k;
    byte g, s, m, expect;
    atomic {
        gen = 1;
        run Member(1, 0, 0);
        run Member(1, 1, 0)
    };
end:
    do
    :: reports?k, g, s, m ->
        atomic {
            if
            :: k == SHARD && fenced(g) ->
                assert(!revoked[g]);                           /* P1 */
                reported[IX(g, s)] = reported[IX(g, s)] | (1 << m);
                printf("@%e %d %d %d 1\n", k, g, s, m)
            :: k == PROPOSE && fenced(g) && forward(s) && complete(g, s) ->
                accept_commit(g, s);
                printf("@%e %d %d %d 1\n", k, g, s, m)
            :: k == VFAIL && fenced(g) && committed[s] ->
                assert(!revoked[g]);                           /* P1 */
                printf("@%e %d %d %d 1\n", k, g, s, cgen[s]);
                revoke(s)
            :: else ->                                         /* refused: WriteRejected */
                printf("@%e %d %d %d 0\n", k, g, s, (k == VFAIL -> cgen[s] : m))
            fi;
            invariants()
        }
    :: atomic {                                                /* a node is lost */
        FAULT && gen < G && !awaiting && !cancelled && LOSS_GUARD ->
        faults++;
        awaiting = true;
        revoked[gen] = true;
        printf("@LOST %d\n", gen);
        stops!gen;
        invariants()
       }
    :: atomic {                                                /* GenerationStarted */
        awaiting && !cancelled && gen < G ->
        gen++;
        awaiting = false;
        printf("@GEN %d %d\n", gen, latest);
        run Member(gen, 0, latest);
        run Member(gen, 1, latest);
        invariants()
       }
#ifndef NOCANCEL    /* for trace generation (proof.traces): runs that go on */
#ifdef STOP_FIRST
    :: atomic { FAULT && !cancelled -> faults++ };
        stops!gen;
        atomic { cancelled = true; revoked[gen] = true }
#else
    :: atomic {                                                /* CancelRequested */
        FAULT && !cancelled ->
        faults++;
        cancelled = true;                                      /* RunCancelled first */
        revoked[gen] = true;
        printf("@CANCEL %d\n", gen);
        stops!gen;                                             /* then the stops */
        invariants()
       }
#endif
#endif
    od
}

active proctype Agent() {
    byte g;
end:
    do
    :: stops?g ->
        assert(revoked[g])                                     /* P6 */
    od
}

#ifdef NOFAULTS
ltl commits { <> (latest == S) }
#endif
