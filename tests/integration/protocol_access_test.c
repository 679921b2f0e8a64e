/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * keylockd-protocol(7), ACCESS CONTROL, against private daemons with
 * users: a tenant cannot lock, release, refresh or inspect another's keys
 * (on any channel)
 * (ERR NOPERM, and the other's INFO shows nothing changed), cannot learn
 * another's key names from STATS, cannot resume another's session; AUTH
 * says the same whether the user or the secret was wrong; operators over
 * the unix socket go by the peer's uid, not by the socket's mode; a
 * reload that removes a user or changes a secret revokes its connections
 * at once and leaves their locks; and the single-secret configuration
 * works as before.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "protocol_util.h"

#define PA_NOBODY	65534	/* a uid that is neither root nor ours */

/* Writes the config file path with the lines given. */
static void
pa_config(const char *path, const char *text)
{
	FILE	*f;

	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* Secret files for alice, bob and carol in dir, and a config file that
 * names them (with extra lines); starts a daemon on it. */
struct pa_env {
	char	 dir[200];
	char	 conf[260];
	char	 alice[260], bob[260], carol[260], shared[260];
};

static void
pa_write_config(struct pa_env *e, const char *extra)
{
	char	text[2048];

	snprintf(text, sizeof(text),
	    "user alice secret-file=%s keys=a:* keys=both\n"
	    "user bob secret-file=%s keys=b:* keys=both\n"
	    "user carol secret-file=%s keys=c:*\n%s",
	    e->alice, e->bob, e->carol, extra != NULL ? extra : "");
	pa_config(e->conf, text);
}

/* v1: also --auth-file with the version 1 secret "v1-Shared". */
static void
pa_start(struct pa_env *e, bool v1, const char *const *args)
{
	const char	*dir = kt_tmpdir();
	const char	*argv[16];
	int		 n = 0;

	ck_assert_ptr_nonnull(dir);
	snprintf(e->dir, sizeof(e->dir), "%s", dir);
	snprintf(e->conf, sizeof(e->conf), "%s/keylockd.conf", dir);
	kt_secret_file(dir, "alice", "alice-Secret-1", e->alice, sizeof(e->alice));
	kt_secret_file(dir, "bob", "bob-Secret-1", e->bob, sizeof(e->bob));
	kt_secret_file(dir, "carol", "carol-Secret-1", e->carol, sizeof(e->carol));
	kt_secret_file(dir, "shared", "v1-Shared", e->shared, sizeof(e->shared));
	pa_write_config(e, NULL);
	argv[n++] = "--config";
	argv[n++] = e->conf;
	if (v1) {
		argv[n++] = "--auth-file";
		argv[n++] = e->shared;
	}
	for (; args != NULL && *args != NULL && n < 14; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	kt_d = kt_daemon_start_at(KT_AT, NULL, argv);
}

static struct kt_conn *
pa_as(const char *user, const char *secret, enum kt_transport t)
{
	struct kt_conn	*c = kt_connect_to(kt_d, t);

	kt_req(c, "OK", "AUTH %s %s", user, secret);
	return c;
}

/* Whether the keys of INFO's holders and waiters are as given. */
static void
pa_expect_queue(struct kt_conn *c, const char *key, size_t holders,
    size_t waiters)
{
	json_t	*o = kt_info(c, key);

	ck_assert_uint_eq(json_array_size(json_object_get(o, "holders")),
	    holders);
	ck_assert_uint_eq(json_array_size(json_object_get(o, "waiters")),
	    waiters);
	json_decref(o);
}

/* "LOCK" and 1025 copies of key (with its space) in buf. */
static void
pa_many(char *buf, size_t len, const char *key)
{
	size_t	n = (size_t)snprintf(buf, len, "LOCK");

	for (int i = 0; i < 1025; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s", key);
	ck_assert_uint_lt(n, len);
}

START_TEST(a_tenant_cannot_touch_another_tenants_keys)
{
	struct pa_env	 e;
	struct kt_conn	*a, *b, *anon;
	json_t		*o;
	json_int_t	 grants;
	uint64_t	 token;
	const char	*l;
	char		 many[4096];

	pa_start(&e, false, KT_ARGS("--max-keys", "2"));
	anon = kt_connect();
	kt_req_err(anon, "AUTH", "LOCK b:1");	/* AUTH before NOPERM */
	b = pa_as("bob", "bob-Secret-1", KT_TCP);
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	token = kt_lock(b, "LOCK b:1 ttl=60000");
	kt_lock(b, "LOCK both");
	grants = kt_stat(b, "grants");

	l = kt_req_err(a, "NOPERM", "LOCK b:1");
	ck_assert_ptr_nonnull(strstr(l, "b:1"));
	kt_req_err(a, "NOPERM", "LOCK b:2");
	kt_req_err(a, "NOPERM", "TRYLOCK b:1");
	kt_req_err(a, "NOPERM", "LOCK a:1 b:2");	/* all or nothing */
	kt_req_err(a, "NOPERM", "LOCK b:2 a:1 timeout=0");
	kt_req_err(a, "NOPERM", "UNLOCK b:1");
	kt_req_err(a, "NOPERM", "REFRESH b:1 ttl=1");
	kt_req_err(a, "NOPERM", "INFO b:1");
	kt_req_err(a, "NOPERM", "LOCK c:1 mode=shared");
	/* NOPERM comes before LIMIT (max-keys 2), LIMIT before HELD */
	kt_req_err(a, "NOPERM", "LOCK a:1 a:2 b:3");
	kt_req_err(a, "LIMIT", "LOCK a:1 a:2 a:3");
	kt_req_err(a, "SYNTAX", "LOCK b:1 mode=bad");	/* SYNTAX first */
	/* Past the 1024 keys the server keeps, the same order: AUTH, then
	 * NOPERM (of the keys kept), then LIMIT */
	pa_many(many, sizeof(many), " x");
	kt_req_err(anon, "AUTH", "%s", many);
	pa_many(many, sizeof(many), " b");
	kt_req_err(a, "NOPERM", "%s", many);
	pa_many(many, sizeof(many), " a:");
	kt_req(a, "ERR LIMIT 1025 keys in one request: at most 1024 are read, "
	    "duplicates included", "%s", many);
	/* A channel is its connection's user too. */
	kt_send(a, "@7 LOCK b:1 timeout=0");
	kt_expect_prefix(a, "@7 ERR NOPERM ");
	kt_send(a, "@7 INFO b:1");
	kt_expect_prefix(a, "@7 ERR NOPERM ");
	kt_send(anon, "@3 LOCK a:1");
	kt_expect_prefix(anon, "@3 ERR AUTH ");

	/* Nothing changed: bob's key as it was, a:1 was never taken. */
	o = kt_info(b, "b:1");
	ck_assert_uint_eq(json_array_size(json_object_get(o, "holders")), 1);
	ck_assert_int_eq(kt_jint(json_array_get(json_object_get(o,
	    "holders"), 0), "token"), (json_int_t)token);
	ck_assert_uint_eq(json_array_size(json_object_get(o, "waiters")), 0);
	json_decref(o);
	ck_assert_int_eq(kt_stat(b, "grants"), grants);
	ck_assert_int_eq(kt_stat(b, "waiting"), 0);
	kt_req(b, "OK 1", "REFRESH b:1 ttl=60000");	/* still bob's */

	/* The keys both may use: alice waits for bob, as anyone would. */
	kt_req_err(a, "LOCKED", "TRYLOCK both");
	kt_send(a, "LOCK both timeout=60000");
	json_decref(kt_wait_queue(b, "both", 1, 1));
	kt_req(b, "OK 1", "UNLOCK both");
	kt_expect_token(a);
	kt_lock(a, "LOCK a:1 a:2");
	kt_req(a, "OK 3", "UNLOCKALL");	/* both, a:1, a:2 */
}
END_TEST

/* A user's STATS lists only its keys; the other's names appear nowhere
 * in the reply. */
START_TEST(stats_shows_a_user_only_its_own_keys)
{
	struct pa_env	 e;
	struct kt_conn	*a, *b, *b2;
	json_t		*s, *hot;
	size_t		 i;

	pa_start(&e, false, NULL);
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	b = pa_as("bob", "bob-Secret-1", KT_TCP);
	b2 = pa_as("bob", "bob-Secret-1", KT_TCP);
	kt_lock(b, "LOCK b:payroll-2026");
	kt_send(b2, "LOCK b:payroll-2026 timeout=60000");
	json_decref(kt_wait_queue(b, "b:payroll-2026", 1, 1));
	kt_lock(a, "LOCK a:mine");

	kt_send(a, "STATS");
	kt_recv(a);
	ck_assert_msg(strstr(a->line, "payroll") == NULL, "alice's STATS "
	    "names bob's key: %s", a->line);
	s = kt_parse_ok_json(a->line, a->linelen, (char[64]){ 0 }, 64);
	ck_assert_ptr_nonnull(s);
	hot = json_object_get(s, "hot_keys");
	ck_assert_uint_eq(json_array_size(hot), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(hot,
	    0), "key")), "a:mine");
	ck_assert_int_eq(kt_jint(s, "waiting"), 1);	/* counters: all */
	json_decref(s);

	s = kt_stats(b);
	hot = json_object_get(s, "hot_keys");
	ck_assert_uint_eq(json_array_size(hot), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(hot,
	    0), "key")), "b:payroll-2026");
	ck_assert_int_eq(kt_jint(json_array_get(hot, 0), "waiters"), 1);
	json_decref(s);

	/* The version 1 secret sees every key. */
	kt_daemon_stop(kt_d);
	pa_start(&e, true, NULL);
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	b = pa_as("bob", "bob-Secret-1", KT_TCP);
	kt_lock(a, "LOCK a:x");
	kt_lock(b, "LOCK b:y");
	b2 = kt_connect();
	kt_req(b2, "OK", "AUTH v1-Shared");
	kt_lock(b2, "LOCK c:z");	/* every key */
	s = kt_stats(b2);
	hot = json_object_get(s, "hot_keys");
	ck_assert_uint_eq(json_array_size(hot), 3);
	for (i = 0; i < 3; i++)
		ck_assert_ptr_nonnull(json_string_value(json_object_get(
		    json_array_get(hot, i), "key")));
	json_decref(s);
}
END_TEST

START_TEST(a_session_is_its_users_alone)
{
	struct pa_env	 e;
	struct kt_conn	*a, *b, *x;
	char		 id[80], gone[256], unknown[256];
	json_t		*r;

	pa_start(&e, false, NULL);
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	kt_send(a, "SESSION grace=60000");
	kt_expect_prefix(a, "OK ");
	snprintf(id, sizeof(id), "%s", a->line + 3);
	kt_lock(a, "LOCK a:sess");
	kt_conn_close(a);

	/* bob, with the ID: exactly the reply to an ID that never was */
	b = pa_as("bob", "bob-Secret-1", KT_TCP);
	snprintf(gone, sizeof(gone), "%s", kt_req_err(b, "GONE", "RESUME %s",
	    id));
	x = pa_as("carol", "carol-Secret-1", KT_TCP);
	snprintf(unknown, sizeof(unknown), "%s", kt_req_err(x, "GONE",
	    "RESUME AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
	ck_assert_str_eq(gone, unknown);
	/* and nothing changed: still held, still resumable by alice */
	kt_req_err(x, "NOPERM", "INFO a:sess");
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	pa_expect_queue(a, "a:sess", 1, 0);
	kt_conn_close(a);
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	kt_send(a, "RESUME %s", id);
	r = kt_expect_json(a);
	json_decref(r);
	kt_req(a, "OK 1", "UNLOCK a:sess");
}
END_TEST

/* AUTH as another user does not carry a session over to that user; the
 * same user again is allowed; without a session AUTH replaces who the
 * connection is. */
START_TEST(auth_as_another_user_keeps_what_a_connection_has)
{
	struct pa_env	 e;
	struct kt_conn	*a, *b;
	char		 id[80];
	json_t		*r;

	pa_start(&e, true, NULL);
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	kt_send(a, "SESSION grace=60000");
	kt_expect_prefix(a, "OK ");
	snprintf(id, sizeof(id), "%s", a->line + 3);
	kt_req(a, "OK", "AUTH alice alice-Secret-1");	/* the same user */
	kt_lock(a, "LOCK a:1");
	kt_req_err(a, "SESSION", "AUTH bob bob-Secret-1");
	kt_req_err(a, "SESSION", "AUTH v1-Shared");	/* no user either */
	kt_req_err(a, "AUTH", "AUTH bob wrong");	/* AUTH first */
	/* still alice's: bob's keys are not hers, hers are */
	kt_req_err(a, "NOPERM", "LOCK b:1 timeout=0");
	kt_send(a, "@2 LOCK a:2");
	kt_expect_prefix(a, "@2 OK ");
	kt_conn_close(a);
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	kt_send(a, "RESUME %s", id);
	r = kt_expect_json(a);
	ck_assert_uint_eq(json_array_size(json_object_get(r, "held")), 1);
	ck_assert_uint_eq(json_array_size(json_object_get(r, "channels")), 1);
	json_decref(r);
	kt_req(a, "OK 1", "UNLOCK a:1");
	kt_send(a, "@2 UNLOCK a:2");
	kt_expect_prefix(a, "@2 OK 1");
	kt_req_err(a, "SESSION", "AUTH bob bob-Secret-1");	/* a session */
	kt_req(a, "OK", "QUIT");
	kt_conn_close(a);

	/* Without a session an AUTH replaces who the connection is, what
	 * it holds or waits for staying with the connection (PROTOCOL.md:
	 * AUTH answers OK or ERR AUTH) */
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	b = pa_as("bob", "bob-Secret-1", KT_TCP);
	kt_lock(b, "LOCK both");
	kt_send(a, "@3 LOCK both timeout=60000");
	json_decref(kt_wait_queue(b, "both", 1, 1));
	kt_lock(a, "LOCK a:1");
	kt_req(a, "OK", "AUTH bob bob-Secret-1");	/* holds and waits */
	kt_req_err(a, "NOPERM", "UNLOCK a:1");		/* bob's keys now */
	kt_req(b, "OK 1", "UNLOCK both");
	kt_expect_prefix(a, "@3 OK ");
	kt_send(a, "@3 UNLOCK both");
	kt_expect_prefix(a, "@3 OK 1");
	kt_req(a, "OK", "AUTH alice alice-Secret-1");
	kt_req(a, "OK 1", "UNLOCK a:1");
	kt_req(a, "OK", "AUTH bob bob-Secret-1");
	kt_lock(a, "LOCK b:1");
	kt_req(a, "OK 1", "UNLOCK b:1");
	kt_req(a, "OK", "AUTH v1-Shared");
}
END_TEST

START_TEST(auth_says_the_same_for_a_wrong_user_or_secret)
{
	struct pa_env	 e;
	struct kt_conn	*c;
	char		 l1[200], l2[200];

	pa_start(&e, false, NULL);
	c = kt_connect();
	snprintf(l1, sizeof(l1), "%s", kt_req_err(c, "AUTH",
	    "AUTH alice bob-Secret-1"));
	snprintf(l2, sizeof(l2), "%s", kt_req_err(c, "AUTH",
	    "AUTH mallory alice-Secret-1"));
	ck_assert_str_eq(l1, l2);
	/* not a version 1 secret; the third failure closes */
	kt_req_err(c, "AUTH", "AUTH alice-Secret-1");
	kt_expect_eof(c, kt_ms(KT_REPLY_MS));
	ck_assert_int_ge(kt_stat(pa_as("carol", "carol-Secret-1", KT_TCP),
	    "auth_failures"), 3);
	/* A later AUTH replaces who the connection is. */
	c = pa_as("alice", "alice-Secret-1", KT_TCP);
	kt_lock(c, "LOCK a:1");
	kt_req(c, "OK", "AUTH bob bob-Secret-1");
	kt_req_err(c, "NOPERM", "LOCK a:2");
	kt_lock(c, "LOCK b:2");
}
END_TEST

/* The reply of CLIENTS from a unix peer running as uid, or "" when the
 * connection failed. */
static void
pa_clients_as_uid(struct kt_daemon *d, uid_t uid, char *out, size_t len)
{
	int	 p[2];
	pid_t	 pid;
	ssize_t	 n;
	int	 st;

	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_ne(pid = fork(), -1);
	if (pid == 0) {
		struct sockaddr_un	 sa = { .sun_family = AF_UNIX };
		char			 buf[4096];
		const char		*req = "AUTH carol carol-Secret-1\n"
		    "CLIENTS\n";
		size_t			 got = 0;
		int			 fd, lines = 0;

		close(p[0]);
		if (setgid(uid) != 0 || setuid(uid) != 0)
			_exit(2);
		if (strlen(d->sock) >= sizeof(sa.sun_path))
			_exit(4);
		memcpy(sa.sun_path, d->sock, strlen(d->sock) + 1);
		if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) == -1 ||
		    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 ||
		    write(fd, req, strlen(req)) != (ssize_t)strlen(req))
			_exit(3);
		while (lines < 2 && got < sizeof(buf) - 1 &&
		    (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0) {
			for (ssize_t i = 0; i < n; i++)
				lines += buf[got + (size_t)i] == '\n';
			got += (size_t)n;
		}
		if (write(p[1], buf, got) != (ssize_t)got)
			_exit(4);
		_exit(0);
	}
	close(p[1]);
	n = 0;
	for (ssize_t r; (size_t)n < len - 1 &&
	    (r = read(p[0], out + n, len - 1 - (size_t)n)) > 0; n += r)
		;
	out[n] = '\0';
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child as "
	    "uid %u: status %d", (unsigned)uid, st);
}

START_TEST(unix_operators_go_by_uid)
{
	struct pa_env	 e;
	struct kt_conn	*t, *u;
	json_t		*o, *cl;
	char		 out[8192], *dir;
	bool		 found = false;

	pa_start(&e, false, KT_ARGS("--unix-mode", "0666"));
	/* carol is no operator: over TCP CLIENTS is refused, NOPERM
	 * ("the authenticated user may not use ... this command"); AUTH is
	 * for a connection that is no user */
	t = pa_as("carol", "carol-Secret-1", KT_TCP);
	kt_req(t, "ERR NOPERM CLIENTS is an operator command and user carol "
	    "is not an operator: nothing was changed", "CLIENTS");
	kt_req_err(t, "NOPERM", "KILL 1");
	kt_req_err(t, "NOPERM", "UPGRADE");
	/* over the unix socket from this uid (the daemon's own), it may;
	 * still after AUTH, like any connection while users are set */
	u = kt_connect_unix();
	kt_req_err(u, "AUTH", "CLIENTS");
	kt_req(u, "OK", "AUTH carol carol-Secret-1");
	kt_send(u, "CLIENTS");
	o = kt_expect_json(u);
	cl = json_object_get(o, "clients");
	for (size_t i = 0; i < json_array_size(cl); i++) {
		json_t	*c = json_array_get(cl, i);

		ck_assert_str_eq(json_string_value(json_object_get(c, "user")),
		    "carol");
		if (strcmp(json_string_value(json_object_get(c, "transport")),
		    "unix") != 0) {
			ck_assert_ptr_null(json_object_get(c, "uid"));
			continue;
		}
		ck_assert_int_eq(kt_jint(c, "uid"), (json_int_t)geteuid());
		ck_assert_int_eq(kt_jint(c, "pid"), (json_int_t)getpid());
		found = true;
	}
	ck_assert(found);
	json_decref(o);

	if (geteuid() != 0) {
		fprintf(stderr, "unix_operators_go_by_uid: not root: the "
		    "check of another uid is left out\n");
		return;
	}
	/* Another uid, through a socket of mode 0666: it may lock (the
	 * mode says who connects), but it is no operator. */
	dir = strdup(kt_d->sock);
	ck_assert_int_eq(chmod(dirname(dir), 0711), 0);
	ck_assert_int_eq(chmod(dirname(dir), 0711), 0);	/* kt_rundir */
	free(dir);
	pa_clients_as_uid(kt_d, PA_NOBODY, out, sizeof(out));
	ck_assert_msg(strncmp(out, "OK\nERR NOPERM CLIENTS is an operator "
	    "command", 42) == 0, "uid %d: %s", PA_NOBODY, out);
	/* operator-uids, reloaded */
	pa_write_config(&e, "operator-uids 65534\n");
	kt_daemon_signal(kt_d, SIGHUP);
	for (uint64_t end = kt_now_ms() + (uint64_t)kt_ms(5000);;
	    kt_sleep_ms(20)) {
		pa_clients_as_uid(kt_d, PA_NOBODY, out, sizeof(out));
		if (strncmp(out, "OK\nOK {", 7) == 0)
			break;
		ck_assert_msg(kt_now_ms() < end, "operator-uids 65534 after "
		    "SIGHUP: %s", out);
	}
	ck_assert_ptr_nonnull(strstr(out, "\"uid\":65534"));
}
END_TEST

/* Polls AUTH user secret on fresh connections until it is OK. */
static struct kt_conn *
pa_wait_auth(const char *user, const char *secret)
{
	uint64_t	end = kt_now_ms() + (uint64_t)kt_ms(5000);

	for (;; kt_sleep_ms(20)) {
		struct kt_conn	*c = kt_connect();

		kt_send(c, "AUTH %s %s", user, secret);
		kt_recv(c);
		if (kt_line_is(c, "OK"))
			return c;
		kt_conn_close(c);
		ck_assert_msg(kt_now_ms() < end, "AUTH %s after SIGHUP: %s",
		    user, c->line);
	}
}

START_TEST(a_reload_revokes_changed_and_removed_users_at_once)
{
	struct pa_env	 e;
	struct kt_conn	*a, *b, *c, *v1, *a2, *op;
	char		 text[1024];
	const char	*l;
	json_int_t	 aid;
	json_t		*o;

	pa_start(&e, true, NULL);
	a = pa_as("alice", "alice-Secret-1", KT_TCP);
	b = pa_as("bob", "bob-Secret-1", KT_TCP);
	c = pa_as("carol", "carol-Secret-1", KT_TCP);
	v1 = kt_connect();
	kt_req(v1, "OK", "AUTH v1-Shared");
	kt_lock(a, "LOCK a:held");
	aid = pu_holder_id(a, "a:held");
	kt_lock(b, "LOCK b:held");
	kt_lock(v1, "LOCK v:held");
	kt_lock(c, "LOCK c:1");

	/* alice's secret changes, bob goes, carol's keys grow, and the
	 * version 1 secret changes. */
	kt_secret_file(e.dir, "alice", "alice-Secret-2", e.alice, sizeof(e.alice));
	kt_secret_file(e.dir, "shared", "v1-Shared-2", e.shared, sizeof(e.shared));
	snprintf(text, sizeof(text),
	    "user alice secret-file=%s keys=a:* keys=both\n"
	    "user carol secret-file=%s keys=c:* keys=d:*\n", e.alice,
	    e.carol);
	pa_config(e.conf, text);
	kt_daemon_signal(kt_d, SIGHUP);
	a2 = pa_wait_auth("alice", "alice-Secret-2");

	l = kt_req_err(a, "AUTH", "LOCK a:2");
	ck_assert_ptr_nonnull(strstr(l, "changed or is gone"));
	kt_req_err(a, "AUTH", "UNLOCK a:held");
	kt_req_err(a, "AUTH", "STATS");
	kt_req(a, "OK PONG", "PING");
	kt_req_err(b, "AUTH", "LOCK b:2");
	kt_req_err(v1, "AUTH", "INFO v:held");
	/* carol is the same user with the same secret: new keys apply */
	kt_lock(c, "LOCK d:1");
	kt_req(c, "OK 2", "UNLOCKALL");
	/* The revoked connections' locks stay until they disconnect. */
	o = kt_info(a2, "a:held");
	ck_assert_int_eq(kt_jint(json_array_get(json_object_get(o,
	    "holders"), 0), "client"), aid);
	json_decref(o);
	op = kt_connect();
	kt_req(op, "OK", "AUTH v1-Shared-2");
	pa_expect_queue(op, "b:held", 1, 0);
	pa_expect_queue(op, "v:held", 1, 0);
	kt_req_err(op, "AUTH", "AUTH bob bob-Secret-1");	/* bob is gone */
	/* The revoked connection may authenticate again, and then
	 * release. */
	kt_req(a, "OK", "AUTH alice alice-Secret-2");
	kt_req(a, "OK 1", "UNLOCK a:held");
	kt_conn_close(b);
	json_decref(kt_wait_queue(op, "b:held", 0, 0));
}
END_TEST

/* The version 1 configuration: one secret, every key, operators over
 * the unix socket; AUTH with two words is simply a wrong AUTH. */
START_TEST(the_single_secret_configuration_is_unchanged)
{
	struct kt_conn	*a, *u;
	char		 path[256];
	json_t		*o;

	kt_secret_file(kt_tmpdir(), "secret", "only-Secret", path, sizeof(path));
	kt_start("--auth-file", path);
	a = kt_connect();
	kt_req_err(a, "AUTH", "LOCK x");
	kt_req(a, "ERR AUTH wrong user or secret", "AUTH alice only-Secret");
	kt_req(a, "OK", "AUTH only-Secret");
	kt_lock(a, "LOCK a:1 b:1 anything");
	o = kt_info(a, "b:1");
	json_decref(o);
	o = kt_stats(a);
	ck_assert_uint_eq(json_array_size(json_object_get(o, "hot_keys")), 3);
	json_decref(o);
	kt_req_err(a, "AUTH", "CLIENTS");
	u = kt_connect_unix();
	kt_req(u, "OK", "AUTH only-Secret");
	kt_send(u, "CLIENTS");
	o = kt_expect_json(u);
	ck_assert(json_is_null(json_object_get(json_array_get(
	    json_object_get(o, "clients"), 0), "user")));
	json_decref(o);
}
END_TEST

static Suite *
protocol_access_suite(void)
{
	Suite	*s = suite_create("protocol_access");
	TCase	*tc;

	tc = kt_tcase(s, "users", KT_PRIVATE, 60, kt_setup_none);
	if (tc != NULL) {
		tcase_add_test(tc, a_tenant_cannot_touch_another_tenants_keys);
		tcase_add_test(tc, stats_shows_a_user_only_its_own_keys);
		tcase_add_test(tc, a_session_is_its_users_alone);
		tcase_add_test(tc,
		    auth_as_another_user_keeps_what_a_connection_has);
		tcase_add_test(tc,
		    auth_says_the_same_for_a_wrong_user_or_secret);
		tcase_add_test(tc, unix_operators_go_by_uid);
		tcase_add_test(tc,
		    a_reload_revokes_changed_and_removed_users_at_once);
		tcase_add_test(tc, the_single_secret_configuration_is_unchanged);
	}
	return s;
}

const struct check_program check_program = {
	.name = "protocol_access_test",
	.init = kt_init,
	.suites = { protocol_access_suite, NULL }
};
