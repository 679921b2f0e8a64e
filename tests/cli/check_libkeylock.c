/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libkeylock against a real keylockd: every test gets a private daemon
 * (port 0, a unix socket, state in a mkdtemp directory), started by the
 * fixture and killed and reaped by it. Readiness is the port file, polled
 * with a deadline. Failure paths the daemon will not produce (silence,
 * garbage, an unknown error code) come from a fake server: a listening
 * socket in the test itself. KEYLOCKD names the daemon; without it the
 * suite is skipped (77).
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

#define T_START_MS	10000	/* daemon readiness deadline */
#define T_CASE_S	20	/* per test */
#define T_MAX_ARGS	24

struct daemon {
	pid_t	pid;
	int	port;
	char	dir[96];
	char	portfile[128];
	char	sock[128];
	char	log[128];
	char	tcp[32];		/* "127.0.0.1:PORT" */
};

static const char	*keylockd;
static struct daemon	 d;		/* the current test's daemon */
/* Every daemon's directory is in here. A failed assertion ends a test's
 * process without its teardown (Check kills its process group, daemons
 * included): main() removes the lot at the end. */
static char		 topdir[64];

#define ck_assert_st(kl, got, want) do {				\
	enum keylock_status _g = (got), _w = (want);			\
	ck_assert_msg(_g == _w, "%s: %s \"%s\", want %s", #got,		\
	    keylock_status_word(_g), keylock_message(kl),		\
	    keylock_status_word(_w));					\
} while (0)

#define ck_assert_window(lo, hi, ms) ck_assert_msg((ms) >= (lo) &&	\
	(ms) <= (hi), "took %lld ms, want %d to %d", (long long)(ms),	\
	(lo), (hi))

static int64_t
now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
sleep_ms(long ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static int
read_port(const char *path)
{
	char	buf[16];
	ssize_t	n;
	int	fd, port = 0;

	if ((fd = open(path, O_RDONLY)) == -1)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 1 || buf[n - 1] != '\n')
		return 0;
	buf[n] = '\0';
	sscanf(buf, "%d", &port);
	return port;
}

/* Starts keylockd with extra arguments (NULL-terminated, may be NULL). */
static void
daemon_start(struct daemon *dm, const char *const *extra)
{
	const char	*argv[T_MAX_ARGS];
	pid_t		 parent = getpid();
	int64_t		 deadline;
	int		 argc = 0, fd, st;

	memset(dm, 0, sizeof(*dm));
	snprintf(dm->dir, sizeof(dm->dir), "%s/d.XXXXXX", topdir);
	ck_assert_ptr_nonnull(mkdtemp(dm->dir));
	snprintf(dm->portfile, sizeof(dm->portfile), "%s/port", dm->dir);
	snprintf(dm->sock, sizeof(dm->sock), "%s/sock", dm->dir);
	snprintf(dm->log, sizeof(dm->log), "%s/log", dm->dir);
	argv[argc++] = keylockd;
	argv[argc++] = "--bind";
	argv[argc++] = "127.0.0.1";
	argv[argc++] = "--port";
	argv[argc++] = "0";
	argv[argc++] = "--port-file";
	argv[argc++] = dm->portfile;
	argv[argc++] = "--unix";
	argv[argc++] = dm->sock;
	argv[argc++] = "--state-dir";
	argv[argc++] = dm->dir;
	argv[argc++] = "--log-level";
	argv[argc++] = "debug";
	for (int i = 0; extra != NULL && extra[i] != NULL; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;

	ck_assert_int_ne(dm->pid = fork(), -1);
	if (dm->pid == 0) {
#ifdef __linux__
		/* dies with its test, however the test ends */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
#else
		(void)parent;
#endif
		if ((fd = open(dm->log, O_WRONLY | O_CREAT | O_APPEND,
		    0644)) != -1) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(keylockd, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	deadline = now_ms() + T_START_MS;
	while ((dm->port = read_port(dm->portfile)) == 0) {
		ck_assert_msg(waitpid(dm->pid, &st, WNOHANG) == 0,
		    "keylockd exited during startup; log %s", dm->log);
		ck_assert_msg(now_ms() < deadline, "keylockd not ready in "
		    "%d ms; log %s", T_START_MS, dm->log);
		sleep_ms(10);
	}
	snprintf(dm->tcp, sizeof(dm->tcp), "127.0.0.1:%d", dm->port);
}

static void
daemon_stop(struct daemon *dm, int sig)
{
	if (dm->pid > 0) {
		kill(dm->pid, sig);
		waitpid(dm->pid, NULL, 0);
		dm->pid = 0;
	}
}

/* rm -rf, for the test's own directories only */
static void
remove_tree(const char *dir)
{
	char	cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "check_libkeylock: could not remove %s\n",
		    dir);
}

static void
setup(void)
{
	daemon_start(&d, NULL);
}

static void
teardown(void)
{
	daemon_stop(&d, SIGTERM);
}

static struct keylock *
client_at(const char *server, const char *name)
{
	struct keylock	*kl = keylock_new();

	ck_assert_ptr_nonnull(kl);
	ck_assert_st(kl, keylock_connect(kl, server, NULL), KEYLOCK_OK);
	if (name != NULL)
		ck_assert_st(kl, keylock_name(kl, name), KEYLOCK_OK);
	return kl;
}

static struct keylock *
client(const char *name)
{
	return client_at(d.tcp, name);
}

/* A fake server: a listener on 127.0.0.1; *server gets its address. */
static int
fake_listen(char *server, size_t len)
{
	struct sockaddr_in	sin;
	socklen_t		slen = sizeof(sin);
	int			fd;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_ne(fd = socket(AF_INET, SOCK_STREAM, 0), -1);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &slen), 0);
	snprintf(server, len, "127.0.0.1:%d", ntohs(sin.sin_port));
	return fd;
}

/* Connects kl to a fake server and returns the server's end. */
static int
fake_pair(struct keylock *kl, int *lfd)
{
	char	server[32];
	int	fd;

	*lfd = fake_listen(server, sizeof(server));
	ck_assert_st(kl, keylock_connect(kl, server, NULL), KEYLOCK_OK);
	ck_assert_int_ne(fd = accept(*lfd, NULL, NULL), -1);
	return fd;
}

static long long
stats_int(struct keylock *kl, const char *name)
{
	json_t		*root;
	long long	 v;

	ck_assert_st(kl, keylock_stats_json(kl, &root), KEYLOCK_OK);
	ck_assert_msg(json_is_integer(json_object_get(root, name)),
	    "STATS has no integer %s", name);
	v = json_integer_value(json_object_get(root, name));
	json_decref(root);
	return v;
}

/* connect */

START_TEST(connect_by_tcp_unix_and_bracketed_address)
{
	char		 bracketed[40];
	const char	*servers[3] = { d.tcp, d.sock, bracketed };

	snprintf(bracketed, sizeof(bracketed), "[127.0.0.1]:%d", d.port);
	for (int i = 0; i < 3; i++) {
		struct keylock	*kl = client_at(servers[i], NULL);

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

	setenv("KEYLOCK_SERVER", d.sock, 1);
	ck_assert_st(kl, keylock_connect(kl, NULL, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	setenv("KEYLOCK_SERVER", d.tcp, 1);
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
	int		 lfd = fake_listen(server, sizeof(server));

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
	int		 lfd = fake_listen(server, sizeof(server));
	int64_t		 t0;

	/* A full accept queue drops SYNs: connect() hangs. */
	ck_assert_int_eq(listen(lfd, 0), 0);
	for (int i = 0; i < 2; i++) {
		fill[i] = keylock_new();
		keylock_set_timeout(fill[i], 100);
		keylock_connect(fill[i], server, NULL);
	}
	keylock_set_timeout(kl, 300);
	t0 = now_ms();
	ck_assert_st(kl, keylock_connect(kl, server, NULL),
	    KEYLOCK_ERR_DEADLINE);
	ck_assert_window(250, 2000, now_ms() - t0);
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
	struct daemon	 ad;
	struct keylock	*kl = keylock_new();
	char		 path[128];
	FILE		*f;

	snprintf(path, sizeof(path), "%s/secret", d.dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fprintf(f, "s3cret\n");
	fclose(f);
	args[1] = path;
	daemon_start(&ad, args);

	ck_assert_st(kl, keylock_connect(kl, ad.tcp, "s3cret"), KEYLOCK_OK);
	ck_assert_st(kl, keylock_stats(kl, &(const char *){ NULL }),
	    KEYLOCK_OK);
	ck_assert_st(kl, keylock_connect(kl, ad.tcp, "wrong"),
	    KEYLOCK_ERR_AUTH);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_str_ne(keylock_message(kl), "");
	ck_assert_st(kl, keylock_connect(kl, ad.tcp, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	ck_assert_st(kl, keylock_trylock(kl, &(const char *){ "k" }, 1,
	    NULL, NULL), KEYLOCK_ERR_AUTH);
	keylock_free(kl);
	daemon_stop(&ad, SIGTERM);
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
	struct keylock	*kl = client(NULL);
	int		 fd = keylock_fd(kl);

	ck_assert(fcntl(fd, F_GETFL) & O_NONBLOCK);
	ck_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	keylock_free(kl);
}
END_TEST

/* lock */

START_TEST(grants_carry_increasing_tokens)
{
	struct keylock	*kl = client(NULL);
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
	struct keylock	*a = client("alpha"), *b = client(NULL);
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
	struct keylock	*a = client(NULL), *b = client(NULL);
	const char	*key = "k";
	int64_t		 t0;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	t0 = now_ms();
	ck_assert_st(b, keylock_lock(b, &key, 1, NULL, 300, NULL),
	    KEYLOCK_ERR_TIMEOUT);
	ck_assert_window(250, 1500, now_ms() - t0);
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
	struct keylock	*kl = client(NULL);
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
	struct keylock	*a = client(NULL), *b = client(NULL);
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
	struct keylock_lock_opts lease = { .ttl_ms = 400 };
	struct keylock	*a = client(NULL), *b = client(NULL);
	const char	*key = "lease";
	unsigned long	 n = 0;

	ck_assert_st(a, keylock_lock(a, &key, 1, &lease, 1000, NULL),
	    KEYLOCK_OK);
	sleep_ms(250);
	ck_assert_st(a, keylock_refresh(a, &key, 1, 400, &n), KEYLOCK_OK);
	ck_assert_uint_eq(n, 1);
	sleep_ms(250);		/* 500 ms after the grant, 250 after REFRESH */
	ck_assert_st(b, keylock_trylock(b, &key, 1, NULL, NULL),
	    KEYLOCK_ERR_LOCKED);
	/* it runs out if nobody refreshes it */
	ck_assert_st(b, keylock_lock(b, &key, 1, NULL, 2000, NULL),
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
	struct keylock	*a = client(NULL), *b = client(NULL),
			*c = client(NULL);
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
	struct keylock	*a = client(NULL), *b = client(NULL);
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
	struct keylock	*a = client(NULL), *b = client(NULL),
			*c = client(NULL);
	const char	*x = "x", *xy[] = { "y", "x" }, *y = "y";
	uint64_t	 t = 0;

	ck_assert_st(a, keylock_lock(a, &x, 1, NULL, 1000, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, xy, 2, NULL, 5000), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 100, &t), KEYLOCK_PENDING);
	/* y is free, but b waits for it in line: FIFO */
	ck_assert_st(c, keylock_trylock(c, &y, 1, NULL, NULL),
	    KEYLOCK_ERR_LOCKED);
	ck_assert_st(a, keylock_unlock(a, &x, 1, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 2000, &t), KEYLOCK_OK);
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
	struct keylock	*kl = client(NULL);
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
	ck_assert_uint_eq(stats_int(kl, "held"), 1);
	keylock_free(kl);
}
END_TEST

START_TEST(server_checks_utf8_in_keys)
{
	struct keylock	*kl = client(NULL);
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
	struct keylock	*kl = client(NULL);
	char		 name[KEYLOCK_NAME_MAX + 2];

	ck_assert_st(kl, keylock_name(kl, ""), KEYLOCK_ERR_INVAL);
	ck_assert_st(kl, keylock_name(kl, "two words"), KEYLOCK_ERR_INVAL);
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	ck_assert_st(kl, keylock_name(kl, name), KEYLOCK_ERR_INVAL);
	name[KEYLOCK_NAME_MAX] = '\0';
	ck_assert_st(kl, keylock_name(kl, name), KEYLOCK_OK);
	ck_assert_st(kl, keylock_auth(kl, "a b"), KEYLOCK_ERR_INVAL);
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
	struct keylock	*a = client(NULL), *b = client(NULL);
	const char	*key = "k";
	struct pollfd	 pfd;
	uint64_t	 ta = 0, tb = 0;
	int64_t		 t0;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, &ta), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL,
	    KEYLOCK_WAIT_FOREVER), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 0, &tb), KEYLOCK_PENDING);
	t0 = now_ms();
	ck_assert_st(b, keylock_lock_recv(b, 200, &tb), KEYLOCK_PENDING);
	ck_assert_window(150, 1000, now_ms() - t0);
	ck_assert_uint_eq(tb, 0);

	/* the fd turns readable when the grant arrives */
	pfd.fd = keylock_fd(b);
	pfd.events = POLLIN;
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);
	ck_assert_st(a, keylock_unlock(a, &key, 1, NULL), KEYLOCK_OK);
	ck_assert_int_eq(poll(&pfd, 1, 2000), 1);
	ck_assert_st(b, keylock_lock_recv(b, 0, &tb), KEYLOCK_OK);
	ck_assert_uint_gt(tb, ta);
	ck_assert_st(b, keylock_lock_recv(b, 0, &tb), KEYLOCK_ERR_INVAL);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(calls_during_a_pending_lock_are_refused)
{
	struct keylock	*a = client(NULL), *b = client(NULL);
	const char	*key = "k";

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL, 5000),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_ERR_INVAL);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL, 5000),
	    KEYLOCK_ERR_INVAL);
	ck_assert_st(b, keylock_check(b), KEYLOCK_ERR_INVAL);
	ck_assert_st(a, keylock_unlockall(a, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 2000, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_OK);
	keylock_free(a);
	keylock_free(b);
}
END_TEST

START_TEST(close_withdraws_a_pending_wait)
{
	struct keylock	*a = client(NULL), *b = client(NULL),
			*c = client(NULL);
	const char	*key = "k";
	int64_t		 deadline;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL, 5000),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 50, NULL), KEYLOCK_PENDING);
	keylock_close(b);
	ck_assert_st(b, keylock_lock_recv(b, 0, NULL), KEYLOCK_ERR_INVAL);
	ck_assert_st(b, keylock_ping(b), KEYLOCK_ERR_CLOSED);
	/* the server withdraws it: nobody stands in c's way */
	deadline = now_ms() + 2000;
	while (stats_int(c, "waiting") != 0)
		ck_assert_msg(now_ms() < deadline, "the wait stayed");
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
	int64_t		 t0;

	/* A holder in another process lets go after 600 ms. */
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_ne(pid = fork(), -1);
	if (pid == 0) {
		struct keylock	*a = keylock_new();

		if (keylock_connect(a, d.tcp, NULL) != KEYLOCK_OK ||
		    keylock_lock(a, &key, 1, NULL, 0, NULL) != KEYLOCK_OK ||
		    write(p[1], "x", 1) != 1)
			_exit(1);
		sleep_ms(600);
		keylock_free(a);
		_exit(0);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], &ch, 1), 1);
	b = client(NULL);
	keylock_set_timeout(b, 200);
	t0 = now_ms();
	ck_assert_st(b, keylock_lock(b, &key, 1, NULL, KEYLOCK_WAIT_FOREVER,
	    NULL), KEYLOCK_OK);
	ck_assert_window(400, 3000, now_ms() - t0);
	waitpid(pid, NULL, 0);
	close(p[0]);
	keylock_free(b);
}
END_TEST

/* failures */

START_TEST(silent_server_hits_the_deadline_and_closes)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = fake_pair(kl, &lfd);
	int64_t		 t0;

	keylock_set_timeout(kl, 200);
	t0 = now_ms();
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_DEADLINE);
	ck_assert_window(150, 1500, now_ms() - t0);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_CLOSED);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(lock_deadline_is_its_timeout_plus_the_reply_timeout)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = fake_pair(kl, &lfd);
	const char	*key = "k";
	char		 buf[128];
	ssize_t		 n;
	int64_t		 t0;

	keylock_set_timeout(kl, 200);
	t0 = now_ms();
	ck_assert_st(kl, keylock_lock(kl, &key, 1, NULL, 300, NULL),
	    KEYLOCK_ERR_DEADLINE);
	ck_assert_window(450, 2000, now_ms() - t0);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	/* the request asked the server for the timeout itself */
	ck_assert_int_gt(n = read(sfd, buf, sizeof(buf) - 1), 0);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "LOCK k timeout=300\n");
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(options_are_sent_as_the_protocol_spells_them)
{
	struct keylock_lock_opts o = { .flags = KEYLOCK_SHARED |
	    KEYLOCK_MAX_WAITERS, .max_waiters = 0, .ttl_ms = 1500 };
	struct keylock_lock_opts sem = { .limit = 4 };
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = fake_pair(kl, &lfd);
	const char	*keys[] = { "a", "b" };
	char		 buf[256];
	uint64_t	 t = 0;
	ssize_t		 n;

	ck_assert_int_eq(write(sfd, "OK 7\nOK 8\nOK 2\n", 15), 15);
	ck_assert_st(kl, keylock_lock(kl, keys, 2, &o, KEYLOCK_WAIT_FOREVER,
	    &t), KEYLOCK_OK);
	ck_assert_uint_eq(t, 7);
	ck_assert_st(kl, keylock_trylock(kl, keys, 1, &sem, &t), KEYLOCK_OK);
	ck_assert_uint_eq(t, 8);
	ck_assert_st(kl, keylock_refresh(kl, keys, 2, 900, NULL),
	    KEYLOCK_OK);
	sleep_ms(50);
	ck_assert_int_gt(n = read(sfd, buf, sizeof(buf) - 1), 0);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "LOCK a b mode=shared max_waiters=0 ttl=1500\n"
	    "TRYLOCK a limit=4\nREFRESH a b ttl=900\n");
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(garbage_reply_is_proto_and_closes)
{
	static const char *const garbage[] = { "HELLO\n", "OK PONG\n",
	    "OK 12x\n", "OK 9223372036854775808\n", "OK\n" };
	static const int	 is_ping[] = { 1, 0, 0, 0, 0 };

	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		struct keylock	*kl = keylock_new();
		int		 lfd, sfd = fake_pair(kl, &lfd);
		const char	*key = "k";

		ck_assert_int_eq(write(sfd, garbage[i], strlen(garbage[i])),
		    (ssize_t)strlen(garbage[i]));
		if (is_ping[i])
			ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_PROTO);
		else
			ck_assert_st(kl, keylock_trylock(kl, &key, 1, NULL,
			    NULL), KEYLOCK_ERR_PROTO);
		ck_assert_int_eq(keylock_is_connected(kl), 0);
		keylock_free(kl);
		close(sfd);
		close(lfd);
	}
}
END_TEST

START_TEST(unknown_error_code_keeps_the_connection)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = fake_pair(kl, &lfd);
	const char	*msg = "ERR NEWCODE from a newer server\r\nOK PONG\n";

	ck_assert_int_eq(write(sfd, msg, strlen(msg)), (ssize_t)strlen(msg));
	ck_assert_st(kl, keylock_request(kl, "FROB", NULL),
	    KEYLOCK_ERR_UNKNOWN);
	ck_assert_str_eq(keylock_message(kl), "NEWCODE from a newer server");
	ck_assert_str_eq(keylock_reply(kl),
	    "ERR NEWCODE from a newer server");
	ck_assert_int_eq(keylock_is_connected(kl), 1);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(server_closing_mid_reply_is_closed)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = fake_pair(kl, &lfd);

	ck_assert_int_eq(write(sfd, "OK PO", 5), 5);
	close(sfd);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_CLOSED);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
	close(lfd);
}
END_TEST

START_TEST(long_reply_is_read_whole)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = fake_pair(kl, &lfd);
	const char	*value;
	size_t		 len = 60000;
	char		*big = malloc(len + 5);

	memcpy(big, "OK ", 3);
	memset(big + 3, 'j', len);
	big[len + 3] = '\n';
	ck_assert_int_eq(write(sfd, big, len + 4), (ssize_t)len + 4);
	ck_assert_st(kl, keylock_stats(kl, &value), KEYLOCK_OK);
	ck_assert_uint_eq(strlen(value), len);
	free(big);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(check_reports_the_server_going_away)
{
	struct keylock	*kl = client(NULL);
	const char	*key = "k";
	struct pollfd	 pfd;

	ck_assert_st(kl, keylock_lock(kl, &key, 1, NULL, 0, NULL),
	    KEYLOCK_OK);
	pfd.fd = keylock_fd(kl);
	pfd.events = POLLIN;
	ck_assert_int_eq(poll(&pfd, 1, 100), 0);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_OK);
	daemon_stop(&d, SIGKILL);
	ck_assert_int_eq(poll(&pfd, 1, 3000), 1);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_ERR_CLOSED);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
}
END_TEST

START_TEST(check_reports_unasked_bytes)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = fake_pair(kl, &lfd);

	ck_assert_st(kl, keylock_check(kl), KEYLOCK_OK);
	ck_assert_int_eq(write(sfd, "OK 1\n", 5), 5);
	sleep_ms(50);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_ERR_PROTO);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

/* json and raw text */

START_TEST(stats_json_has_the_protocol_members)
{
	static const char *const members[] = { "version", "uptime_ms",
	    "clients", "keys", "held", "waiting", "grants", "timeouts",
	    "busy", "deadlocks", "conflicts", "releases", "expired",
	    "disconnect_releases", "wait_ms", "hold_ms", "max_waiters",
	    "hot_keys" };
	struct keylock	*kl = client(NULL);
	const char	*key = "hot", *text;
	json_t		*root;

	ck_assert_st(kl, keylock_lock(kl, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_stats_json(kl, &root), KEYLOCK_OK);
	for (size_t i = 0; i < sizeof(members) / sizeof(members[0]); i++)
		ck_assert_msg(json_object_get(root, members[i]) != NULL,
		    "STATS has no %s", members[i]);
	ck_assert_int_eq(json_integer_value(json_object_get(root, "held")),
	    1);
	json_decref(root);
	ck_assert_st(kl, keylock_stats(kl, &text), KEYLOCK_OK);
	ck_assert_msg(text[0] == '{' && strstr(text, "\"keys\":1") != NULL,
	    "raw STATS \"%.80s\"", text);
	ck_assert_msg(strncmp(keylock_reply(kl), "OK {", 4) == 0, "reply");
	keylock_free(kl);
}
END_TEST

START_TEST(info_json_lists_holders_then_waiters_in_order)
{
	struct keylock	*a = client("alpha"), *b = client("beta"),
			*c = client(NULL);
	const char	*key = "k", *text;
	json_t		*root, *h, *w;
	uint64_t	 t = 0;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, &t), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL, 5000),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 100, NULL), KEYLOCK_PENDING);
	ck_assert_st(c, keylock_info_json(c, key, &root), KEYLOCK_OK);
	ck_assert_str_eq(json_string_value(json_object_get(root, "key")),
	    "k");
	h = json_array_get(json_object_get(root, "holders"), 0);
	w = json_array_get(json_object_get(root, "waiters"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(h, "name")),
	    "alpha");
	ck_assert_uint_eq(json_integer_value(json_object_get(h, "token")), t);
	ck_assert_str_eq(json_string_value(json_object_get(w, "name")),
	    "beta");
	json_decref(root);
	ck_assert_st(c, keylock_info(c, "nobody", &text), KEYLOCK_OK);
	ck_assert_msg(strstr(text, "\"holders\":[]") != NULL, "%s", text);
	keylock_free(a);
	keylock_free(b);
	keylock_free(c);
}
END_TEST

START_TEST(raw_request_and_quit)
{
	struct keylock	*kl = client(NULL);
	const char	*value;

	ck_assert_st(kl, keylock_request(kl, "ping", &value), KEYLOCK_OK);
	ck_assert_str_eq(value, "PONG");
	ck_assert_st(kl, keylock_request(kl, "FROB", &value),
	    KEYLOCK_ERR_SYNTAX);
	ck_assert_st(kl, keylock_quit(kl), KEYLOCK_OK);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
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
	ck_assert_st(kl, keylock_connect(kl, d.tcp, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	keylock_free(kl);
}
END_TEST

START_TEST(tls_prefix_takes_no_unix_socket)
{
	struct keylock	*kl = keylock_new();
	char		 server[160];

	snprintf(server, sizeof(server), "tls://%s", d.sock);
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
	ck_assert_st(kl, keylock_connect(kl, d.tcp, NULL), KEYLOCK_ERR_TLS);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), "TLS handshake"));
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
}
END_TEST

START_TEST(tls_handshake_is_bounded_by_the_connect_deadline)
{
	struct keylock	*kl = keylock_new();
	char		 server[40], tls[48];
	int		 lfd = fake_listen(server, sizeof(server));
	int64_t		 t0;

	/* Accepted by the kernel, never answered. */
	snprintf(tls, sizeof(tls), "tls://%s", server);
	keylock_set_timeout(kl, 300);
	t0 = now_ms();
	ck_assert_st(kl, keylock_connect(kl, tls, NULL),
	    KEYLOCK_ERR_DEADLINE);
	ck_assert_window(250, 2000, now_ms() - t0);
	ck_assert_ptr_nonnull(strstr(keylock_message(kl), "timed out"));
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
	close(lfd);
}
END_TEST

START_TEST(every_status_has_a_word_and_a_text)
{
	static const enum keylock_status all[] = { KEYLOCK_OK,
	    KEYLOCK_ERR_SYNTAX, KEYLOCK_ERR_BADKEY, KEYLOCK_ERR_TOOLONG,
	    KEYLOCK_ERR_TIMEOUT, KEYLOCK_ERR_LOCKED, KEYLOCK_ERR_BUSY,
	    KEYLOCK_ERR_DEADLOCK, KEYLOCK_ERR_HELD, KEYLOCK_ERR_NOTHELD,
	    KEYLOCK_ERR_CONFLICT, KEYLOCK_ERR_LIMIT, KEYLOCK_ERR_AUTH,
	    KEYLOCK_ERR_SHUTDOWN, KEYLOCK_ERR_UNKNOWN, KEYLOCK_ERR_IO,
	    KEYLOCK_ERR_CLOSED, KEYLOCK_ERR_DEADLINE, KEYLOCK_ERR_PROTO,
	    KEYLOCK_ERR_INVAL, KEYLOCK_ERR_NOMEM, KEYLOCK_ERR_TLS,
	    KEYLOCK_PENDING };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		ck_assert_str_ne(keylock_status_word(all[i]), "?");
		ck_assert_str_ne(keylock_strstatus(all[i]), "unknown status");
	}
	ck_assert_str_eq(keylock_status_word(KEYLOCK_ERR_LOCKED), "LOCKED");
	ck_assert_str_eq(keylock_status_word((enum keylock_status)42), "?");
}
END_TEST

static Suite *
libkeylock_suite(void)
{
	Suite	*s = suite_create("libkeylock");
	TCase	*tc;

	tc = tcase_create("connect");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, T_CASE_S);
	tcase_add_test(tc, connect_by_tcp_unix_and_bracketed_address);
	tcase_add_test(tc, connect_without_server_uses_keylock_server);
	tcase_add_test(tc, connect_refused_is_io_naming_the_address);
	tcase_add_test(tc, malformed_address_is_inval);
	tcase_add_test(tc, connect_deadline_bounds_a_handshake_that_hangs);
	tcase_add_test(tc, auth_secret_is_sent_on_connect);
	tcase_add_test(tc, new_handle_is_not_connected);
	tcase_add_test(tc, socket_is_nonblocking_and_close_on_exec);
	suite_add_tcase(s, tc);

	tc = tcase_create("lock");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, T_CASE_S);
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
	suite_add_tcase(s, tc);

	tc = tcase_create("async");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, T_CASE_S);
	tcase_add_test(tc, lock_recv_is_pending_until_the_grant);
	tcase_add_test(tc, calls_during_a_pending_lock_are_refused);
	tcase_add_test(tc, close_withdraws_a_pending_wait);
	tcase_add_test(tc, lock_forever_outlasts_the_reply_timeout);
	suite_add_tcase(s, tc);

	tc = tcase_create("failures");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, T_CASE_S);
	tcase_add_test(tc, silent_server_hits_the_deadline_and_closes);
	tcase_add_test(tc, lock_deadline_is_its_timeout_plus_the_reply_timeout);
	tcase_add_test(tc, options_are_sent_as_the_protocol_spells_them);
	tcase_add_test(tc, garbage_reply_is_proto_and_closes);
	tcase_add_test(tc, unknown_error_code_keeps_the_connection);
	tcase_add_test(tc, server_closing_mid_reply_is_closed);
	tcase_add_test(tc, long_reply_is_read_whole);
	tcase_add_test(tc, check_reports_the_server_going_away);
	tcase_add_test(tc, check_reports_unasked_bytes);
	suite_add_tcase(s, tc);

	tc = tcase_create("replies");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, T_CASE_S);
	tcase_add_test(tc, stats_json_has_the_protocol_members);
	tcase_add_test(tc, info_json_lists_holders_then_waiters_in_order);
	tcase_add_test(tc, raw_request_and_quit);
	tcase_add_test(tc, every_status_has_a_word_and_a_text);
	suite_add_tcase(s, tc);

	tc = tcase_create("tls");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, T_CASE_S);
	tcase_add_test(tc, tls_files_are_checked_when_set);
	tcase_add_test(tc, tls_prefix_takes_no_unix_socket);
	tcase_add_test(tc, tls_to_a_plain_server_fails_in_the_handshake);
	tcase_add_test(tc, tls_handshake_is_bounded_by_the_connect_deadline);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner	*sr;
	int	 failed;

	keylockd = getenv("KEYLOCKD");
	if (keylockd == NULL || *keylockd == '\0') {
		fprintf(stderr, "check_libkeylock: SKIP: KEYLOCKD is not set "
		    "(make check sets it)\n");
		return 77;
	}
	if (access(keylockd, X_OK) != 0) {
		fprintf(stderr, "check_libkeylock: KEYLOCKD=%s: %s\n",
		    keylockd, strerror(errno));
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	strcpy(topdir, "/tmp/check_libkeylock.XXXXXX");
	if (mkdtemp(topdir) == NULL) {
		fprintf(stderr, "check_libkeylock: mkdtemp: %s\n",
		    strerror(errno));
		return 1;
	}
	sr = srunner_create(libkeylock_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	/* a failed test's daemon log is worth a look */
	if (failed == 0 || getenv("KEYLOCKD_KEEP_FAILED") == NULL)
		remove_tree(topdir);
	else
		fprintf(stderr, "check_libkeylock: logs kept in %s\n", topdir);
	return failed == 0 ? 0 : 1;
}
