/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libkeylock connecting: addresses (TCP, unix, bracketed, KEYLOCK_SERVER),
 * refusals and malformed ones, the connect deadline, AUTH on connect,
 * server lists (which server answers, what moves on, the messages), the
 * socket's flags; and TLS: its files, where it applies, and a handshake
 * that fails or hangs.
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

/* connect */

START_TEST(connect_by_tcp_unix_and_bracketed_address)
{
	char		 bracketed[40];
	const char	*servers[3] = { kt_d->addr, kt_d->sock, bracketed };

	snprintf(bracketed, sizeof(bracketed), "[127.0.0.1]:%d", kt_d->port);
	for (int i = 0; i < 3; i++) {
		struct keylock	*kl = lk_client_at(servers[i], NULL);

		ck_assert_int_eq(keylock_is_connected(kl), 1);
		ck_assert_int_ge(keylock_fd(kl), 0);
		ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
		keylock_free(kl);
	}
}
END_TEST

START_TEST(connect_without_server_uses_keylock_server)
{
	struct keylock	*kl = keylock_new();

	setenv("KEYLOCK_SERVER", kt_d->sock, 1);
	ck_assert_st(kl, keylock_connect(kl, NULL, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	setenv("KEYLOCK_SERVER", kt_d->addr, 1);
	ck_assert_st(kl, keylock_connect(kl, "", NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	unsetenv("KEYLOCK_SERVER");
	keylock_free(kl);
}
END_TEST

START_TEST(connect_refused_is_io_naming_the_address)
{
	struct keylock	*kl = keylock_new();
	char		 server[32];
	int		 lfd = lk_fake_listen(server, sizeof(server));

	close(lfd);		/* nobody listens there now */
	ck_assert_st(kl, keylock_connect(kl, server, NULL), KEYLOCK_ERR_IO);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), server));
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), "refused"));
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_int_eq(keylock_fd(kl), -1);
	keylock_free(kl);
}
END_TEST

START_TEST(malformed_address_is_inval)
{
	static const char *const bad[] = { "127.0.0.1:", "127.0.0.1:0",
	    "127.0.0.1:65536", "127.0.0.1:7a", "[::1", "[::1]x", ":7711",
	    "[]:7711", "127.0.0.1:-1" };
	struct keylock	*kl = keylock_new();

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(keylock_connect(kl, bad[i], NULL) ==
		    KEYLOCK_ERR_INVAL, "%s: %s", bad[i],
		    keylock_status_word(keylock_last_status(kl)));
		ck_assert_ptr_nonnull(strstr(keylock_message(kl), bad[i]));
	}
	keylock_free(kl);
}
END_TEST

START_TEST(connect_deadline_bounds_a_handshake_that_hangs)
{
	struct keylock	*fill[2], *kl = keylock_new();
	char		 server[32];
	int		 lfd = lk_fake_listen(server, sizeof(server));
	uint64_t		 t0;

	/* A full accept queue drops SYNs: connect() hangs. */
	ck_assert_int_eq(listen(lfd, 0), 0);
	for (int i = 0; i < 2; i++) {
		fill[i] = keylock_new();
		keylock_set_timeout(fill[i], 100);
		keylock_connect(fill[i], server, NULL);
	}
	keylock_set_timeout(kl, 300);
	t0 = kt_now_ms();
	ck_assert_st(kl, keylock_connect(kl, server, NULL),
	    KEYLOCK_ERR_DEADLINE);
	ck_assert_window(250, 300, 2000, kt_now_ms() - t0);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), "timed out"));
	for (int i = 0; i < 2; i++)
		keylock_free(fill[i]);
	keylock_free(kl);
	close(lfd);
}
END_TEST

START_TEST(auth_secret_is_sent_on_connect)
{
	const char	*args[3] = { "--auth-file", NULL, NULL };
	struct kt_daemon *ad;
	struct keylock	*kl = keylock_new();
	char		 path[sizeof(kt_d->dir) + 8];

	kt_secret_file(kt_d->dir, "secret", "s3cret", path, sizeof(path));
	args[1] = path;
	ad = kt_daemon_start_at(KT_AT, NULL, args);

	ck_assert_st(kl, keylock_connect(kl, ad->addr, "s3cret"), KEYLOCK_OK);
	ck_assert_st(kl, keylock_stats(kl, &(const char *){ NULL }),
	    KEYLOCK_OK);
	ck_assert_st(kl, keylock_connect(kl, ad->addr, "wrong"),
	    KEYLOCK_ERR_AUTH);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_str_ne(keylock_message(kl), "");
	ck_assert_st(kl, keylock_connect(kl, ad->addr, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	ck_assert_st(kl, keylock_trylock(kl, &(const char *){ "k" }, 1,
	    NULL, NULL), KEYLOCK_ERR_AUTH);
	keylock_free(kl);
	kt_daemon_stop(ad);
}
END_TEST

/* server lists */

/* The daemon's count of connections so far, this one's included. */
static long long
connections_of(const char *server)
{
	struct keylock	*kl = lk_client_at(server, NULL);
	long long	 n = lk_stats_int(kl, "connections");

	keylock_free(kl);
	return n;
}

START_TEST(connect_list_takes_the_first_that_answers)
{
	struct keylock	*kl = keylock_new();
	char		 dead[32], list[1024];
	int		 lfd = lk_fake_listen(dead, sizeof(dead));

	long long	 n0 = connections_of(kt_d->addr);

	close(lfd);		/* a closed port */
	snprintf(list, sizeof(list), "%s, %s/none.sock ,%s", dead, kt_d->dir,
	    kt_d->addr);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_OK);
	ck_assert_int_eq(lk_stats_int(kl, "connections"), n0 + 1);

	/* two that answer: the first */
	snprintf(list, sizeof(list), "%s,%s", kt_d->sock, dead);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);

	setenv("KEYLOCK_SERVER", list, 1);
	ck_assert_st(kl, keylock_connect(kl, NULL, NULL), KEYLOCK_OK);
	unsetenv("KEYLOCK_SERVER");

	/* none: each named, with why; the last one's status */
	snprintf(list, sizeof(list), "%s,%s/none.sock", dead, kt_d->dir);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_ERR_IO);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_msg(strncmp(keylock_message(kl), "cannot reach keylockd: ",
	    23) == 0, "%s", keylock_message(kl));
	snprintf(list, sizeof(list), "connect %s: Connection refused; "
	    "connect %s/none.sock: No such file", dead, kt_d->dir);
	ck_assert_msg(strstr(keylock_message(kl), list) != NULL, "%s",
	    keylock_message(kl));
	keylock_free(kl);
}
END_TEST

/* The transport ("tcp", "unix") of the connection named name, as the
 * daemon's CLIENTS (an operator's, over the unix socket) lists it. */
static char *
transport_of(const char *name)
{
	struct keylock	*op = lk_client_at(kt_d->sock, NULL);
	const char	*text;
	json_t		*root, *o;
	size_t		 i;
	char		*t = NULL;

	ck_assert_st(op, keylock_request(op, "CLIENTS", &text), KEYLOCK_OK);
	ck_assert_ptr_nonnull(root = json_loads(text, 0, NULL));
	json_array_foreach(json_object_get(root, "clients"), i, o) {
		const char	*n = json_string_value(json_object_get(o,
				    "name"));

		if (n != NULL && strcmp(n, name) == 0)
			t = strdup(json_string_value(json_object_get(o,
			    "transport")));
	}
	json_decref(root);
	keylock_free(op);
	ck_assert_msg(t != NULL, "no client named %s", name);
	return t;
}

/* keylock_failover(): the next server of the list, round its start, each
 * other one at most once; then INVAL, and the connection stays. */
START_TEST(failover_moves_through_the_list_once)
{
	struct keylock	*kl = keylock_new();
	const char	*key[] = { "fo" };
	char		 dead[32], list[1024], *t;
	int		 lfd = lk_fake_listen(dead, sizeof(dead));

	close(lfd);		/* a closed port */
	ck_assert_st(kl, keylock_failover(kl), KEYLOCK_ERR_CLOSED);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_failover(kl), KEYLOCK_ERR_INVAL);
	ck_assert_str_eq(keylock_message(kl), "no other server in the list");
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);

	/* the unix socket first; the dead port is passed over */
	snprintf(list, sizeof(list), "%s,%s,%s", kt_d->sock, dead,
	    kt_d->addr);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_name(kl, "fo-1"), KEYLOCK_OK);
	ck_assert_str_eq(t = transport_of("fo-1"), "unix");
	free(t);
	ck_assert_st(kl, keylock_lock(kl, key, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_failover(kl), KEYLOCK_OK);
	ck_assert_st(kl, keylock_name(kl, "fo-2"), KEYLOCK_OK);
	ck_assert_str_eq(t = transport_of("fo-2"), "tcp");
	free(t);
	/* the old connection is gone, and its lock with it */
	ck_assert_st(kl, keylock_trylock(kl, key, 1, NULL, NULL), KEYLOCK_OK);
	/* round the start: the unix socket again */
	ck_assert_st(kl, keylock_failover(kl), KEYLOCK_OK);
	ck_assert_st(kl, keylock_name(kl, "fo-3"), KEYLOCK_OK);
	ck_assert_str_eq(t = transport_of("fo-3"), "unix");
	free(t);
	/* every other server moved to: the list is used up */
	ck_assert_st(kl, keylock_failover(kl), KEYLOCK_ERR_INVAL);
	ck_assert_str_eq(keylock_message(kl),
	    "every server of the list has been tried");
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	/* keylock_connect() starts the count again; a LOCK in flight
	 * stays where it is */
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_lock_send(kl, key, 1, NULL, 1000),
	    KEYLOCK_OK);
	ck_assert_st(kl, keylock_failover(kl), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_lock_recv(kl, KEYLOCK_WAIT_FOREVER, NULL),
	    KEYLOCK_OK);
	ck_assert_st(kl, keylock_failover(kl), KEYLOCK_OK);
	keylock_free(kl);
}
END_TEST

START_TEST(connect_list_malformed_is_inval_and_tries_none)
{
	struct keylock	*kl = keylock_new();
	const char	*a = kt_d->addr;
	char		 bad[7][600];
	long long	 n0 = connections_of(a);

	snprintf(bad[0], sizeof(bad[0]), "%s,", a);
	snprintf(bad[1], sizeof(bad[1]), ",%s", a);
	snprintf(bad[2], sizeof(bad[2]), "%s,,%s", a, a);
	snprintf(bad[3], sizeof(bad[3]), "%s, ,%s", a, a);
	snprintf(bad[4], sizeof(bad[4]), " ");
	snprintf(bad[5], sizeof(bad[5]), "%s,127.0.0.1:0", a);
	snprintf(bad[6], sizeof(bad[6]), "%s,[::1", a);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(keylock_connect(kl, bad[i], NULL) ==
		    KEYLOCK_ERR_INVAL, "%s: %s", bad[i],
		    keylock_status_word(keylock_last_status(kl)));
		ck_assert_int_eq(keylock_is_connected(kl), 0);
	}
	keylock_connect(kl, bad[0], NULL);
	ck_assert_msg(strstr(keylock_message(kl), "server 2 is empty") !=
	    NULL, "%s", keylock_message(kl));
	ck_assert_int_eq(connections_of(a), n0 + 1);	/* that one only */
	keylock_free(kl);
}
END_TEST

/*
 * A server whose kernel accepts but which never replies: without a secret
 * it answers (nothing is asked of it while connecting); with one, AUTH
 * runs out of that server's deadline and the next one is tried. A wrong
 * secret is never taken to the next server.
 */
START_TEST(connect_list_auth_moves_on_only_when_silent)
{
	const char	*args[3] = { "--auth-file", NULL, NULL };
	struct kt_daemon *ad;
	struct keylock	*kl = keylock_new();
	char		 path[sizeof(kt_d->dir) + 8], hung[32], list[1024];
	int		 lfd = lk_fake_listen(hung, sizeof(hung));
	uint64_t	 t0;
	long long	 n0;

	kt_secret_file(kt_d->dir, "secret", "s3cret", path, sizeof(path));
	args[1] = path;
	ad = kt_daemon_start_at(KT_AT, NULL, args);
	keylock_set_timeout(kl, 300);
	n0 = connections_of(kt_d->addr);

	snprintf(list, sizeof(list), "%s,%s", hung, ad->addr);
	ck_assert_st(kl, keylock_connect(kl, list, NULL), KEYLOCK_OK);
	t0 = kt_now_ms();
	ck_assert_st(kl, keylock_connect(kl, list, "s3cret"), KEYLOCK_OK);
	ck_assert_window(250, 300, 2000, kt_now_ms() - t0);
	ck_assert_int_eq(keylock_timeout(kl), 300);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);

	/* wrong: the hung one is passed, the daemon's ERR AUTH stops */
	snprintf(list, sizeof(list), "%s,%s,%s", hung, ad->addr, kt_d->addr);
	ck_assert_st(kl, keylock_connect(kl, list, "wrong"),
	    KEYLOCK_ERR_AUTH);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_int_eq(connections_of(kt_d->addr), n0 + 1);

	/* the hung one last: its deadline, in the message */
	snprintf(list, sizeof(list), "%s/none.sock,%s", kt_d->dir, hung);
	ck_assert_st(kl, keylock_connect(kl, list, "s3cret"),
	    KEYLOCK_ERR_DEADLINE);
	ck_assert_msg(strstr(keylock_message(kl), hung) != NULL &&
	    strstr(keylock_message(kl), "none.sock") != NULL, "%s",
	    keylock_message(kl));
	keylock_free(kl);
	kt_daemon_stop(ad);
	close(lfd);
}
END_TEST

START_TEST(new_handle_is_not_connected)
{
	struct keylock	*kl = keylock_new();

	ck_assert_int_eq(keylock_fd(kl), -1);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_int_eq(keylock_timeout(kl), KEYLOCK_TIMEOUT_DEFAULT);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_CLOSED);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_ERR_CLOSED);
	keylock_close(kl);
	keylock_free(kl);
	keylock_free(NULL);
}
END_TEST

START_TEST(socket_is_nonblocking_and_close_on_exec)
{
	struct keylock	*kl = lk_client(NULL);
	int		 fd = keylock_fd(kl);

	ck_assert(fcntl(fd, F_GETFL) & O_NONBLOCK);
	ck_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	keylock_free(kl);
}
END_TEST

/* tls: the handshake against the real thing is tests/cli/tls.sh */

START_TEST(tls_files_are_checked_when_set)
{
	struct keylock_tls_opts	 o = { .ca_file = "/nonexistent/ca.pem" };
	struct keylock		*kl = keylock_new();

	ck_assert_st(kl, keylock_set_tls(kl, &o), KEYLOCK_ERR_TLS);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl),
	    "/nonexistent/ca.pem"));
	o.ca_file = NULL;
	o.key_file = "key.pem";
	ck_assert_st(kl, keylock_set_tls(kl, &o), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_set_tls(kl, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	keylock_free(kl);
}
END_TEST

START_TEST(tls_prefix_takes_no_unix_socket)
{
	struct keylock	*kl = keylock_new();
	char		 server[sizeof(kt_d->sock) + 8];

	snprintf(server, sizeof(server), "tls://%s", kt_d->sock);
	ck_assert_st(kl, keylock_connect(kl, server, NULL),
	    KEYLOCK_ERR_INVAL);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), "unix socket"));
	keylock_free(kl);
}
END_TEST

START_TEST(tls_to_a_plain_server_fails_in_the_handshake)
{
	struct keylock_tls_opts	 o = { .insecure = 1 };
	struct keylock		*kl = keylock_new();

	keylock_set_timeout(kl, 5000);
	ck_assert_st(kl, keylock_set_tls(kl, &o), KEYLOCK_OK);
	ck_assert_st(kl, keylock_connect(kl, kt_d->addr, NULL),
	    KEYLOCK_ERR_TLS);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), "TLS handshake"));
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
}
END_TEST

START_TEST(tls_handshake_is_bounded_by_the_connect_deadline)
{
	struct keylock	*kl = keylock_new();
	char		 server[40], tls[48];
	int		 lfd = lk_fake_listen(server, sizeof(server));
	uint64_t		 t0;

	/* Accepted by the kernel, never answered. */
	snprintf(tls, sizeof(tls), "tls://%s", server);
	keylock_set_timeout(kl, 300);
	t0 = kt_now_ms();
	ck_assert_st(kl, keylock_connect(kl, tls, NULL),
	    KEYLOCK_ERR_DEADLINE);
	/* Bounded, not fast: the time includes setting up TLS (the system's
	 * CA store, parsed under a sanitizer), seconds on a loaded machine. */
	ck_assert_window(250, 300, 6000, kt_now_ms() - t0);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), "timed out"));
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
	close(lfd);
}
END_TEST

void
lk_add_connect(Suite *s)
{
	TCase	*tc;

	tc = lk_tcase(s, "connect");
	tcase_add_test(tc, connect_by_tcp_unix_and_bracketed_address);
	tcase_add_test(tc, connect_without_server_uses_keylock_server);
	tcase_add_test(tc, connect_refused_is_io_naming_the_address);
	tcase_add_test(tc, malformed_address_is_inval);
	tcase_add_test(tc, connect_deadline_bounds_a_handshake_that_hangs);
	tcase_add_test(tc, auth_secret_is_sent_on_connect);
	tcase_add_test(tc, connect_list_takes_the_first_that_answers);
	tcase_add_test(tc, connect_list_malformed_is_inval_and_tries_none);
	tcase_add_test(tc, connect_list_auth_moves_on_only_when_silent);
	tcase_add_test(tc, failover_moves_through_the_list_once);
	tcase_add_test(tc, new_handle_is_not_connected);
	tcase_add_test(tc, socket_is_nonblocking_and_close_on_exec);
}

void
lk_add_tls(Suite *s)
{
	TCase	*tc;

	tc = lk_tcase(s, "tls");
	tcase_add_test(tc, tls_files_are_checked_when_set);
	tcase_add_test(tc, tls_prefix_takes_no_unix_socket);
	tcase_add_test(tc, tls_to_a_plain_server_fails_in_the_handshake);
	tcase_add_test(tc, tls_handshake_is_bounded_by_the_connect_deadline);
}
