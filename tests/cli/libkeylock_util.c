/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The harness of check_libkeylock: a private keylockd per test (port 0, a
 * unix socket, state in a directory under lk_topdir), started by the
 * fixture and killed and reaped by it, with readiness from the port file
 * polled to a deadline; clients of it; and a fake server, a listening
 * socket in the test itself, for replies the daemon will not produce.
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

#define T_START_MS	10000	/* daemon readiness deadline */
#define T_CASE_S	20	/* per test */
#define T_MAX_ARGS	24

const char	*lk_keylockd;
struct lk_daemon lk_d;
char		 lk_topdir[64];

int64_t
lk_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
lk_sleep_ms(long ms)
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

void
lk_daemon_start(struct lk_daemon *dm, const char *const *extra)
{
	const char	*argv[T_MAX_ARGS];
	pid_t		 parent = getpid();
	int64_t		 deadline;
	int		 argc = 0, fd, st;

	memset(dm, 0, sizeof(*dm));
	snprintf(dm->dir, sizeof(dm->dir), "%s/lk_d.XXXXXX", lk_topdir);
	ck_assert_ptr_nonnull(mkdtemp(dm->dir));
	snprintf(dm->portfile, sizeof(dm->portfile), "%s/port", dm->dir);
	snprintf(dm->sock, sizeof(dm->sock), "%s/sock", dm->dir);
	snprintf(dm->log, sizeof(dm->log), "%s/log", dm->dir);
	argv[argc++] = lk_keylockd;
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
		execv(lk_keylockd, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	deadline = lk_now_ms() + T_START_MS;
	while ((dm->port = read_port(dm->portfile)) == 0) {
		ck_assert_msg(waitpid(dm->pid, &st, WNOHANG) == 0,
		    "keylockd exited during startup; log %s", dm->log);
		ck_assert_msg(lk_now_ms() < deadline, "keylockd not ready in "
		    "%d ms; log %s", T_START_MS, dm->log);
		lk_sleep_ms(10);
	}
	snprintf(dm->tcp, sizeof(dm->tcp), "127.0.0.1:%d", dm->port);
}

void
lk_daemon_stop(struct lk_daemon *dm, int sig)
{
	if (dm->pid > 0) {
		kill(dm->pid, sig);
		waitpid(dm->pid, NULL, 0);
		dm->pid = 0;
	}
}

void
lk_remove_tree(const char *dir)
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
	lk_daemon_start(&lk_d, NULL);
}

static void
teardown(void)
{
	lk_daemon_stop(&lk_d, SIGTERM);
}

struct keylock *
lk_client_at(const char *server, const char *name)
{
	struct keylock	*kl = keylock_new();

	ck_assert_ptr_nonnull(kl);
	ck_assert_st(kl, keylock_connect(kl, server, NULL), KEYLOCK_OK);
	if (name != NULL)
		ck_assert_st(kl, keylock_name(kl, name), KEYLOCK_OK);
	return kl;
}

struct keylock *
lk_client(const char *name)
{
	return lk_client_at(lk_d.tcp, name);
}

int
lk_fake_listen(char *server, size_t len)
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

int
lk_fake_pair(struct keylock *kl, int *lfd)
{
	char	server[32];
	int	fd;

	*lfd = lk_fake_listen(server, sizeof(server));
	ck_assert_st(kl, keylock_connect(kl, server, NULL), KEYLOCK_OK);
	ck_assert_int_ne(fd = accept(*lfd, NULL, NULL), -1);
	return fd;
}

long long
lk_stats_int(struct keylock *kl, const char *name)
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

TCase *
lk_tcase(Suite *s, const char *name)
{
	TCase	*tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, T_CASE_S);
	suite_add_tcase(s, tc);
	return tc;
}
