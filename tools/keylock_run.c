/*
 * keylock: the command-line client of keylockd. SPDX-License-Identifier: MIT
 *
 * Lock-and-run, flock(1) across hosts: take the keys, run the command with
 * the fencing token in its environment, watch the connection while it
 * runs, release by closing. A lock lives exactly as long as its connection
 * (and, with --ttl, its lease): when either is gone the command no longer
 * holds the lock, so it is stopped, SIGTERM first and SIGKILL after the
 * grace period, and keylock exits CLI_EXIT_LOST. With a session
 * (--session, $KEYLOCK_SESSION) the connection may drop and come back:
 * the library resumes it, driven from the poll loop here, and the lock is
 * lost only when its window ends first (libkeylock(3), SESSIONS), never
 * before. Signals sent to keylock are passed on to the command; keylock
 * never dies of them first.
 */
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keylock.h"
#include "keylock_cli.h"

#define RUN_NOTICE_MS		100	/* -v: "waiting" after this long */
#define RUN_REFRESH_PARTS	3	/* refresh a lease every ttl / 3 */
#define RUN_SHELL		"/bin/sh"
/* Suspended: how long one keylock_keepalive() may try before the loop
 * looks at signals and the command again. */
#define RUN_RESUME_SLICE_MS	200

/* Signals passed on to the command; SIGCHLD and SIGPIPE are ours. */
static const int run_forwarded[] = {
	SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2
};
#define RUN_NFORWARDED	(sizeof(run_forwarded) / sizeof(run_forwarded[0]))
#define RUN_NSIGNALS	(RUN_NFORWARDED + 2)

/* The signal handler's only way out; the rest of the program is in the
 * poll loop. */
static int			 run_sigpipe[2] = { -1, -1 };
static struct sigaction		 run_saved[RUN_NSIGNALS];
static int			 run_signo[RUN_NSIGNALS];
static size_t			 run_nsaved;

struct run {
	struct cli	*cli;
	struct keylock	*kl;
	char		*keys;		/* "a b c", for messages and env */
	pid_t		 pid;
	int		 lost;
	int		 suspended;	/* told, with -v */
	int64_t		 kill_at;	/* SIGKILL then; -1: not yet */
	int64_t		 refresh_at;	/* -1: no lease */
	int64_t		 lease_end;	/* the lease surely lasts until */
};

static int			 run_hold(struct run *);
static enum keylock_status	 run_acquire(struct run *, long, uint64_t *);
static int			 run_signals_install(sigset_t *);
static void			 run_signal_cb(int, siginfo_t *, void *);
static pid_t			 run_spawn(struct run *, const sigset_t *);
static int			 run_supervise(struct run *);
static void			 run_refresh(struct run *, int64_t);
static void			 run_keepalive(struct run *);
static void			 run_lose(struct run *, const char *);
static int64_t			 run_now_ms(void);

int
run_locked(struct cli *cli)
{
	struct run	r;
	size_t		len = 1;
	int		code;

	memset(&r, 0, sizeof(r));
	r.cli = cli;
	r.kill_at = r.refresh_at = -1;
	for (size_t i = 0; i < cli->nkeys; i++)
		len += strlen(cli->keys[i]) + 1;
	if ((r.keys = malloc(len)) == NULL) {
		cli_warnx("out of memory");
		return CLI_EXIT_OSERR;
	}
	r.keys[0] = '\0';
	for (size_t i = 0; i < cli->nkeys; i++) {
		if (i > 0)
			strcat(r.keys, " ");
		strcat(r.keys, cli->keys[i]);
	}
	code = run_hold(&r);
	free(r.keys);
	return code;
}

/* Connects, takes the keys, runs the command: keylock's exit code. */
static int
run_hold(struct run *r)
{
	struct cli		*cli = r->cli;
	enum keylock_status	 st;
	sigset_t		 oldmask;
	uint64_t		 token = 0;
	int64_t			 start;
	char			 tok[24], why[512];

	r->kl = cli_connect(cli, 1);
	start = run_now_ms();
	st = run_acquire(r, cli->wait_ms, &token);
	/* A front end cut off from its store (or stopping) will not grant:
	 * the next server of the list may, within what is left of -w. */
	why[0] = '\0';
	while ((st == KEYLOCK_ERR_BACKEND || st == KEYLOCK_ERR_SHUTDOWN) &&
	    (cli->wait_ms < 0 || run_now_ms() - start < cli->wait_ms)) {
		snprintf(why, sizeof(why), "%s", keylock_message(r->kl));
		/* the next server's connection and NAME are bounded by
		 * --connect-timeout, as the first server's are */
		keylock_set_timeout(r->kl, cli->connect_ms);
		if (keylock_failover(r->kl) != KEYLOCK_OK) {
			/* no server left to try: the refusal stands */
			if (keylock_last_status(r->kl) != KEYLOCK_ERR_INVAL) {
				st = keylock_last_status(r->kl);
				why[0] = '\0';
			}
			break;
		}
		if (cli->verbose)
			cli_warnx("%s %s; trying the next server",
			    keylock_status_word(st), why);
		why[0] = '\0';
		if (!cli_name(cli, r->kl)) {
			/* the next server did not answer its NAME */
			st = keylock_last_status(r->kl);
			snprintf(why, sizeof(why), "%s",
			    keylock_message(r->kl));
			break;
		}
		keylock_set_timeout(r->kl, CLI_REPLY_MS_DEFAULT);
		st = run_acquire(r, cli->wait_ms < 0 ? cli->wait_ms :
		    cli->wait_ms - (long)(run_now_ms() - start), &token);
	}
	if (st != KEYLOCK_OK && why[0] != '\0') {
		cli_warnx("%s %s", keylock_status_word(st), why);
		keylock_free(r->kl);
		return cli_exit_code(cli, st);
	}
	if (st != KEYLOCK_OK) {
		int	code = cli_exit_code(cli, st);

		/* flock(1) is silent about a lock it could not get */
		if (cli->verbose)
			cli_warnx("no lock on %s after %.3f s", r->keys,
			    (double)(run_now_ms() - start) / 1000.0);
		if (cli->verbose || (st != KEYLOCK_ERR_LOCKED &&
		    st != KEYLOCK_ERR_TIMEOUT && st != KEYLOCK_ERR_BUSY))
			cli_fail(cli, r->kl, st);
		keylock_free(r->kl);
		return code;
	}
	if (cli->verbose)
		cli_warnx("got %s, token %" PRIu64 " after %.3f s", r->keys,
		    token, (double)(run_now_ms() - start) / 1000.0);
	if (cli->lock.ttl_ms > 0) {
		r->lease_end = run_now_ms() + (int64_t)cli->lock.ttl_ms;
		r->refresh_at = run_now_ms() +
		    (int64_t)cli->lock.ttl_ms / RUN_REFRESH_PARTS;
	}

	snprintf(tok, sizeof(tok), "%" PRIu64, token);
	if (setenv("KEYLOCK_TOKEN", tok, 1) == -1 ||
	    setenv("KEYLOCK_KEYS", r->keys, 1) == -1 ||
	    run_signals_install(&oldmask) == -1) {
		cli_warnx("%s", strerror(errno));
		keylock_free(r->kl);
		return CLI_EXIT_OSERR;
	}
	if ((r->pid = run_spawn(r, &oldmask)) == -1) {
		keylock_free(r->kl);
		return CLI_EXIT_OSERR;
	}
	return run_supervise(r);
}

/* LOCK (or TRYLOCK for -n), waiting at most wait_ms (< 0: as the server
 * lets it). */
static enum keylock_status
run_acquire(struct run *r, long wait_ms, uint64_t *token)
{
	const struct cli	*cli = r->cli;
	const char *const	*keys = (const char *const *)cli->keys;
	enum keylock_status	 st;

	if (cli->nonblock)
		return keylock_trylock(r->kl, keys, cli->nkeys, &cli->lock,
		    token);
	if ((st = keylock_lock_send(r->kl, keys, cli->nkeys, &cli->lock,
	    wait_ms)) != KEYLOCK_OK)
		return st;
	if (cli->verbose) {
		st = keylock_lock_recv(r->kl, RUN_NOTICE_MS, token);
		if (st != KEYLOCK_PENDING)
			return st;
		if (wait_ms >= 0)
			cli_warnx("waiting for %s, up to %.3f s", r->keys,
			    (double)wait_ms / 1000.0);
		else
			cli_warnx("waiting for %s", r->keys);
	}
	return keylock_lock_recv(r->kl, KEYLOCK_WAIT_FOREVER, token);
}

/*
 * Routes the forwarded signals, SIGCHLD and SIGPIPE, saving what was there
 * for the child to get back. A signal ignored on entry stays ignored (as
 * nohup(1) and a shell's background jobs expect) and so is not forwarded:
 * the command inherits the same. Leaves them blocked; *oldmask undoes it.
 */
static int
run_signals_install(sigset_t *oldmask)
{
	struct sigaction	sa;
	sigset_t		block;
	int			sigs[RUN_NSIGNALS];
	size_t			n = 0;

	if (pipe(run_sigpipe) == -1)
		return -1;
	for (int i = 0; i < 2; i++) {
		fcntl(run_sigpipe[i], F_SETFD, FD_CLOEXEC);
		fcntl(run_sigpipe[i], F_SETFL, O_NONBLOCK);
	}
	for (size_t i = 0; i < RUN_NFORWARDED; i++)
		sigs[n++] = run_forwarded[i];
	sigs[n++] = SIGCHLD;
	sigs[n++] = SIGPIPE;

	sigemptyset(&block);
	for (size_t i = 0; i < n; i++)
		sigaddset(&block, sigs[i]);
	if (sigprocmask(SIG_BLOCK, &block, oldmask) == -1)
		return -1;
	for (size_t i = 0; i < n; i++) {
		memset(&sa, 0, sizeof(sa));
		sigemptyset(&sa.sa_mask);
		if (sigs[i] == SIGPIPE)
			sa.sa_handler = SIG_IGN;	/* stderr may be gone */
		else {
			sa.sa_sigaction = run_signal_cb;
			sa.sa_flags = SA_SIGINFO | SA_RESTART;
			if (sigs[i] == SIGCHLD)
				sa.sa_flags |= SA_NOCLDSTOP;
		}
		if (sigaction(sigs[i], NULL, &run_saved[run_nsaved]) == -1)
			return -1;
		if (sigs[i] != SIGCHLD && sigs[i] != SIGPIPE &&
		    run_saved[run_nsaved].sa_handler == SIG_IGN)
			continue;
		run_signo[run_nsaved++] = sigs[i];
		if (sigaction(sigs[i], &sa, NULL) == -1)
			return -1;
	}
	return 0;
}

static void
run_signal_cb(int sig, siginfo_t *si, void *ctx)
{
	unsigned char	b = (unsigned char)sig;
	int		saved = errno;

	(void)ctx;
#ifdef SI_KERNEL
	/* Ctrl-C and friends come from the terminal to the whole process
	 * group: the command has its own copy, it needs no second one. */
	if (sig != SIGCHLD && si != NULL && si->si_code == SI_KERNEL) {
		errno = saved;
		return;
	}
#else
	(void)si;
#endif
	if (write(run_sigpipe[1], &b, 1) == -1) {
		/* full pipe: the loop has plenty to read already */
	}
	errno = saved;
}

static pid_t
run_spawn(struct run *r, const sigset_t *oldmask)
{
	const struct cli	*cli = r->cli;
	const char		*what;
	pid_t			 pid, parent = getpid();
	int			 err;

	fflush(NULL);
	if ((pid = fork()) == -1) {
		cli_warnx("fork: %s", strerror(errno));
		return -1;
	}
	if (pid > 0) {
		sigprocmask(SIG_SETMASK, oldmask, NULL);
		return pid;
	}

	for (size_t i = 0; i < run_nsaved; i++)
		sigaction(run_signo[i], &run_saved[i], NULL);
	sigprocmask(SIG_SETMASK, oldmask, NULL);
#ifdef __linux__
	/* keylock killed outright: its connection, and so the lock, is
	 * gone; the command is stopped as if keylock had seen it. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(CLI_EXIT_LOST);
#else
	(void)parent;
#endif
	if (cli->shell_cmd != NULL) {
		what = RUN_SHELL;
		execl(RUN_SHELL, "sh", "-c", cli->shell_cmd, (char *)NULL);
	} else {
		what = cli->argv[0];
		execvp(cli->argv[0], cli->argv);
	}
	err = errno;
	fprintf(stderr, "keylock: %s: %s\n", what, strerror(err));
	_exit(err == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC);
}

/* Until the command exits: pass signals on, watch the connection, keep a
 * lease alive, and stop the command when the lock is lost. */
static int
run_supervise(struct run *r)
{
	struct pollfd	 pfd[2];
	unsigned char	 sigs[64];
	int64_t		 now, next;
	ssize_t		 n;
	int		 status, timeout;

	for (;;) {
		now = run_now_ms();
		next = -1;
		if (!r->lost && r->refresh_at != -1)
			next = r->refresh_at;
		if (r->kill_at != -1 && (next == -1 || r->kill_at < next))
			next = r->kill_at;
		if (!r->lost && keylock_keepalive_ms(r->kl) >= 0 &&
		    (next == -1 || now + keylock_keepalive_ms(r->kl) < next))
			next = now + keylock_keepalive_ms(r->kl);
		timeout = next == -1 ? -1 : next <= now ? 0 :
		    next - now > INT_MAX ? INT_MAX : (int)(next - now);

		pfd[0].fd = run_sigpipe[0];
		pfd[0].events = POLLIN;
		pfd[1].fd = r->lost ? -1 : keylock_fd(r->kl);
		pfd[1].events = POLLIN;
		pfd[0].revents = pfd[1].revents = 0;
		if (poll(pfd, 2, timeout) == -1 && errno != EINTR) {
			cli_warnx("poll: %s", strerror(errno));
			run_lose(r, "keylock cannot watch the connection");
		}

		while ((n = read(run_sigpipe[0], sigs, sizeof(sigs))) > 0)
			for (ssize_t i = 0; i < n; i++)
				if (sigs[i] != SIGCHLD)
					kill(r->pid, sigs[i]);
		if (waitpid(r->pid, &status, WNOHANG) == r->pid)
			break;

		if (!r->lost && pfd[1].revents != 0 &&
		    keylock_check(r->kl) != KEYLOCK_OK)
			run_lose(r, keylock_message(r->kl));
		if (!r->lost && keylock_keepalive_ms(r->kl) == 0)
			run_keepalive(r);
		now = run_now_ms();
		if (!r->lost && r->refresh_at != -1 && now >= r->refresh_at)
			run_refresh(r, now);
		if (r->kill_at != -1 && now >= r->kill_at) {
			kill(r->pid, SIGKILL);
			r->kill_at = -1;
		}
	}
	keylock_free(r->kl);
	if (r->lost)
		return CLI_EXIT_LOST;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);	/* as sh(1) and flock(1) */
}

/*
 * Renews the lease. The server counts the ttl from when it reads the
 * request, so a lease confirmed by a REFRESH sent at `now` lasts at least
 * until now + ttl; an answer later than the old lease's end is too late.
 */
static void
run_refresh(struct run *r, int64_t now)
{
	const struct cli	*cli = r->cli;
	enum keylock_status	 st;
	long			 left = (long)(r->lease_end - now);

	if (left <= 0) {
		run_lose(r, "the lease ran out before it could be refreshed");
		return;
	}
	keylock_set_timeout(r->kl, left);
	st = keylock_refresh(r->kl, (const char *const *)cli->keys,
	    cli->nkeys, cli->lock.ttl_ms, NULL);
	keylock_set_timeout(r->kl, CLI_REPLY_MS_DEFAULT);
	if (st != KEYLOCK_OK) {
		char	why[300];

		snprintf(why, sizeof(why), "REFRESH: %s %s",
		    keylock_status_word(st), keylock_message(r->kl));
		run_lose(r, why);
		return;
	}
	r->lease_end = now + (int64_t)cli->lock.ttl_ms;
	r->refresh_at = now + (int64_t)cli->lock.ttl_ms / RUN_REFRESH_PARTS;
}

/* A session's ping, or its RESUME while suspended: the lock is lost only
 * when the library says so, at the end of the window. */
static void
run_keepalive(struct run *r)
{
	enum keylock_status	st;

	/* A drop not yet read (the ping falls due as the connection ends)
	 * shows as suspended here, so -v tells of it and of the RESUME. */
	if (r->cli->verbose && !keylock_suspended(r->kl) &&
	    keylock_check(r->kl) != KEYLOCK_OK) {
		run_lose(r, keylock_message(r->kl));
		return;
	}
	if (r->cli->verbose && !r->suspended && keylock_suspended(r->kl)) {
		r->suspended = 1;
		cli_warnx("connection to keylockd lost; the session keeps %s "
		    "for up to %.3f s while it reconnects", r->keys,
		    (double)keylock_session_grace(r->kl) / 1000.0);
	}
	st = keylock_keepalive(r->kl, RUN_RESUME_SLICE_MS);
	if (st != KEYLOCK_OK && st != KEYLOCK_PENDING) {
		char	why[300];

		snprintf(why, sizeof(why), "%s", keylock_message(r->kl));
		run_lose(r, why);
		return;
	}
	if (r->cli->verbose && r->suspended && !keylock_suspended(r->kl)) {
		r->suspended = 0;
		cli_warnx("session resumed: %s still held", r->keys);
	}
}

static void
run_lose(struct run *r, const char *why)
{
	if (r->lost)
		return;
	r->lost = 1;
	cli_warnx("lost the lock on %s (%s); stopping the command: SIGTERM, "
	    "SIGKILL after %.3f s", r->keys, why,
	    (double)r->cli->grace_ms / 1000.0);
	/* Whatever else the connection held goes too. */
	keylock_close(r->kl);
	kill(r->pid, SIGTERM);
	r->kill_at = run_now_ms() + r->cli->grace_ms;
}

static int64_t
run_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
