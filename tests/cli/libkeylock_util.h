/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The harness the check_libkeylock tests (libkeylock_*.c, one program)
 * share: private daemons, clients of them, a fake server, and one function
 * per TCase that adds it to the suite, in the order main() runs them. The
 * functions assert through Check; call them from a test.
 */
#ifndef LIBKEYLOCK_UTIL_H
#define LIBKEYLOCK_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>

#include "keylock.h"

struct lk_daemon {
	pid_t	pid;
	int	port;
	char	dir[96];
	char	portfile[128];
	char	sock[128];
	char	log[128];
	char	tcp[32];		/* "127.0.0.1:PORT" */
};

/* The daemon binary, set by main() from KEYLOCKD. */
extern const char	*lk_keylockd;
/* The current test's daemon, started by the fixture. */
extern struct lk_daemon	 lk_d;
/* Every daemon's directory is in here. A failed assertion ends a test's
 * process without its teardown (Check kills its process group, daemons
 * included): main() removes the lot at the end. */
extern char		 lk_topdir[64];

#define ck_assert_st(kl, got, want) do {				\
	enum keylock_status _g = (got), _w = (want);			\
	ck_assert_msg(_g == _w, "%s: %s \"%s\", want %s", #got,		\
	    keylock_status_word(_g), keylock_message(kl),		\
	    keylock_status_word(_w));					\
} while (0)

#define ck_assert_window(lo, hi, ms) ck_assert_msg((ms) >= (lo) &&	\
	(ms) <= (hi), "took %lld ms, want %d to %d", (long long)(ms),	\
	(lo), (hi))

int64_t		 lk_now_ms(void);
void		 lk_sleep_ms(long ms);
/* Starts keylockd with extra arguments (NULL-terminated, may be NULL). */
void		 lk_daemon_start(struct lk_daemon *dm,
		    const char *const *extra);
void		 lk_daemon_stop(struct lk_daemon *dm, int sig);
/* rm -rf, for the test's own directories only */
void		 lk_remove_tree(const char *dir);
/* A connected handle, named unless name is NULL; the caller frees it. */
struct keylock	*lk_client_at(const char *server, const char *name);
struct keylock	*lk_client(const char *name);	/* to lk_d over TCP */
/* A fake server: a listener on 127.0.0.1; *server gets its address. */
int		 lk_fake_listen(char *server, size_t len);
/* Connects kl to a fake server and returns the server's end. */
int		 lk_fake_pair(struct keylock *kl, int *lfd);
long long	 lk_stats_int(struct keylock *kl, const char *name);
/* A TCase with the daemon fixture and the per-test timeout, added to s. */
TCase		*lk_tcase(Suite *s, const char *name);

void		 lk_add_connect(Suite *s);	/* libkeylock_connect.c */
void		 lk_add_tls(Suite *s);
void		 lk_add_lock(Suite *s);		/* libkeylock_lock.c */
void		 lk_add_async(Suite *s);
void		 lk_add_failures(Suite *s);	/* libkeylock_replies.c */
void		 lk_add_replies(Suite *s);

#endif /* LIBKEYLOCK_UTIL_H */
