/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libkeylock sessions against a real keylockd (libkeylock(3), SESSIONS):
 * the settings (keylock_set_session(), "session=MS" in the server list,
 * $KEYLOCK_SESSION); a dropped or reset connection resumed with the same
 * grant, by keylock_keepalive() or by the next call; a LOCK that waits
 * across a drop and is granted while detached; the suspended state;
 * GONE when the session was killed; the loss reported at the window's end,
 * never before, when the server stays unreachable; pings every grace / 3;
 * and QUIT ending the session at once.
 *
 * A connection is dropped under the library on purpose: shutdown(2) of its
 * socket (a FIN both ways) or, for a reset, a new socket dup2(2)ed over it
 * after SO_LINGER 0, so that the old one is closed with an RST.
 */
#include <sys/socket.h>
#include <sys/types.h>
#include <netinet/in.h>

#include <errno.h>
#include <inttypes.h>
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

static struct keylock *
sess_client(long grace)
{
	struct keylock	*kl = keylock_new();

	ck_assert_ptr_nonnull(kl);
	keylock_set_session(kl, grace);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL), KEYLOCK_OK);
	ck_assert_int_eq(keylock_session_grace(kl), grace);
	ck_assert_int_eq(keylock_suspended(kl), 0);
	return kl;
}

static void
drop(struct keylock *kl, int reset)
{
	struct linger	l = { 1, 0 };
	int		fd = keylock_fd(kl), s;

	ck_assert_int_ne(fd, -1);
	if (!reset) {
		ck_assert_int_eq(shutdown(fd, SHUT_RDWR), 0);
		return;
	}
	ck_assert_int_ne(s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0),
	    -1);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l,
	    sizeof(l)), 0);
	ck_assert_int_ne(dup2(s, fd), -1);
	close(s);
}

static void
wait_stat(struct keylock *kl, const char *name, long long want, long ms)
{
	int64_t		until = (int64_t)kt_now_ms() + kt_ms(ms);
	long long	got;

	while ((got = lk_stats_int(kl, name)) != want &&
	    (int64_t)kt_now_ms() < until)
		kt_sleep_ms(10);
	ck_assert_msg(got == want, "STATS %s is %lld, want %lld", name, got,
	    want);
}

static void
wait_waiters(struct keylock *kl, const char *key, size_t want)
{
	int64_t		until = (int64_t)kt_now_ms() + kt_ms(5000);
	json_t		*root;
	size_t		 got;

	for (;;) {
		ck_assert_st(kl, keylock_info_json(kl, key, &root), KEYLOCK_OK);
		got = json_array_size(json_object_get(root, "waiters"));
		json_decref(root);
		if (got == want || (int64_t)kt_now_ms() >= until)
			break;
		kt_sleep_ms(10);
	}
	ck_assert_uint_eq(got, want);
}

/* The one holder of key, as INFO shows it. */
static json_t *
holder_of(struct keylock *kl, const char *key)
{
	json_t	*root, *h;

	ck_assert_st(kl, keylock_info_json(kl, key, &root), KEYLOCK_OK);
	ck_assert_int_eq(json_array_size(json_object_get(root, "holders")),
	    1);
	h = json_incref(json_array_get(json_object_get(root, "holders"), 0));
	json_decref(root);
	return h;
}

START_TEST(session_settings)
{
	struct keylock	*kl = keylock_new();
	char		 list[600];

	ck_assert_ptr_nonnull(kl);
	snprintf(list, sizeof(list), "%s, session=1500", kt_d->addr);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_OK);
	ck_assert_int_eq(keylock_session_grace(kl), 1500);
	ck_assert_int_eq(setenv("KEYLOCK_SESSION", "1200", 1), 0);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL), KEYLOCK_OK);
	ck_assert_int_eq(keylock_session_grace(kl), 1200);
	/* the list's setting wins over the environment's */
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_OK);
	ck_assert_int_eq(keylock_session_grace(kl), 1500);
	/* and the caller's over both */
	keylock_set_session(kl, 0);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_OK);
	ck_assert_int_eq(keylock_session_grace(kl), 0);
	keylock_set_session(kl, KEYLOCK_SESSION_AUTO);
	ck_assert_int_eq(setenv("KEYLOCK_SESSION", "soon", 1), 0);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL),
	    KEYLOCK_ERR_INVAL);
	ck_assert_int_eq(setenv("KEYLOCK_SESSION", "0", 1), 0);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL), KEYLOCK_OK);
	ck_assert_int_eq(keylock_session_grace(kl), 0);
	ck_assert_int_eq(unsetenv("KEYLOCK_SESSION"), 0);
	snprintf(list, sizeof(list), "%s,session=x", kt_d->addr);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_ERR_INVAL);
	snprintf(list, sizeof(list), "session=1,%s,session=2", kt_d->addr);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_ERR_INVAL);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	/* keylock_session() on a plain connection; a second is refused */
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_session(kl, 0), KEYLOCK_OK);
	ck_assert_int_eq(keylock_session_grace(kl),
	    KEYLOCK_SESSION_GRACE_DEFAULT);
	ck_assert_st(kl, keylock_session(kl, 2000), KEYLOCK_ERR_SESSION);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	/* the server bounds the grace */
	keylock_set_session(kl, 86400000L);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL),
	    KEYLOCK_ERR_LIMIT);
	keylock_free(kl);
}
END_TEST

START_TEST(resume_after_reset_keeps_the_grant)
{
	struct keylock	*kl = sess_client(kt_ms(3000)), *b = lk_client("b");
	const char	*k = "s:a";
	uint64_t	 t = 0;
	unsigned long	 n = 0;
	json_t		*h;

	ck_assert_st(kl, keylock_lock(kl, &k, 1, NULL, 1000, &t), KEYLOCK_OK);
	drop(kl, 1);
	wait_stat(b, "sessions_detached", 1, 5000);
	/* detached, the session still holds it */
	ck_assert_st(b, keylock_trylock(b, &k, 1, NULL, NULL),
	    KEYLOCK_ERR_LOCKED);
	h = holder_of(b, k);
	ck_assert_msg(json_is_integer(json_object_get(h, "detached_ms")),
	    "INFO shows no detached_ms");
	json_decref(h);
	/* the library finds out, and is suspended, not lost */
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_OK);
	ck_assert_int_eq(keylock_suspended(kl), 1);
	ck_assert_int_eq(keylock_fd(kl), -1);
	ck_assert_int_eq(keylock_keepalive_ms(kl), 0);
	ck_assert_st(kl, keylock_keepalive(kl, -1), KEYLOCK_OK);
	ck_assert_int_eq(keylock_suspended(kl), 0);
	ck_assert_int_ne(keylock_fd(kl), -1);
	h = holder_of(b, k);
	ck_assert_int_eq(json_integer_value(json_object_get(h, "token")),
	    (json_int_t)t);
	ck_assert_ptr_null(json_object_get(h, "detached_ms"));
	json_decref(h);
	ck_assert_st(kl, keylock_unlock(kl, &k, 1, &n), KEYLOCK_OK);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_ge(lk_stats_int(b, "sessions_resumed"), 1);
	keylock_free(kl);
	wait_stat(b, "sessions", 0, 5000);
	ck_assert_int_eq(lk_stats_int(b, "sessions_expired"), 0);
	ck_assert_int_eq(lk_stats_int(b, "keys"), 0);
	keylock_free(b);
}
END_TEST

START_TEST(call_after_drop_resumes_invisibly)
{
	struct keylock	*kl = sess_client(kt_ms(3000)), *b = lk_client("b");
	const char	*keys[] = { "s:x", "s:y" };
	uint64_t	 t = 0, t2 = 0;
	unsigned long	 n = 0;

	ck_assert_st(kl, keylock_lock(kl, keys, 1, NULL, 1000, &t),
	    KEYLOCK_OK);
	/* a FIN, not noticed until the next call uses the connection */
	drop(kl, 0);
	ck_assert_st(kl, keylock_trylock(kl, keys + 1, 1, NULL, &t2),
	    KEYLOCK_OK);
	ck_assert_uint_gt(t2, t);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	drop(kl, 1);
	ck_assert_st(kl, keylock_unlockall(kl, &n), KEYLOCK_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(lk_stats_int(b, "keys"), 0);
	keylock_free(kl);
	keylock_free(b);
}
END_TEST

START_TEST(lock_waits_across_a_drop)
{
	struct keylock	*a = lk_client("a"), *kl = sess_client(kt_ms(3000));
	const char	*k = "s:w";
	uint64_t	 ta = 0, t = 0;
	json_t		*h;

	ck_assert_st(a, keylock_lock(a, &k, 1, NULL, 1000, &ta), KEYLOCK_OK);
	ck_assert_st(kl, keylock_lock_send(kl, &k, 1, NULL,
	    KEYLOCK_WAIT_FOREVER), KEYLOCK_OK);
	ck_assert_st(kl, keylock_lock_recv(kl, 50, &t), KEYLOCK_PENDING);
	wait_waiters(a, k, 1);
	drop(kl, 0);
	wait_stat(a, "sessions_detached", 1, 5000);
	/* granted while detached: RESUME shows it held */
	ck_assert_st(a, keylock_unlock(a, &k, 1, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_lock_recv(kl, KEYLOCK_WAIT_FOREVER, &t),
	    KEYLOCK_OK);
	ck_assert_uint_gt(t, ta);
	h = holder_of(a, k);
	ck_assert_int_eq(json_integer_value(json_object_get(h, "token")),
	    (json_int_t)t);
	json_decref(h);
	/* and a wait that is still queued after the RESUME */
	ck_assert_st(a, keylock_lock_send(a, &k, 1, NULL,
	    KEYLOCK_WAIT_FOREVER), KEYLOCK_OK);
	ck_assert_st(kl, keylock_unlock(kl, &k, 1, NULL), KEYLOCK_OK);
	ck_assert_st(a, keylock_lock_recv(a, KEYLOCK_WAIT_FOREVER, &ta),
	    KEYLOCK_OK);
	ck_assert_st(kl, keylock_lock_send(kl, &k, 1, NULL, 10000),
	    KEYLOCK_OK);
	ck_assert_st(kl, keylock_lock_recv(kl, 50, &t), KEYLOCK_PENDING);
	drop(kl, 1);
	ck_assert_st(kl, keylock_lock_recv(kl, 300, &t), KEYLOCK_PENDING);
	ck_assert_st(a, keylock_unlock(a, &k, 1, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_lock_recv(kl, KEYLOCK_WAIT_FOREVER, &t),
	    KEYLOCK_OK);
	ck_assert_uint_gt(t, ta);
	ck_assert_st(kl, keylock_quit(kl), KEYLOCK_OK);
	wait_stat(a, "sessions", 0, 5000);
	ck_assert_int_eq(lk_stats_int(a, "keys"), 0);
	keylock_free(kl);
	keylock_free(a);
}
END_TEST

START_TEST(gone_when_the_session_was_killed)
{
	struct keylock	*kl = sess_client(kt_ms(3000)), *b;
	struct kt_conn	*op;
	const char	*k = "s:g";
	json_t		*h;

	if (!kt_have_unix())
		return;
	b = lk_client("b");
	ck_assert_st(kl, keylock_lock(kl, &k, 1, NULL, 1000, NULL), KEYLOCK_OK);
	h = holder_of(b, k);
	op = kt_connect_unix();
	kt_send(op, "KILL %lld", (long long)json_integer_value(
	    json_object_get(h, "client")));
	kt_expect_line(op, "OK 1");
	json_decref(h);
	ck_assert_int_eq(lk_stats_int(b, "keys"), 0);
	ck_assert_st(kl, keylock_unlock(kl, &k, 1, NULL), KEYLOCK_ERR_GONE);
	ck_assert_int_eq(keylock_session_grace(kl), 0);
	ck_assert_int_eq(keylock_suspended(kl), 0);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_ERR_CLOSED);
	keylock_free(kl);
	keylock_free(b);
}
END_TEST

START_TEST(loss_at_the_window_end_not_before)
{
	long		 g = 800;
	struct keylock	*kl = sess_client(g), *b;
	const char	*k = "s:l";
	int64_t		 before, after, lost;

	keylock_set_timeout(kl, 5000);
	before = (int64_t)kt_now_ms();
	ck_assert_st(kl, keylock_lock(kl, &k, 1, NULL, 1000, NULL), KEYLOCK_OK);
	after = (int64_t)kt_now_ms();
	kt_daemon_signal(kt_d, SIGSTOP);
	drop(kl, 1);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_OK);
	ck_assert_int_eq(keylock_suspended(kl), 1);
	ck_assert_st(kl, keylock_keepalive(kl, -1), KEYLOCK_ERR_CLOSED);
	lost = (int64_t)kt_now_ms();
	kt_daemon_signal(kt_d, SIGCONT);
	ck_assert_msg(lost >= before + g - 1, "lost %lld ms after the LOCK "
	    "was sent, before the window of %ld ms ended",
	    (long long)(lost - before), g);
	ck_assert_msg(lost <= after + g + kt_upper(50, 1000), "the loss came "
	    "%lld ms after the LOCK's reply, grace %ld", (long long)(lost -
	    after), g);
	ck_assert_int_eq(keylock_suspended(kl), 0);
	ck_assert_int_eq(keylock_session_grace(kl), 0);
	ck_assert_msg(strstr(keylock_message(kl), "lost") != NULL, "%s",
	    keylock_message(kl));
	/* the server lets go by itself, the grace after it saw the reset */
	b = lk_client("b");
	wait_stat(b, "sessions", 0, 5000);
	wait_stat(b, "keys", 0, 1000);
	ck_assert_int_ge(lk_stats_int(b, "sessions_expired"), 1);
	keylock_free(kl);
	keylock_free(b);
}
END_TEST

START_TEST(pings_every_third_of_the_grace)
{
	long		 g = kt_ms(900);
	struct keylock	*kl = sess_client(g);
	long		 next;

	next = keylock_keepalive_ms(kl);
	ck_assert_msg(next > 0 && next <= g / 3, "next keepalive in %ld ms, "
	    "grace %ld", next, g);
	ck_assert_st(kl, keylock_keepalive(kl, 0), KEYLOCK_OK);
	kt_sleep_ms((uint64_t)next + 5);
	ck_assert_int_eq(keylock_keepalive_ms(kl), 0);
	ck_assert_st(kl, keylock_keepalive(kl, 0), KEYLOCK_OK);
	next = keylock_keepalive_ms(kl);
	ck_assert_msg(next > g / 3 - kt_upper(50, 250), "after the ping the "
	    "next is due in %ld ms", next);
	/* without a session: only whether it is connected */
	keylock_set_session(kl, 0);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL), KEYLOCK_OK);
	ck_assert_int_eq(keylock_keepalive_ms(kl), -1);
	ck_assert_st(kl, keylock_keepalive(kl, 0), KEYLOCK_OK);
	keylock_close(kl);
	ck_assert_st(kl, keylock_keepalive(kl, 0), KEYLOCK_ERR_CLOSED);
	keylock_free(kl);
}
END_TEST

void
lk_add_session(Suite *s)
{
	TCase	*tc = lk_tcase(s, "session");

	tcase_add_test(tc, session_settings);
	tcase_add_test(tc, resume_after_reset_keeps_the_grant);
	tcase_add_test(tc, call_after_drop_resumes_invisibly);
	tcase_add_test(tc, lock_waits_across_a_drop);
	tcase_add_test(tc, gone_when_the_session_was_killed);
	tcase_add_test(tc, loss_at_the_window_end_not_before);
	tcase_add_test(tc, pings_every_third_of_the_grace);
}
