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
 * so each decision, the report it reads included, is one `atomic` block here.
 * The controller's commands (a start, a stop) go to the agent on one ordered
 * log, and the agent launches a generation's members when it reads its start.
 *
 * docs/architecture.md, "The protocol, model-checked", maps every transition
 * to the code: events/fold.py (`_fenced`, the ManifestProposed and
 * CursorAdvanced rules, CheckpointRevoked), controller/checkpoints.py
 * (`missing_shards`, `commit_events`, `revocation`), controller/run_decide.py
 * (`decide`, `_restart`, `_failed`), agent/decide.py (`_start`, `_stop`),
 * worker/restore.py and worker/session.py.
 *
 * Bounds: G generations (default 2), checkpoint steps 1..S (default 2), MAXF
 * faults (default 2). A verification failure from a revoked generation needs
 * G=3 and MAXF=3 (a torn shard, then two lost nodes: the second generation is
 * revoked while its coordinator restores); proof/spin.py also checks every
 * property exhaustively at G=3, S=1, MAXF=3, and with a bitstate search (its
 * coverage stated) at G=3, S=2, MAXF=3, which no exhaustive search here holds.
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
 *   P7 no generation starts after the run ended (a cancel is its only end here)
 *   P8 one live generation at a time: a generation's members start only after
 *      the agent has read the previous generation's stop
 *   P9 every member of a generation resumes from the step its coordinator's
 *      restore agreed on
 *   P10 a manifest is proposed only after every member's write of its step is
 *      over
 *   L  with no faults, the run eventually commits its last step (-DNOFAULTS,
 *      ltl `commits`, weak fairness; assertions are the safety check's)
 * Mutants (-D<NAME>) each remove or weaken one rule; tests/proof/test_spin.py
 * checks that each one breaks its property, and records its verdict under L:
 * NO_GEN_CHECK (P1), NO_SHARD_CHECK (P2), NO_CURSOR_RESET (P3), NO_VERIFY (P4),
 * NO_STEP_CHECK and LATEST_STAYS (P5), STOP_FIRST (P6), START_AFTER_CANCEL
 * (P7: a start without `!cancelled`), LOST_NOT_STOPPED (P8: a lost node's
 * restart with no stop), UNFENCED_START (P8: a start with no restart decided),
 * RESUME_OTHER (P9: a member resumes from the start command's step, not the
 * coordinator's), PROPOSE_OWN_WRITE (P10 and L: the coordinator proposes after
 * its own write only), VFAIL_ANY_GEN (P1 at G=3, MAXF=3: a verification
 * failure judged without its generation).
 *
 * Every controller decision prints one "@..." line, and each stop it commands
 * an "@STOP" line (proof/traces.py reads them and replays them against the
 * real controller core); pan ignores printf, so the state space is the same
 * with or without them. NOCANCEL and LOSS_AFTER only
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

mtype = { SHARD, PROPOSE, VFAIL, START, STOP };

/* runledger.reports for this run's partition: one ordered log. */
chan reports = [1] of { mtype, byte, byte, byte };   /* kind, generation, step, member */
/* runledger.commands for this run (keyed by the run: one ordered log), read by the
   agent: a start per generation, a stop per lost generation and a cancel's stop, so
   never full. */
chan cmds = [2 * G] of { mtype, byte, byte };        /* kind, generation, resume step */

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
bool ended;                      /* the run ended: RunCancelled */
bool stopped[G + 1];             /* the agent has read generation g's stop */
byte agreed[G + 1];              /* the step generation g's coordinator restored */
byte over[(G + 1) * (S + 1)];    /* members whose write of (g, s) is over */

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

/* controller/run_decide.py decide: a next generation only for a run that awaits one
   (rule 3, `_restart`) and has not ended (a terminal run decides nothing). */
#ifdef UNFENCED_START
#define decided true
#else
#define decided awaiting
#endif
#ifdef START_AFTER_CANCEL
#define going true
#else
#define going (!cancelled)
#endif
/* events/fold.py: a CheckpointVerificationFailed is a report like any other (`_fenced`). */
#ifdef VFAIL_ANY_GEN
#define vfenced(g) (!cancelled)
#else
#define vfenced(g) fenced(g)
#endif
/* worker/session.py: the coordinator proposes after `comm.barrier`, every rank's write over. */
#ifdef PROPOSE_OWN_WRITE
#define writes_over(g, s) (attempted[IX(g, s)] & 1)
#else
#define writes_over(g, s) (attempted[IX(g, s)] == ALL)
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

inline stop(g) {                 /* GroupStopCommanded */
    atomic { cmds!STOP, g, 0; printf("@STOP %d\n", g) }
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
            agreed[g] = s;
            restored[g] = true
        }
    :: else ->
        /* worker/restore.py: every rank verifies its share of each candidate and
           the ranks agree on the first failure, so they load the same one. */
        atomic {
            restored[g] ->
#ifdef RESUME_OTHER
            s = start;
#else
            s = resumed[g];
#endif
            assert(s == agreed[g])                                 /* P9 */
        }
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
            over[IX(g, s)] = over[IX(g, s)] | (1 << m);
            goto gone
        fi;
        attempted[IX(g, s)] = attempted[IX(g, s)] | (1 << m);
        over[IX(g, s)] = over[IX(g, s)] | (1 << m);
        reports!SHARD, g, s, m
       }
        if
        :: m == 0 ->
end_barrier:
            atomic {                    /* every member's write is over: the manifest */
                writes_over(g, s) && nfull(reports) ->
                assert(over[IX(g, s)] == ALL);                     /* P10 */
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
        cmds!START, 1, 0
    };
end:
    do
    :: atomic {
        reports?k, g, s, m ->
            if
            :: k == SHARD && fenced(g) ->
                assert(!revoked[g]);                           /* P1 */
                reported[IX(g, s)] = reported[IX(g, s)] | (1 << m);
                printf("@%e %d %d %d 1\n", k, g, s, m)
            :: k == PROPOSE && fenced(g) && forward(s) && complete(g, s) ->
                accept_commit(g, s);
                printf("@%e %d %d %d 1\n", k, g, s, m)
            :: k == VFAIL && vfenced(g) && committed[s] ->
                assert(!revoked[g]);                           /* P1 */
                printf("@%e %d %d %d 1\n", k, g, s, cgen[s]);
                revoke(s)
            :: else ->                                         /* refused: WriteRejected */
                printf("@%e %d %d %d 0\n", k, g, s, (k == VFAIL -> cgen[s] : m))
            fi;
            invariants();
            k = 0; g = 0; s = 0; m = 0        /* dead until the next report: merges states */
       }
    :: atomic {                                                /* a node is lost */
        FAULT && gen < G && !awaiting && !cancelled && LOSS_GUARD ->
        faults++;
        awaiting = true;
        revoked[gen] = true;
        printf("@LOST %d\n", gen);
#ifndef LOST_NOT_STOPPED
        stop(gen);                                             /* then the stop */
#endif
        invariants()
       }
    :: atomic {                                                /* GenerationStarted */
        decided && going && gen < G ->
        gen++;
        awaiting = false;
        printf("@GEN %d %d\n", gen, latest);             /* (the trail shows it) */
        assert(!ended);                                        /* P7 */
        cmds!START, gen, latest;                               /* GroupStartCommanded */
        invariants()
       }
#ifndef NOCANCEL    /* for trace generation (proof.traces): runs that go on */
#ifdef STOP_FIRST
    :: atomic { FAULT && !cancelled -> faults++ };
        stop(gen);
        atomic { cancelled = true; ended = true; revoked[gen] = true }
#else
    :: atomic {                                                /* CancelRequested */
        FAULT && !cancelled ->
        faults++;
        cancelled = true;                                      /* RunCancelled first */
        ended = true;
        revoked[gen] = true;
        printf("@CANCEL %d\n", gen);
        stop(gen);                                             /* then the stop */
        invariants()
       }
#endif
#endif
    od
}

/* agent/decide.py: the agent reads the run's commands in order; a stop marks its
   generation revoked and terminates it (`_stop`), a start launches the members. */
active proctype Agent() {
    byte g, r;
end:
    do
    :: atomic {
        cmds?STOP, g, r ->
        assert(revoked[g]);                                    /* P6 */
        stopped[g] = true
       }
    :: atomic {
        cmds?START, g, r ->
        assert(g == 1 || stopped[g - 1]);                      /* P8 */
        run Member(g, 0, r);
        run Member(g, 1, r)
       }
    od
}

#ifdef NOFAULTS
ltl commits { <> (latest == S) }
#endif
