/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The harness's daemons (kltest.h), the one launcher of the C tests: each
 * keylockd starts from the build tree (or under KEYLOCKD_WRAPPER) in its
 * own mkdtemp directory under the run's, with --config /dev/null, and with
 * fork/exec and PR_SET_PDEATHSIG so a killed test cannot leave one
 * behind. Ready means the port file holds a port and both the TCP port
 * and the unix socket accept a connection; nothing sleeps to synchronise.
 * Stopping is SIGTERM and a reap with a deadline.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/prctl.h>
#include <sys/wait.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kltest_impl.h"

#define KT_MAX_DAEMONS	8
#define KT_MAX_ARGV	(KT_MAX_WRAP + 16 + KT_MAX_EXTRA + 1)

static struct kt_daemon *kt_daemons[KT_MAX_DAEMONS];

/* A port number of up to 5 digits at s, ended by a LF; 0 if none. */
static int
kt_port_at(const char *s)
{
	long	v = 0;
	int	i;

	for (i = 0; isdigit((unsigned char)s[i]) && i < 6; i++)
		v = v * 10 + (s[i] - '0');
	return i > 0 && s[i] == '\n' && v >= 1 && v <= 65535 ? (int)v : 0;
}

/* The port file: the TCP port's line, then "tls PORT" (--tls-port) and
 * "metrics PORT" lines, if any. */
static bool
kt_read_portfile(const char *path, int *port, int *tls_port, char *bad,
    size_t badlen)
{
	char		 buf[128];
	const char	*tls;
	ssize_t		 n;
	int		 fd;

	bad[0] = '\0';
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return false;
	buf[n] = '\0';
	if ((*port = kt_port_at(buf)) == 0 || buf[n - 1] != '\n' ||
	    ((tls = strstr(buf, "\ntls ")) != NULL &&
	    (*tls_port = kt_port_at(tls + 5)) == 0)) {
		*port = 0;
		snprintf(bad, badlen, "%s", kt_esc(buf, (size_t)n));
		return false;
	}
	return true;
}

static int
kt_try_connect(const struct kt_daemon *d, enum kt_transport t)
{
	struct kt_conn *c = kt_conn_open(d, t, 200);

	if (c == NULL)
		return -1;
	kt_conn_close(c);
	return 0;
}

static void
kt_describe_status(int st, char *buf, size_t len)
{
	if (WIFEXITED(st))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, len, "killed by signal %d (%s)%s", WTERMSIG(st),
		    strsignal(WTERMSIG(st)), WCOREDUMP(st) ? ", core dumped" :
		    "");
	else
		snprintf(buf, len, "wait status 0x%x", st);
}

void
kt_print_log_tail(const struct kt_daemon *d, int nlines)
{
	char	*buf;
	long	 size, start;
	int	 seen = 0;
	FILE	*f;

	if (d->log[0] == '\0' || (f = fopen(d->log, "r")) == NULL)
		return;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	start = size > 65536 ? size - 65536 : 0;
	fseek(f, start, SEEK_SET);
	buf = malloc((size_t)(size - start) + 1);
	if (buf != NULL) {
		size_t n = fread(buf, 1, (size_t)(size - start), f);
		long i;

		buf[n] = '\0';
		for (i = (long)n - 1; i > 0; i--)
			if (buf[i - 1] == '\n' && ++seen >= nlines)
				break;
		if (i < 0)
			i = 0;
		fprintf(stderr, "---- last lines of %s ----\n%s---- end of "
		    "log ----\n", d->log, buf + i);
		free(buf);
	}
	fclose(f);
}

/* A free slot in kt_daemons, or -1. */
static int
kt_daemon_slot(void)
{
	for (int slot = 0; slot < KT_MAX_DAEMONS; slot++)
		if (kt_daemons[slot] == NULL)
			return slot;
	return -1;
}

/* A daemon's record and its directory under the run's; not started. */
static struct kt_daemon *
kt_daemon_new_at(const char *file, int line, const char *statedir,
    const char *const *extra)
{
	struct kt_daemon *d;

	if ((d = calloc(1, sizeof(*d))) == NULL)
		kt_fail_at(file, line, "out of memory");
	snprintf(d->dir, sizeof(d->dir), "%s/d.XXXXXX", kt_rundir);
	if (mkdtemp(d->dir) == NULL)
		kt_fail_at(file, line, "mkdtemp: %s", strerror(errno));
	snprintf(d->portfile, sizeof(d->portfile), "%s/port", d->dir);
	snprintf(d->sock, sizeof(d->sock), "%s/sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
	snprintf(d->statedir, sizeof(d->statedir), "%s",
	    statedir != NULL ? statedir : d->dir);
	snprintf(d->host, sizeof(d->host), "127.0.0.1");
	d->has_unix = true;
	for (int n = 0; extra != NULL && extra[n] != NULL && n < KT_MAX_EXTRA;
	    n++)
		d->extra[n] = strdup(extra[n]);
	return d;
}

/* Fills argv (KT_MAX_ARGV slots) with the wrapper, keylockd and its
 * options for d; returns argc. The strings are borrowed from d and the
 * settings. */
static int
kt_daemon_argv(const struct kt_daemon *d, const char **argv)
{
	int	argc = 0;

	for (int i = 0; i < kt_nwrap; i++)
		argv[argc++] = kt_wrap[i];
	argv[argc++] = kt_bin;
	/* first, so that a test's own --config (the last one wins) can
	 * replace it; never the operator's file */
	argv[argc++] = "--config";
	argv[argc++] = "/dev/null";
	argv[argc++] = "--bind";
	argv[argc++] = "127.0.0.1";
	argv[argc++] = "--port";
	argv[argc++] = "0";
	argv[argc++] = "--port-file";
	argv[argc++] = d->portfile;
	argv[argc++] = "--unix";
	argv[argc++] = d->sock;
	argv[argc++] = "--state-dir";
	argv[argc++] = d->statedir;
	argv[argc++] = "--log-level";
	argv[argc++] = "debug";
	for (int i = 0; d->extra[i] != NULL; i++)
		argv[argc++] = d->extra[i];
	argv[argc] = NULL;
	return argc;
}

/* Opens d's log for appending and writes the command line to it. */
static int
kt_daemon_log_open_at(const char *file, int line, const struct kt_daemon *d,
    const char *const *argv, int argc)
{
	int	logfd;

	logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd == -1)
		kt_fail_at(file, line, "%s: %s", d->log, strerror(errno));
	dprintf(logfd, "kltest: starting:");
	for (int i = 0; i < argc; i++)
		dprintf(logfd, " %s", argv[i]);
	dprintf(logfd, "\n");
	return logfd;
}

/* Forks and execs argv with stdout and stderr on logfd; the child dies
 * with its test, however the test ends. */
static pid_t
kt_daemon_spawn_at(const char *file, int line, const char *const *argv,
    int logfd)
{
	pid_t	parent = getpid(), pid;

	pid = fork();
	if (pid == -1)
		kt_fail_at(file, line, "fork: %s", strerror(errno));
	if (pid == 0) {
		sigset_t all;
		int	 null = open("/dev/null", O_RDONLY);

		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		signal(SIGPIPE, SIG_DFL);
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		if (null != -1)
			dup2(null, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		execvp(argv[0], (char *const *)(uintptr_t)argv);
		dprintf(2, "kltest: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

/* Waits until the port file holds a port and both the TCP port and the
 * unix socket accept; fails the test if d exits or the deadline passes. */
static void
kt_daemon_wait_ready_at(const char *file, int line, struct kt_daemon *d)
{
	char		 bad[128], why[128];
	bool		 tcp_ok = false;
	int		 st;
	uint64_t	 deadline;

	deadline = kt_now_ms() + (uint64_t)KT_START_MS * kt_startf;
	for (;;) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->running = false;
			d->status = st;
			kt_describe_status(st, why, sizeof(why));
			kt_print_log_tail(d, 40);
			kt_fail_at(file, line, "keylockd exited during startup "
			    "(%s); log %s", why, d->log);
		}
		if (d->port == 0 && !kt_read_portfile(d->portfile, &d->port,
		    &d->tls_port, bad, sizeof(bad)) && bad[0] != '\0')
			kt_fail_at(file, line, "port file %s holds \"%s\", not "
			    "a port number and LF", d->portfile, bad);
		if (d->port != 0)
			snprintf(d->addr, sizeof(d->addr), "%s:%d", d->host,
			    d->port);
		if (d->port != 0 && !tcp_ok)
			tcp_ok = kt_try_connect(d, KT_TCP) == 0;
		if (tcp_ok && kt_try_connect(d, KT_UNIX) == 0)
			break;
		if (kt_now_ms() > deadline) {
			kt_print_log_tail(d, 40);
			kt_fail_at(file, line, "keylockd not ready within "
			    "%u ms (port file %s, tcp %s, unix %s); log %s",
			    KT_START_MS * kt_startf, d->port ? "read" :
			    "missing", tcp_ok ? "ok" : "refused", d->sock,
			    d->log);
		}
		kt_sleep_ms(5);		/* polling interval */
	}
}

struct kt_daemon *
kt_daemon_launch_at(const char *file, int line, const char *statedir,
    const char *const *extra)
{
	struct kt_daemon *d;
	const char	*argv[KT_MAX_ARGV];
	int		 argc, logfd, slot;

	if (kt_external())
		kt_fail_at(file, line, "this test needs a private daemon");
	if ((slot = kt_daemon_slot()) == -1)
		kt_fail_at(file, line, "too many daemons in one test");
	d = kt_daemon_new_at(file, line, statedir, extra);
	argc = kt_daemon_argv(d, argv);
	logfd = kt_daemon_log_open_at(file, line, d, argv, argc);
	d->pid = kt_daemon_spawn_at(file, line, argv, logfd);
	close(logfd);
	d->owner = getpid();
	d->running = true;
	kt_daemons[slot] = d;
	return d;
}

struct kt_daemon *
kt_daemon_start_at(const char *file, int line, const char *statedir,
    const char *const *extra)
{
	struct kt_daemon *d = kt_daemon_launch_at(file, line, statedir, extra);

	kt_daemon_wait_ready_at(file, line, d);
	return d;
}

void
kt_daemon_signal(struct kt_daemon *d, int sig)
{
	if (d->running && d->owner == getpid())
		kill(d->pid, sig);
}

static bool
kt_reap(struct kt_daemon *d, uint64_t timeout_ms)
{
	uint64_t	deadline = kt_now_ms() + timeout_ms;
	int		st;

	while (d->running) {
		pid_t r = waitpid(d->pid, &st, WNOHANG);

		if (r == d->pid || (r == -1 && errno == ECHILD)) {
			d->running = false;
			d->status = r == d->pid ? st : 0;
			break;
		}
		if (kt_now_ms() > deadline)
			return false;
		kt_sleep_ms(2);
	}
	return true;
}

int
kt_daemon_wait_at(const char *file, int line, struct kt_daemon *d,
    bool check_zero)
{
	char	why[128];

	if (d->external)
		return 0;
	if (!kt_reap(d, (uint64_t)KT_STOP_MS * kt_startf)) {
		kill(d->pid, SIGKILL);
		kt_reap(d, 10000);
		kt_fail_at(file, line, "keylockd (pid %d) did not exit within "
		    "%u ms; killed; log %s", (int)d->pid,
		    KT_STOP_MS * kt_startf, d->log);
	}
	if (check_zero && !(WIFEXITED(d->status) &&
	    WEXITSTATUS(d->status) == 0)) {
		kt_describe_status(d->status, why, sizeof(why));
		kt_print_log_tail(d, 40);
		kt_fail_at(file, line, "keylockd ended with %s, want exit "
		    "status 0 after SIGTERM; log %s", why, d->log);
	}
	return d->status;
}

int
kt_daemon_stop_at(const char *file, int line, struct kt_daemon *d,
    bool check_zero)
{
	if (d->external || !d->running)
		return d->status;
	kill(d->pid, SIGTERM);
	return kt_daemon_wait_at(file, line, d, check_zero);
}

void
kt_daemon_free(struct kt_daemon *d)
{
	if (d == NULL || d->external)
		return;
	if (d->running && d->owner == getpid()) {
		kill(d->pid, SIGKILL);
		kt_reap(d, 10000);
	}
	for (int i = 0; i < KT_MAX_DAEMONS; i++)
		if (kt_daemons[i] == d)
			kt_daemons[i] = NULL;
	kt_rmtree(d->dir);
	for (int i = 0; d->extra[i] != NULL; i++)
		free(d->extra[i]);
	if (kt_d == d)
		kt_d = NULL;
	free(d);
}

void
kt_daemons_stop(void)
{
	for (int i = 0; i < KT_MAX_DAEMONS; i++) {
		struct kt_daemon *d = kt_daemons[i];

		if (d == NULL || d->owner != getpid())
			continue;
		if (d->running)
			kt_daemon_stop_at(__FILE__, __LINE__, d, true);
		kt_daemon_free(d);
	}
}

void
kt_daemons_kill(void)
{
	for (int i = 0; i < KT_MAX_DAEMONS; i++) {
		struct kt_daemon *d = kt_daemons[i];

		if (d == NULL || d->owner != getpid())
			continue;
		if (d->running) {
			kill(d->pid, SIGTERM);
			if (!kt_reap(d, (uint64_t)KT_STOP_MS * kt_startf)) {
				kill(d->pid, SIGKILL);
				kt_reap(d, 10000);
			}
		}
		kt_daemon_free(d);
	}
}
