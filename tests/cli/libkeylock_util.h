/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the check_libkeylock tests (libkeylock_*.c, one program) share on
 * top of the C tests' harness (kltest.h: the private daemon kt_d, started
 * by the fixture, time, deadlines): clients of the daemon, a fake server,
 * and one function per TCase that adds it to the suite, in the order
 * main() runs them. The functions assert through Check; call them from a
 * test.
 */
#ifndef LIBKEYLOCK_UTIL_H
#define LIBKEYLOCK_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>

#include "keylock.h"
#include "kltest.h"

#define ck_assert_st(kl, got, want) do {				\
	enum keylock_status _g = (got), _w = (want);			\
	ck_assert_msg(_g == _w, "%s: %s \"%s\", want %s", #got,		\
	    keylock_status_word(_g), keylock_message(kl),		\
	    keylock_status_word(_w));					\
} while (0)

/* ms took at least lo and at most kt_upper(nominal, hi): the slack above
 * the nominal time scales with KEYLOCKD_TEST_SLOW, as the other suites'. */
#define ck_assert_window(lo, nominal, hi, ms) do {			\
	long long _ms = (long long)(ms), _hi = kt_upper((nominal), (hi)); \
	ck_assert_msg(_ms >= (lo) && _ms <= _hi, "took %lld ms, want "	\
	    "%d to %lld", _ms, (lo), _hi);				\
} while (0)

/* A connected handle, named unless name is NULL; the caller frees it. */
struct keylock	*lk_client_at(const char *server, const char *name);
struct keylock	*lk_client(const char *name);	/* to kt_d over TCP */
/* A fake server: a listener on 127.0.0.1; *server gets its address. */
int		 lk_fake_listen(char *server, size_t len);
/* Connects kl to a fake server and returns the server's end. */
int		 lk_fake_pair(struct keylock *kl, int *lfd);
long long	 lk_stats_int(struct keylock *kl, const char *name);
/* A TCase with a private daemon per test and the per-test timeout, added
 * to s. */
TCase		*lk_tcase(Suite *s, const char *name);

void		 lk_add_connect(Suite *s);	/* libkeylock_connect.c */
void		 lk_add_tls(Suite *s);
void		 lk_add_lock(Suite *s);		/* libkeylock_lock.c */
void		 lk_add_async(Suite *s);
void		 lk_add_failures(Suite *s);	/* libkeylock_replies.c */
void		 lk_add_replies(Suite *s);
void		 lk_add_session(Suite *s);	/* libkeylock_session.c */

#endif /* LIBKEYLOCK_UTIL_H */
