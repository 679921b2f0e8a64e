/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Live upgrade's processes (keylockd(8), LIVE UPGRADE; HACKING.md, Live
 * upgrade): the running server starts the binary installed at the path it
 * was started from, first with --check-config, then as the new process,
 * which starts (configuration, token mark, heap) while the server still
 * serves and says "WAITING pid" on a socket pair (SOCK_SEQPACKET) whose
 * end it finds in $KEYLOCKD_UPGRADE. Then the server freezes and sends
 * the state (a sealed memfd) and the descriptors it hands over, in its
 * order, with SCM_RIGHTS, and waits for the verdict: "READY pid", to
 * which it answers "GO" and exits, or "ERR reason", or nothing (it
 * crashed, or missed the deadline): then it carries on as if nothing had
 * happened. This module knows processes and descriptors, not what the
 * state says (server_upgrade.c writes and reads that).
 */
#ifndef UPGRADE_H
#define UPGRADE_H

#include <sys/types.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

#define KL_UPGRADE_ENV		"KEYLOCKD_UPGRADE"	/* "CHANNEL_FD,HEAP_BYTES" */
#define KL_UPGRADE_WHY_MAX	256

struct event_base;
struct ks_writer;

/* At start, before anything changes directory: the binary's path (and
 * the time, the first mark of a new process). */
void		 upgrade_note_path(void);
/* upgrade-timeout: what --check-config, and then the new process until
 * it is ready, may take; in the new process, what it waits for the
 * state and for GO. Set from the configuration, at start and reload. */
void		 upgrade_set_timeout(uint64_t ms);
/*
 * At debug level, "upgrade: PHASE at T (+D)": T microseconds of
 * CLOCK_MONOTONIC, which both processes share, and D since the previous
 * mark of this process, so that the two logs merged show where a pause
 * goes. Nothing below debug level.
 */
void		 upgrade_mark(const char *phase);
/*
 * Advice: fault in the pages within [p, p + n) now, in one system call,
 * instead of one fault each when first written: a fault costs far more
 * than its share of the call (most of all in a virtual machine), and a
 * state or a table rebuilt from one is written all at once, in the pause.
 * Changes no byte; does nothing where the system cannot.
 */
void		 upgrade_prefault(void *p, size_t n);
/*
 * The new process, before it rebuilds from the state: grows the heap by
 * about n bytes at once (a step of it at a time, then all freed but the
 * last, which keeps the free space from being trimmed off the top) and
 * faults them in (upgrade_prefault), so that the many small allocations
 * of the rebuild are carved from pages that are ready. Where the heap
 * does not grow by brk it only costs the allocations. upgrade_heap_done()
 * frees what was kept; the heap is trimmed again as usual. No malloc
 * setting changes (an M_TOP_PAD would stop glibc adapting its mmap
 * threshold for the life of the process).
 */
void		 upgrade_heap_prefault(size_t n);
void		 upgrade_heap_done(void);
const char	*upgrade_path(void);

/* ---- the running server's side ---- */

struct upgrade_check;
/*
 * Runs `PATH ARGS... --check-config` (args: the server's own argv, minus
 * argv[0]), then, if it passed, the new process with the same arguments
 * (heap_hint: about the bytes its rebuild will allocate, which it grows
 * its heap by before it says it is waiting), each watched from base with
 * a deadline; done(arg, uc, NULL) once the new process waits for the
 * state (the caller, frozen, then owes uc to upgrade_handoff() or
 * upgrade_check_cancel()), or done(arg, NULL, why) if either failed
 * (everything freed, the children reaped). NULL (why set) if it cannot
 * even start.
 */
struct upgrade_check *upgrade_check_start(struct event_base *base,
		    char **argv, size_t heap_hint, void (*done)(void *arg,
		    struct upgrade_check *uc, const char *why), void *arg,
		    char *why, size_t whylen);

/* The server stops during the attempt, or gives up on a waiting new
 * process: the child is killed and reaped, everything freed, and a state
 * prepared (upgrade_state_prepare) too. NULL: that state only. */
void		 upgrade_check_cancel(struct upgrade_check *uc);

/*
 * The state's writer (kstate.h) on a memfd's shared mapping of about n
 * bytes, which grows if it must: the state is written in place, once.
 * upgrade_state_prepare() makes and faults it in before the freeze (a
 * failure is only logged: the writer then makes its own);
 * upgrade_state_writer() takes that one, or makes one (false, why set,
 * if it cannot). upgrade_state_end() frees the writer's memfd and
 * mapping, upgrade_state_discard() a prepared one not taken (the attempt
 * failed before the freeze, or the server stops).
 */
void		 upgrade_state_prepare(size_t n);
void		 upgrade_state_discard(void);
bool		 upgrade_state_writer(struct ks_writer *w, size_t n, char *why,
		    size_t whylen);
void		 upgrade_state_end(struct ks_writer *w);

/*
 * The hand-off, frozen, to uc's waiting new process: the state w
 * (upgrade_state_writer's, finished) is cut to its length and sealed and
 * sent with fds[0..nfds) (the state names each by its index there); then
 * this waits, blocking, until the child reports (or deadline_ms of
 * CLOCK_MONOTONIC passes). Once it reported ready, ready(child) runs
 * (systemd learns the new MAINPID) before it is told GO. uc is freed in
 * every case. true: the child took over (it was sent GO): the caller must
 * exit at once without touching a socket. false: why says what failed,
 * the child is reaped and every descriptor made here is closed (the
 * state's is the writer's: upgrade_state_end()).
 */
bool		 upgrade_handoff(struct upgrade_check *uc, struct ks_writer *w,
		    const int *fds, size_t nfds, uint64_t deadline_ms,
		    void (*ready)(pid_t child), pid_t *child, char *why,
		    size_t whylen);

/* ---- the new process's side ---- */

struct upgrade_in {
	int		 state_fd;
	int		 chan_fd;
	const void	*state;		/* mapped */
	size_t		 len;
	uint64_t	 start_ms;	/* when this process had it */
	int		*fds;		/* handed over, in the state's order */
	uint8_t		*claimed;
	size_t		 nfds, nclaimed;
};

/*
 * A new process of a live upgrade (false when it was started normally:
 * no $KEYLOCKD_UPGRADE): grows its heap, says it is waiting, and receives
 * the state, mapped, and the descriptors handed over. A malformed
 * $KEYLOCKD_UPGRADE is fatal; an old process that gives up on it (the
 * channel ends) makes it exit 1 touching nothing.
 */
bool		 upgrade_in_open(struct upgrade_in *in);
/* The descriptor at index in the state's order, once: -1 if there is no
 * such index or it was claimed already. */
int		 upgrade_in_fd(struct upgrade_in *in, uint32_t index);
/* Whether every descriptor handed over was claimed. */
bool		 upgrade_in_fds_claimed(const struct upgrade_in *in);
/* Reports ERR why to the old process and exits 1. */
void		 upgrade_in_fail(struct upgrade_in *in, const char *fmt, ...)
		    KL_PRINTF(2, 3) __attribute__((noreturn));
/* Reports ready and waits for GO; without it (the old process gave up on
 * this one) exits 1 touching nothing. Unmaps the state. */
void		 upgrade_in_ready(struct upgrade_in *in);

#endif /* UPGRADE_H */
