/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libkeylock locking against a real keylockd: tokens, TRYLOCK, timeouts,
 * UNLOCK and UNLOCKALL, REFRESH, shared and semaphore modes, BUSY,
 * multi-key locks, keys and other input checked before sending; and the
 * asynchronous LOCK (send now, receive the grant later).
 */
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "keylock.h"
#include "libkeylock_util.h"

/* lock */

START_TEST(grants_carry_increasing_tokens)
{
	struct keylock	*kl = lk_client(NULL);
	const char	*keys[] = { "a", "b" };
	uint64_t	 t1 = 0, t2 = 0, t3 = 0;

	ck_assert_st(kl, keylock_lock(kl, keys, 1, NULL, 1000, &t1),
	    KEYLOCK_OK);
	ck_assert_st(kl, keylock_unlock(kl, keys, 1, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_trylock(kl, keys, 2, NULL, &t2), KEYLOCK_OK);
	ck_assert_st(kl, keylock_unlockall(kl, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_lock(kl, keys, 2, NULL, KEYLOCK_WAIT_FOREVER,
	    &t3), KEYLOCK_OK);
	ck_assert_uint_gt(t1, 0);
	ck_assert_uint_gt(t2, t1);
	ck_assert_uint_gt(t3, t2);
	keylock_free(kl);
}
END_TEST

START_TEST(trylock_on_held_key_is_locked_naming_the_holder)
{
	struct keylock	*a = lk_client("alpha"), *b = lk_client(NULL);
	const char	*key = "report:2026";

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 1000, NULL),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_trylock(b, &key, 1, NULL, NULL),
	    KEYLOCK_ERR_LOCKED);
	ck_assert_msg(strstr(keylock_message(b), "report:2026") != NULL &&
	    strstr(keylock_message(b), "alpha") != NULL,
	    "LOCKED text \"%s\" names neither key nor holder",
	    keylock_message(b));
	ck_assert_msg(strncmp(keylock_reply(b), "ERR LOCKED ", 11) == 0,
	    "reply \"%s\"", keylock_reply(b));
	ck_assert_int_eq(keylock_last_status(b), KEYLOCK_ERR_LOCKED);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_OK);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(server_timeout_keeps_the_connection)
{
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL);
	const char	*key = "k";
	uint64_t		 t0;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	t0 = kt_now_ms();
	ck_assert_st(b, keylock_lock(b, &key, 1, NULL, 300, NULL),
	    KEYLOCK_ERR_TIMEOUT);
	ck_assert_window(250, 300, 1500, kt_now_ms() - t0);
	ck_assert_int_eq(keylock_is_connected(b), 1);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_OK);
	/* timeout 0 does not wait: LOCKED, as TRYLOCK */
	ck_assert_st(b, keylock_lock(b, &key, 1, NULL, 0, NULL),
	    KEYLOCK_ERR_LOCKED);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(unlock_counts_keys_and_refuses_unheld_ones)
{
	struct keylock	*kl = lk_client(NULL);
	const char	*keys[] = { "a", "b", "a" };
	unsigned long	 n = 0;

	ck_assert_st(kl, keylock_lock(kl, keys, 2, NULL, 1000, NULL),
	    KEYLOCK_OK);
	ck_assert_st(kl, keylock_trylock(kl, keys, 1, NULL, NULL),
	    KEYLOCK_ERR_HELD);
	ck_assert_st(kl, keylock_unlock(kl, keys, 3, &n), KEYLOCK_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert_st(kl, keylock_unlock(kl, keys, 1, &n),
	    KEYLOCK_ERR_NOTHELD);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), "a"));
	keylock_free(kl);
}
END_TEST

START_TEST(unlockall_releases_everything)
{
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL);
	const char	*x = "x", *y = "y", *both[] = { "x", "y" };
	unsigned long	 n = 0;

	ck_assert_st(a, keylock_lock(a, &x, 1, NULL, 1000, NULL), KEYLOCK_OK);
	ck_assert_st(a, keylock_lock(a, &y, 1, NULL, 1000, NULL), KEYLOCK_OK);
	ck_assert_st(a, keylock_unlockall(a, &n), KEYLOCK_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert_st(b, keylock_trylock(b, both, 2, NULL, NULL), KEYLOCK_OK);
	ck_assert_st(a, keylock_unlockall(a, &n), KEYLOCK_OK);
	ck_assert_uint_eq(n, 0);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(refresh_restarts_a_ttl)
{
	struct keylock_lock_opts lease = { .ttl_ms = kt_ms(400) };
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL);
	const char	*key = "lease";
	unsigned long	 n = 0;

	ck_assert_st(a, keylock_lock(a, &key, 1, &lease, 1000, NULL),
	    KEYLOCK_OK);
	kt_sleep_ms(kt_ms(250));
	ck_assert_st(a, keylock_refresh(a, &key, 1, kt_ms(400), &n),
	    KEYLOCK_OK);
	ck_assert_uint_eq(n, 1);
	/* 500 ms after the grant, 250 after REFRESH, both scaled */
	kt_sleep_ms(kt_ms(250));
	ck_assert_st(b, keylock_trylock(b, &key, 1, NULL, NULL),
	    KEYLOCK_ERR_LOCKED);
	/* it runs out if nobody refreshes it */
	ck_assert_st(b, keylock_lock(b, &key, 1, NULL, kt_ms(2000), NULL),
	    KEYLOCK_OK);
	ck_assert_st(a, keylock_refresh(a, &key, 1, 400, &n),
	    KEYLOCK_ERR_NOTHELD);
	ck_assert_st(a, keylock_refresh(a, &key, 1, 0, &n),
	    KEYLOCK_ERR_INVAL);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(shared_and_semaphore_options_reach_the_server)
{
	struct keylock_lock_opts shared = { .flags = KEYLOCK_SHARED };
	struct keylock_lock_opts sem2 = { .limit = 2 }, sem3 = { .limit = 3 };
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL),
			*c = lk_client(NULL);
	const char	*db = "db", *pool = "pool";

	ck_assert_st(a, keylock_trylock(a, &db, 1, &shared, NULL),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_trylock(b, &db, 1, &shared, NULL),
	    KEYLOCK_OK);
	ck_assert_st(c, keylock_trylock(c, &db, 1, NULL, NULL),
	    KEYLOCK_ERR_LOCKED);
	ck_assert_st(a, keylock_trylock(a, &pool, 1, &sem2, NULL),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_lock(b, &pool, 1, &sem2, 0, NULL),
	    KEYLOCK_OK);
	ck_assert_st(c, keylock_trylock(c, &pool, 1, &sem2, NULL),
	    KEYLOCK_ERR_LOCKED);
	ck_assert_st(c, keylock_trylock(c, &pool, 1, &sem3, NULL),
	    KEYLOCK_ERR_CONFLICT);
	keylock_free(a);
	keylock_free(b);
	keylock_free(c);
}
END_TEST

START_TEST(max_waiters_zero_is_busy)
{
	struct keylock_lock_opts nowait = { .flags = KEYLOCK_MAX_WAITERS,
	    .max_waiters = 0 };
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL);
	const char	*key = "k";

	ck_assert_st(a, keylock_lock(a, &key, 1, &nowait, 1000, NULL),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_lock(b, &key, 1, &nowait, 1000, NULL),
	    KEYLOCK_ERR_BUSY);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(multi_key_lock_is_atomic_and_queued_on_every_key)
{
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL),
			*c = lk_client(NULL);
	const char	*x = "x", *xy[] = { "y", "x" }, *y = "y";
	uint64_t	 t = 0;

	ck_assert_st(a, keylock_lock(a, &x, 1, NULL, 1000, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, xy, 2, NULL, 5000), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 100, &t), KEYLOCK_PENDING);
	/* y is free, but b waits for it in line: FIFO */
	ck_assert_st(c, keylock_trylock(c, &y, 1, NULL, NULL),
	    KEYLOCK_ERR_LOCKED);
	ck_assert_st(a, keylock_unlock(a, &x, 1, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, kt_ms(2000), &t), KEYLOCK_OK);
	ck_assert_uint_gt(t, 0);
	ck_assert_st(b, keylock_unlock(b, xy, 2, NULL), KEYLOCK_OK);
	keylock_free(a);
	keylock_free(b);
	keylock_free(c);
}
END_TEST

START_TEST(bad_key_is_refused_before_sending)
{
	static const char *const bad[] = { "a b", "a=b", "", "a\tb",
	    "a\nPING" };
	struct keylock	*kl = lk_client(NULL);
	char		 longkey[KEYLOCK_KEY_MAX + 2];
	const char	*k;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		k = bad[i];
		ck_assert_st(kl, keylock_trylock(kl, &k, 1, NULL, NULL),
		    KEYLOCK_ERR_BADKEY);
	}
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	k = longkey;
	ck_assert_st(kl, keylock_lock(kl, &k, 1, NULL, 0, NULL),
	    KEYLOCK_ERR_BADKEY);
	longkey[KEYLOCK_KEY_MAX] = '\0';	/* 250 bytes: fine */
	ck_assert_st(kl, keylock_lock(kl, &k, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_unlock(kl, NULL, 0, NULL), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_info(kl, NULL, &(const char *){ NULL }),
	    KEYLOCK_ERR_BADKEY);
	/* nothing reached the server: the next reply is the right one */
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	ck_assert_uint_eq(lk_stats_int(kl, "held"), 1);
	keylock_free(kl);
}
END_TEST

START_TEST(server_checks_utf8_in_keys)
{
	struct keylock	*kl = lk_client(NULL);
	const char	*k = "bad\xff";

	ck_assert_st(kl, keylock_trylock(kl, &k, 1, NULL, NULL),
	    KEYLOCK_ERR_BADKEY);
	ck_assert_str_ne(keylock_message(kl), "");
	ck_assert_msg(strncmp(keylock_reply(kl), "ERR BADKEY", 10) == 0,
	    "reply \"%s\"", keylock_reply(kl));
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	keylock_free(kl);
}
END_TEST

START_TEST(name_secret_and_raw_lines_are_checked_locally)
{
	struct keylock	*kl = lk_client(NULL);
	char		 name[KEYLOCK_NAME_MAX + 2];

	ck_assert_st(kl, keylock_name(kl, ""), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_name(kl, "two words"), KEYLOCK_ERR_INVAL);
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	ck_assert_st(kl, keylock_name(kl, name), KEYLOCK_ERR_INVAL);
	name[KEYLOCK_NAME_MAX] = '\0';
	ck_assert_st(kl, keylock_name(kl, name), KEYLOCK_OK);
	/* "user secret" is one space, between two words */
	ck_assert_st(kl, keylock_auth(kl, "a b c"), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_auth(kl, "a  b"), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_auth(kl, " b"), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_auth(kl, "a "), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_auth(kl, "a\tb"), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_request(kl, "PING\nSTATS", NULL),
	    KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_request(kl, "", NULL), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	keylock_free(kl);
}
END_TEST

/* async */

START_TEST(lock_recv_is_pending_until_the_grant)
{
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL);
	const char	*key = "k";
	struct pollfd	 pfd;
	uint64_t	 ta = 0, tb = 0;
	uint64_t		 t0;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, &ta), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL,
	    KEYLOCK_WAIT_FOREVER), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 0, &tb), KEYLOCK_PENDING);
	t0 = kt_now_ms();
	ck_assert_st(b, keylock_lock_recv(b, 200, &tb), KEYLOCK_PENDING);
	ck_assert_window(150, 200, 1000, kt_now_ms() - t0);
	ck_assert_uint_eq(tb, 0);

	/* the fd turns readable when the grant arrives */
	pfd.fd = keylock_fd(b);
	pfd.events = POLLIN;
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);
	ck_assert_st(a, keylock_unlock(a, &key, 1, NULL), KEYLOCK_OK);
	ck_assert_int_eq(poll(&pfd, 1, (int)kt_ms(2000)), 1);
	ck_assert_st(b, keylock_lock_recv(b, 0, &tb), KEYLOCK_OK);
	ck_assert_uint_gt(tb, ta);
	ck_assert_st(b, keylock_lock_recv(b, 0, &tb), KEYLOCK_ERR_INVAL);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(calls_during_a_pending_lock_are_refused)
{
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL);
	const char	*key = "k";

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL, 5000),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_ERR_INVAL);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL, 5000),
	    KEYLOCK_ERR_INVAL);
	ck_assert_st(b, keylock_check(b), KEYLOCK_ERR_INVAL);
	ck_assert_st(a, keylock_unlockall(a, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, kt_ms(2000), NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_OK);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

/* CANCEL: the wait goes, the connection and its other locks stay. */
START_TEST(lock_cancel_withdraws_the_wait_and_keeps_the_connection)
{
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL);
	const char	*key = "k", *other = "mine";
	uint64_t	 t = 0;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock(b, &other, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_cancel(b), KEYLOCK_ERR_INVAL);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL,
	    KEYLOCK_WAIT_FOREVER), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 50, &t), KEYLOCK_PENDING);
	ck_assert_st(b, keylock_lock_cancel(b), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, kt_ms(2000), &t),
	    KEYLOCK_ERR_CANCELLED);
	ck_assert_str_eq(keylock_status_word(KEYLOCK_ERR_CANCELLED),
	    "CANCELLED");
	ck_assert_uint_eq(t, 0);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_OK);
	ck_assert_int_eq(lk_stats_int(b, "waiting"), 0);
	ck_assert_st(b, keylock_unlock(b, &other, 1, NULL), KEYLOCK_OK);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

/* The race, many times: a grant that lands while the CANCEL is in flight
 * is reported (the lock is held), never lost, never doubled. */
START_TEST(lock_cancel_racing_a_grant_reports_which_won)
{
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL);
	const char	*key = "r";
	int		 granted = 0, cancelled = 0;

	for (int i = 0; i < 300; i++) {
		enum keylock_status	st;
		uint64_t		t = 0;

		ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, NULL),
		    KEYLOCK_OK);
		ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL,
		    KEYLOCK_WAIT_FOREVER), KEYLOCK_OK);
		/* either order on the wire: both outcomes happen */
		if (i % 2 == 0) {
			ck_assert_st(a, keylock_unlock(a, &key, 1, NULL),
			    KEYLOCK_OK);
			ck_assert_st(b, keylock_lock_cancel(b), KEYLOCK_OK);
		} else {
			ck_assert_st(b, keylock_lock_cancel(b), KEYLOCK_OK);
			ck_assert_st(a, keylock_unlock(a, &key, 1, NULL),
			    KEYLOCK_OK);
		}
		st = keylock_lock_recv(b, kt_ms(5000), &t);
		if (st == KEYLOCK_OK) {
			ck_assert_uint_gt(t, 0);
			ck_assert_st(b, keylock_unlock(b, &key, 1, NULL),
			    KEYLOCK_OK);
			granted++;
		} else {
			ck_assert_st(b, st, KEYLOCK_ERR_CANCELLED);
			cancelled++;
		}
	}
	ck_assert_int_eq(granted + cancelled, 300);
	ck_assert_int_gt(granted, 0);
	ck_assert_int_gt(cancelled, 0);
	ck_assert_int_eq(lk_stats_int(a, "keys"), 0);
	fprintf(stderr, "cancel race: %d granted first, %d cancelled\n",
	    granted, cancelled);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(close_withdraws_a_pending_wait)
{
	struct keylock	*a = lk_client(NULL), *b = lk_client(NULL),
			*c = lk_client(NULL);
	const char	*key = "k";
	uint64_t		 deadline;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL, 5000),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 50, NULL), KEYLOCK_PENDING);
	keylock_close(b);
	ck_assert_st(b, keylock_lock_recv(b, 0, NULL), KEYLOCK_ERR_INVAL);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_ERR_CLOSED);
	/* the server withdraws it: nobody stands in c's way */
	deadline = kt_now_ms() + (uint64_t)kt_ms(2000);
	while (lk_stats_int(c, "waiting") != 0)
		ck_assert_msg(kt_now_ms() < deadline, "the wait stayed");
	ck_assert_st(a, keylock_unlockall(a, NULL), KEYLOCK_OK);
	ck_assert_st(c, keylock_trylock(c, &key, 1, NULL, NULL), KEYLOCK_OK);
	keylock_free(a);
	keylock_free(b);
	keylock_free(c);
}
END_TEST

START_TEST(lock_forever_outlasts_the_reply_timeout)
{
	struct keylock	*b;
	const char	*key = "k";
	int		 p[2];
	char		 ch;
	pid_t		 pid;
	uint64_t		 t0;

	/* A holder in another process lets go after 600 ms. */
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_ne(pid = fork(), -1);
	if (pid == 0) {
		struct keylock	*a = keylock_new();

		if (keylock_connect(a, kt_d->addr, NULL) != KEYLOCK_OK ||
		    keylock_lock(a, &key, 1, NULL, 0, NULL) != KEYLOCK_OK ||
		    write(p[1], "x", 1) != 1)
			_exit(1);
		kt_sleep_ms(600);
		keylock_free(a);
		_exit(0);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], &ch, 1), 1);
	b = lk_client(NULL);
	keylock_set_timeout(b, 200);
	t0 = kt_now_ms();
	ck_assert_st(b, keylock_lock(b, &key, 1, NULL, KEYLOCK_WAIT_FOREVER,
	    NULL), KEYLOCK_OK);
	ck_assert_window(400, 600, 3000, kt_now_ms() - t0);
	waitpid(pid, NULL, 0);
	close(p[0]);
	keylock_free(b);
}
END_TEST

void
lk_add_lock(Suite *s)
{
	TCase	*tc;

	tc = lk_tcase(s, "lock");
	tcase_add_test(tc, grants_carry_increasing_tokens);
	tcase_add_test(tc, trylock_on_held_key_is_locked_naming_the_holder);
	tcase_add_test(tc, server_timeout_keeps_the_connection);
	tcase_add_test(tc, unlock_counts_keys_and_refuses_unheld_ones);
	tcase_add_test(tc, unlockall_releases_everything);
	tcase_add_test(tc, refresh_restarts_a_ttl);
	tcase_add_test(tc, shared_and_semaphore_options_reach_the_server);
	tcase_add_test(tc, max_waiters_zero_is_busy);
	tcase_add_test(tc, multi_key_lock_is_atomic_and_queued_on_every_key);
	tcase_add_test(tc, bad_key_is_refused_before_sending);
	tcase_add_test(tc, server_checks_utf8_in_keys);
	tcase_add_test(tc, name_secret_and_raw_lines_are_checked_locally);
}

void
lk_add_async(Suite *s)
{
	TCase	*tc;

	tc = lk_tcase(s, "async");
	tcase_add_test(tc, lock_recv_is_pending_until_the_grant);
	tcase_add_test(tc, calls_during_a_pending_lock_are_refused);
	tcase_add_test(tc, close_withdraws_a_pending_wait);
	tcase_add_test(tc,
	    lock_cancel_withdraws_the_wait_and_keeps_the_connection);
	tcase_add_test(tc, lock_cancel_racing_a_grant_reports_which_won);
	tcase_add_test(tc, lock_forever_outlasts_the_reply_timeout);
}
