/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Live upgrade's processes (upgrade.h). The running server never changes
 * a flag of a descriptor it keeps: the descriptors it hands over travel
 * with SCM_RIGHTS and arrive close-on-exec, and only the channel's end has
 * close-on-exec cleared, in the child, so a failed attempt leaves the
 * server exactly as it was, and every descriptor made for the attempt is
 * closed whatever happens. The new process starts before the freeze, and
 * the freeze begins when it waits for the state. Both children are
 * started without fork(2) (posix_spawn(3), and vfork(2) for the new
 * process): a fork would copy the server's page tables and leave its
 * whole heap copy-on-write, so that each page it next writes costs a
 * fault, in the freeze of all places (HACKING.md, Live upgrade, the
 * pause). The verdict is two-way (READY, then GO) so that a new process
 * which reported ready after the old one gave up on it never serves:
 * without GO it exits without touching a socket. Each child leads a
 * process group of its own, and a failed attempt kills the group, not
 * the child alone: a binary that is a wrapper script leaves no child of
 * its own behind (upgrade_reap()).
 */
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "clock.h"
#include "kl.h"
#include "kstate.h"
#include "log.h"
#include "token.h"
#include "upgrade.h"
#include "util.h"

#define UPGRADE_LINE_MAX	512

extern char	**environ;

static char	upgrade_exe[PATH_MAX];
static uint64_t	upgrade_last_us, upgrade_main_us;
static uint64_t	upgrade_timeout_ms = KL_UPGRADE_TIMEOUT_DEFAULT;

void
upgrade_set_timeout(uint64_t ms)
{
	upgrade_timeout_ms = ms;
}

static uint64_t
upgrade_us(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void
upgrade_mark(const char *phase)
{
	uint64_t	now;

	if (!log_is_debug())
		return;
	now = upgrade_us();
	log_debug("upgrade: %s at %" PRIu64 ".%06" PRIu64 " (+%" PRIu64
	    " us)", phase, now / 1000000, now % 1000000,
	    upgrade_last_us != 0 ? now - upgrade_last_us : 0);
	upgrade_last_us = now;
}

void
upgrade_prefault(void *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
	static uintptr_t	page;
	uintptr_t		lo, hi;

	if (page == 0) {
		long	ps = sysconf(_SC_PAGESIZE);

		page = ps > 0 ? (uintptr_t)ps : 4096;
	}
	if (p == NULL || n == 0)
		return;
	lo = ((uintptr_t)p + page - 1) & ~(page - 1);
	hi = ((uintptr_t)p + n) & ~(page - 1);
	if (hi > lo)
		(void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
	(void)p;
	(void)n;
#endif
}

#define UPGRADE_HEAP_STEP	(64 * 1024)	/* below malloc's mmap threshold */
#define UPGRADE_HEAP_MAX	((size_t)1 << 30)
#define UPGRADE_HEAP_BARRIERS	4

static void	*upgrade_barrier[UPGRADE_HEAP_BARRIERS];

void
upgrade_heap_prefault(size_t n)
{
	void	**step;
	char	 *lo, *hi;
	size_t	  k, max, b;

	for (b = 0; b < UPGRADE_HEAP_BARRIERS && upgrade_barrier[b] != NULL;
	    b++)
		continue;
	if (n < 2 * UPGRADE_HEAP_STEP || b == UPGRADE_HEAP_BARRIERS)
		return;
	if (n > UPGRADE_HEAP_MAX)
		n = UPGRADE_HEAP_MAX;
	max = n / UPGRADE_HEAP_STEP;
	if ((step = kl_calloc(max, sizeof(*step))) == NULL)
		return;
	/* steps of the heap, one after the other as the heap grows by brk
	 * (glibc's, at least; elsewhere lo and hi may well say nothing) */
	lo = sbrk(0);
	for (k = 0; k < max && (step[k] = kl_malloc(UPGRADE_HEAP_STEP)) !=
	    NULL; k++)
		continue;
	hi = sbrk(0);
	if (lo != (char *)-1 && hi > lo)
		upgrade_prefault(lo, (size_t)(hi - lo));
	/* all back but the last: freed, they make one free chunk that the
	 * rebuild's allocations are carved from, and the last one, kept
	 * until upgrade_heap_done(), keeps it from the top of the heap,
	 * where free() would give it back to the system at once */
	for (size_t i = 0; i + 1 < k; i++)
		kl_free(step[i]);
	upgrade_barrier[b] = k > 0 ? step[k - 1] : NULL;
	kl_free(step);
}

void
upgrade_heap_done(void)
{
	for (size_t b = 0; b < UPGRADE_HEAP_BARRIERS; b++) {
		kl_free(upgrade_barrier[b]);
		upgrade_barrier[b] = NULL;
	}
}

void
upgrade_note_path(void)
{
	ssize_t	n;

	upgrade_main_us = upgrade_last_us = upgrade_us();

	n = readlink("/proc/self/exe", upgrade_exe, sizeof(upgrade_exe) - 1);
	upgrade_exe[n > 0 ? (size_t)n : 0] = '\0';
}

const char *
upgrade_path(void)
{
	return upgrade_exe;
}

/* argv with argv[0] the binary's path and extra (or NULL) at the end; one
 * allocation. */
static char **
upgrade_argv(char **argv, const char *extra)
{
	char	**v;
	size_t	  n = 0;

	while (argv[n] != NULL)
		n++;
	if ((v = kl_calloc(n + 2, sizeof(*v))) == NULL)
		return NULL;
	v[0] = upgrade_exe;
	for (size_t i = 1; i < n; i++)
		v[i] = argv[i];
	v[n > 0 ? n : 1] = (char *)(uintptr_t)extra;
	return v;
}

static void
upgrade_status_why(int status, char *why, size_t whylen)
{
	if (WIFEXITED(status))
		snprintf(why, whylen, "exited with status %d",
		    WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(why, whylen, "was killed by signal %d (%s)",
		    WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(why, whylen, "ended with status %d", status);
}

/* Kills pid's process group, which it leads (upgrade_spawn(), and
 * POSIX_SPAWN_SETPGROUP for --check-config): pid and whatever it started.
 * Only while pid is not reaped, so that its number cannot be another's. */
static void
upgrade_kill(pid_t pid)
{
	if (pid > 0)
		(void)kill(-pid, SIGKILL);
}

/*
 * Reaps pid, waiting at most ms for it to end, then killing it; and kills
 * what is left of its process group either way (a wrapper script's
 * children, say), before it is reaped: its end is seen with WNOWAIT, so
 * that the group's number stays its own until the kill.
 */
static int
upgrade_reap(pid_t pid, uint64_t ms)
{
	uint64_t	until = kl_clock_read_ms() + ms;
	siginfo_t	si;
	int		status = 0;

	for (;;) {
		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG |
		    WNOWAIT) == -1) {
			if (errno == EINTR)
				continue;
			return status;	/* not a child of ours */
		}
		if (si.si_pid == pid || kl_clock_read_ms() >= until)
			break;
		usleep(1000);
	}
	upgrade_kill(pid);
	while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
		continue;
	return status;
}

/* Whether env is NAME=... */
static bool
upgrade_env_is(const char *env, const char *name)
{
	size_t	len = strlen(name);

	return strncmp(env, name, len) == 0 && env[len] == '=';
}

/* environ without KL_UPGRADE_ENV and KL_STATE_LOCK_ENV, with var
 * (KL_UPGRADE_ENV=...) and lock (KL_STATE_LOCK_ENV=..., or NULL). */
static char **
upgrade_envp(char *var, char *lock)
{
	size_t	  n = 0, j = 0;
	char	**e;

	while (environ[n] != NULL)
		n++;
	if ((e = kl_calloc(n + 3, sizeof(*e))) == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!upgrade_env_is(environ[i], KL_UPGRADE_ENV) &&
		    !upgrade_env_is(environ[i], KL_STATE_LOCK_ENV))
			e[j++] = environ[i];
	e[j++] = var;
	e[j] = lock;
	return e;
}

/* What the vfork child of upgrade_spawn() could not do, for its parent
 * (they share memory until the exec). */
static volatile int	upgrade_spawn_err;

/*
 * The new process, with close-on-exec cleared on chan and on lock (the
 * state directory's, token_lock_fd(), or -1) in it only: a
 * vfork(2) child (no page tables copied, nothing left copy-on-write)
 * makes one fcntl, leads a process group of its own, and execs. As posix_spawn(3) does, every signal is
 * blocked across the vfork and the child puts each caught one back to its
 * default before it unblocks them, so that no handler of this process
 * runs in the child. 0 or an errno.
 */
static int
upgrade_spawn(pid_t *pid, int chan, int lock, char **argv, char **envp)
{
	struct sigaction	sa;
	sigset_t		all, old;
	pid_t			p;
	int			saved;

	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	upgrade_spawn_err = 0;
	if ((p = vfork()) == 0) {
		for (int sig = 1; sig < NSIG; sig++) {
			if (sigaction(sig, NULL, &sa) == -1 ||
			    sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)
				continue;
			memset(&sa, 0, sizeof(sa));
			sa.sa_handler = SIG_DFL;
			(void)sigaction(sig, &sa, NULL);
		}
		if (fcntl(chan, F_SETFD, 0) == -1 ||
		    (lock != -1 && fcntl(lock, F_SETFD, 0) == -1) ||
		    setpgid(0, 0) == -1)
			goto fail;
		sigprocmask(SIG_SETMASK, &old, NULL);
		execve(upgrade_exe, argv, envp);
fail:
		upgrade_spawn_err = errno != 0 ? errno : EINVAL;
		_exit(127);
	}
	saved = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (p == -1)
		return saved;
	if (upgrade_spawn_err != 0) {
		while (waitpid(p, NULL, 0) == -1 && errno == EINTR)
			continue;
		return upgrade_spawn_err;
	}
	*pid = p;
	return 0;
}

/* ---- before the freeze: --check-config, then the new process ---- */

/*
 * One attempt, in two steps, each a child watched from the event loop
 * with a deadline while the server serves: the binary's --check-config
 * (fd: a pipe of its output), then the new process itself (fd: this end
 * of the channel), which starts, configures itself, raises its token
 * mark, grows its heap and says "WAITING pid". Only then does the server
 * freeze (upgrade_handoff).
 */
struct upgrade_check {
	struct event_base *base;
	struct event	*ev;
	struct event	*timer;
	pid_t		 pid;
	int		 fd;
	bool		 started;	/* the new process, not the check */
	char		**argv;		/* the server's */
	size_t		 heap_hint;
	void		(*done)(void *, struct upgrade_check *, const char *);
	void		*arg;
	char		 line[UPGRADE_LINE_MAX];	/* the last one */
	size_t		 len;
	bool		 line_done;
};

static void	upgrade_check_read_cb(evutil_socket_t, short, void *);
static void	upgrade_check_timer_cb(evutil_socket_t, short, void *);

/* Its events watch fd, the timer armed with the deadline; false on no
 * memory. */
static bool
upgrade_check_watch(struct upgrade_check *uc)
{
	struct timeval	tv = { (time_t)(upgrade_timeout_ms / 1000),
			    (suseconds_t)(upgrade_timeout_ms % 1000) * 1000 };

	uc->ev = event_new(uc->base, uc->fd, EV_READ | EV_PERSIST,
	    upgrade_check_read_cb, uc);
	if (uc->timer == NULL)
		uc->timer = evtimer_new(uc->base, upgrade_check_timer_cb, uc);
	return uc->ev != NULL && uc->timer != NULL &&
	    event_add(uc->ev, NULL) == 0 && evtimer_add(uc->timer, &tv) == 0;
}

/* The child killed at once (timed_out) or reaped, everything freed. */
static int
upgrade_check_free(struct upgrade_check *uc, uint64_t wait_ms)
{
	int	status = 0;

	if (uc->ev != NULL)
		event_free(uc->ev);
	if (uc->timer != NULL)
		event_free(uc->timer);
	if (uc->fd != -1)
		close(uc->fd);
	if (uc->pid > 0)
		status = upgrade_reap(uc->pid, wait_ms);
	kl_free(uc);
	return status;
}

static void
upgrade_check_fail(struct upgrade_check *uc, const char *why)
{
	void	(*done)(void *, struct upgrade_check *, const char *) = uc->done;
	void	*arg = uc->arg;

	(void)upgrade_check_free(uc, 0);
	done(arg, NULL, why);
}

/* The check passed: the new process now, with the channel's other end. */
static void
upgrade_check_next(struct upgrade_check *uc)
{
	char	  var[80], lock[64], why[UPGRADE_LINE_MAX + 320];
	char	**v = NULL, **e = NULL;
	int	  chan[2], rc, lockfd = token_lock_fd();

	event_free(uc->ev);
	uc->ev = NULL;
	evtimer_del(uc->timer);
	close(uc->fd);
	uc->fd = -1;
	uc->pid = -1;
	uc->started = true;
	uc->len = 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
	    chan) == -1) {
		snprintf(why, sizeof(why), "socketpair: %s", strerror(errno));
		upgrade_check_fail(uc, why);
		return;
	}
	snprintf(var, sizeof(var), "%s=%d,%zu", KL_UPGRADE_ENV, chan[1],
	    uc->heap_hint);
	/* the state directory's lock passes on, held all along */
	snprintf(lock, sizeof(lock), "%s=%d", KL_STATE_LOCK_ENV, lockfd);
	if ((v = upgrade_argv(uc->argv, NULL)) == NULL ||
	    (e = upgrade_envp(var, lockfd != -1 ? lock : NULL)) == NULL) {
		kl_free(v);
		close(chan[0]);
		close(chan[1]);
		upgrade_check_fail(uc, "out of memory");
		return;
	}
	upgrade_mark("spawning");
	rc = upgrade_spawn(&uc->pid, chan[1], lockfd, v, e);
	kl_free(v);
	kl_free(e);
	close(chan[1]);
	uc->fd = chan[0];
	if (rc != 0) {
		uc->pid = -1;
		snprintf(why, sizeof(why), "cannot execute %.200s: %s",
		    upgrade_exe, strerror(rc));
		upgrade_check_fail(uc, why);
		return;
	}
	upgrade_mark("spawned");
	if (!upgrade_check_watch(uc))
		upgrade_check_fail(uc, "out of memory");	/* killed */
}

/* The check's end: its output ended (it exited) or the deadline. */
static void
upgrade_check_end(struct upgrade_check *uc, bool timed_out)
{
	char	why[UPGRADE_LINE_MAX + 320], st[64];
	int	status;

	if (timed_out) {
		snprintf(why, sizeof(why), "%.200s --check-config did not "
		    "finish within %" PRIu64 " ms", upgrade_exe,
		    upgrade_timeout_ms);
		upgrade_check_fail(uc, why);
		return;
	}
	status = upgrade_reap(uc->pid, 1000);
	uc->pid = -1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		upgrade_check_next(uc);
		return;
	}
	upgrade_status_why(status, st, sizeof(st));
	uc->line[uc->len] = '\0';
	snprintf(why, sizeof(why), "%.200s --check-config %s%s%s",
	    upgrade_exe, st, uc->len > 0 ? ": " : "", uc->line);
	upgrade_check_fail(uc, why);
}

/* What the new process said before the freeze: "WAITING pid", or
 * "ERR why", or nothing (it ended). */
static void
upgrade_check_heard(struct upgrade_check *uc, const char *line, ssize_t n)
{
	char	why[UPGRADE_LINE_MAX + 320], st[64];
	int	status;

	if (n > 0 && strncmp(line, "WAITING ", 8) == 0) {
		upgrade_mark("the new process is waiting");
		event_free(uc->ev);
		uc->ev = NULL;
		event_free(uc->timer);
		uc->timer = NULL;
		uc->done(uc->arg, uc, NULL);
		return;
	}
	if (n > 0 && strncmp(line, "ERR ", 4) == 0) {
		snprintf(why, sizeof(why), "%s", line + 4);
		upgrade_kill(uc->pid);
	} else if (n > 0) {
		snprintf(why, sizeof(why), "the new process said \"%.64s\"",
		    line);
		upgrade_kill(uc->pid);
	} else {
		status = upgrade_reap(uc->pid, 1000);
		upgrade_status_why(status, st, sizeof(st));
		snprintf(why, sizeof(why), "the new process (pid %d) %s "
		    "before it was ready", (int)uc->pid, st);
		uc->pid = -1;
	}
	upgrade_check_fail(uc, why);
}

static void
upgrade_check_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upgrade_check	*uc = arg;
	char			 buf[UPGRADE_LINE_MAX];
	ssize_t			 n;

	if (uc->started) {
		n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return;
		buf[n > 0 ? n : 0] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		upgrade_check_heard(uc, buf, n);
		return;
	}
	if ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n') {
				uc->line_done = true;
				continue;
			}
			if (uc->line_done) {
				uc->len = 0;
				uc->line_done = false;
			}
			if (uc->len < sizeof(uc->line) - 1)
				uc->line[uc->len++] = buf[i];
		}
		return;
	}
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	upgrade_check_end(uc, false);
}

static void
upgrade_check_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upgrade_check	*uc = arg;
	char			 why[128];

	if (!uc->started) {
		upgrade_check_end(uc, true);
		return;
	}
	snprintf(why, sizeof(why), "the new process (pid %d) was not ready "
	    "within %" PRIu64 " ms", (int)uc->pid, upgrade_timeout_ms);
	upgrade_check_fail(uc, why);
}

void
upgrade_check_cancel(struct upgrade_check *uc)
{
	upgrade_state_discard();
	if (uc != NULL)
		(void)upgrade_check_free(uc, 0);
}

struct upgrade_check *
upgrade_check_start(struct event_base *base, char **argv, size_t heap_hint,
    void (*done)(void *, struct upgrade_check *, const char *), void *arg,
    char *why, size_t whylen)
{
	struct upgrade_check	*uc;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t	 sa;
	char			**v;
	int			 p[2], rc;

	if (upgrade_exe[0] == '\0') {
		snprintf(why, whylen, "the path of this binary is unknown");
		return NULL;
	}
	if (access(upgrade_exe, X_OK) == -1) {
		snprintf(why, whylen, "%s: %s", upgrade_exe, strerror(errno));
		return NULL;
	}
	if ((uc = kl_calloc(1, sizeof(*uc))) == NULL ||
	    (v = upgrade_argv(argv, "--check-config")) == NULL) {
		kl_free(uc);
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	uc->fd = -1;
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) == -1) {
		snprintf(why, whylen, "pipe: %s", strerror(errno));
		kl_free(v);
		kl_free(uc);
		return NULL;
	}
	/* a process group of its own, killed whole (upgrade_reap()) */
	if ((rc = posix_spawnattr_init(&sa)) == 0) {
		if ((rc = posix_spawnattr_setflags(&sa,
		    POSIX_SPAWN_SETPGROUP)) == 0 &&
		    (rc = posix_spawnattr_setpgroup(&sa, 0)) == 0 &&
		    (rc = posix_spawn_file_actions_init(&fa)) == 0) {
			if ((rc = posix_spawn_file_actions_addopen(&fa, 0,
			    "/dev/null", O_RDONLY, 0)) == 0 &&
			    (rc = posix_spawn_file_actions_adddup2(&fa, p[1],
			    1)) == 0 &&
			    (rc = posix_spawn_file_actions_adddup2(&fa, p[1],
			    2)) == 0)
				rc = posix_spawn(&uc->pid, upgrade_exe, &fa,
				    &sa, v, environ);
			posix_spawn_file_actions_destroy(&fa);
		}
		posix_spawnattr_destroy(&sa);
	}
	kl_free(v);
	close(p[1]);
	if (rc != 0) {
		snprintf(why, whylen, "cannot execute %s: %s", upgrade_exe,
		    strerror(rc));
		close(p[0]);
		kl_free(uc);
		return NULL;
	}
	uc->base = base;
	uc->fd = p[0];
	uc->argv = argv;
	uc->heap_hint = heap_hint;
	uc->done = done;
	uc->arg = arg;
	if (!upgrade_check_watch(uc)) {
		(void)upgrade_check_free(uc, 0);
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	return uc;
}

/* ---- the state ---- */

/*
 * The state is written once, in place: into a shared mapping of the memfd
 * the new process maps, made and faulted in before the freeze where it
 * can be (upgrade_state_prepare), grown (ftruncate and mremap) if the
 * state outgrows it. No buffer, no copy.
 */
struct upgrade_state {
	int		 fd;
	unsigned char	*map;
	size_t		 size;		/* of the mapping and the file */
};

static struct upgrade_state	*upgrade_prepared;

static void
upgrade_state_free(struct upgrade_state *us)
{
	if (us == NULL)
		return;
	if (us->map != NULL)
		munmap(us->map, us->size);
	if (us->fd != -1)
		close(us->fd);
	kl_free(us);
}

static bool
upgrade_state_resize(struct upgrade_state *us, size_t n)
{
	void	*p;

	if (n <= us->size)
		return true;
	if (ftruncate(us->fd, (off_t)n) == -1)
		return false;
	p = us->map == NULL ? mmap(NULL, n, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_POPULATE, us->fd, 0) :
	    mremap(us->map, us->size, n, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return false;
	if (us->map != NULL)
		upgrade_prefault((unsigned char *)p + us->size, n - us->size);
	us->map = p;
	us->size = n;
	return true;
}

static struct upgrade_state *
upgrade_state_new(size_t n, char *why, size_t whylen)
{
	struct upgrade_state	*us;

	if ((us = kl_calloc(1, sizeof(*us))) == NULL) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if ((us->fd = memfd_create("keylockd-state", MFD_CLOEXEC |
	    MFD_ALLOW_SEALING)) == -1) {
		snprintf(why, whylen, "memfd_create: %s", strerror(errno));
		kl_free(us);
		return NULL;
	}
	if (!upgrade_state_resize(us, n < 4096 ? 4096 : n)) {
		snprintf(why, whylen, "a state of %zu bytes: %s", n,
		    strerror(errno));
		upgrade_state_free(us);
		return NULL;
	}
	return us;
}

static bool
upgrade_state_grow(struct ks_writer *w, size_t n)
{
	struct upgrade_state	*us = w->grow_arg;

	if (!upgrade_state_resize(us, n))
		return false;
	w->buf = us->map;
	w->cap = us->size;
	return true;
}

void
upgrade_state_prepare(size_t n)
{
	char	why[KL_UPGRADE_WHY_MAX];

	upgrade_state_discard();
	if ((upgrade_prepared = upgrade_state_new(n, why, sizeof(why))) ==
	    NULL)
		log_warnx("upgrade: %s (tried again when frozen)", why);
}

void
upgrade_state_discard(void)
{
	upgrade_state_free(upgrade_prepared);
	upgrade_prepared = NULL;
}

bool
upgrade_state_writer(struct ks_writer *w, size_t n, char *why,
    size_t whylen)
{
	struct upgrade_state	*us = upgrade_prepared;

	upgrade_prepared = NULL;
	if (us == NULL && (us = upgrade_state_new(n, why, whylen)) == NULL)
		return false;
	ks_writer_init_on(w, us->map, us->size, upgrade_state_grow, us);
	ks_writer_reserve(w, n);
	return true;
}

void
upgrade_state_end(struct ks_writer *w)
{
	if (w->grow == upgrade_state_grow)
		upgrade_state_free(w->grow_arg);
	memset(w, 0, sizeof(*w));
}

/* The state written: the file cut to its length, unmapped here, sealed;
 * its descriptor, still the writer's (upgrade_state_end closes it). */
static int
upgrade_state_seal(struct ks_writer *w, char *why, size_t whylen)
{
	struct upgrade_state	*us = w->grow_arg;

	if (w->grow != upgrade_state_grow) {
		snprintf(why, whylen, "no state");
		return -1;
	}
	munmap(us->map, us->size);
	us->map = NULL;
	w->buf = NULL;
	if (ftruncate(us->fd, (off_t)w->len) == -1) {
		snprintf(why, whylen, "the state's length: %s",
		    strerror(errno));
		return -1;
	}
	us->size = 0;
	/* what the new process maps is what was written, and stays so */
	(void)fcntl(us->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
	    F_SEAL_WRITE | F_SEAL_SEAL);
	return us->fd;
}

/* Reads one line from fd until deadline_ms: 1 a line, 0 end of file,
 * -1 the deadline. */
static int
upgrade_read_line(int fd, char *line, size_t size, uint64_t deadline_ms)
{
	struct pollfd	pfd = { fd, POLLIN, 0 };
	size_t		len = 0;
	uint64_t	now;
	ssize_t		n;
	int		rc;

	for (;;) {
		if ((now = kl_clock_read_ms()) >= deadline_ms)
			return -1;
		rc = poll(&pfd, 1, (int)(deadline_ms - now));
		if (rc == -1 && errno != EINTR)
			return 0;
		if (rc <= 0)
			continue;
		n = read(fd, line + len, size - 1 - len);
		if (n == -1 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return 0;
		len += (size_t)n;
		line[len] = '\0';
		if (memchr(line, '\n', len) != NULL || len == size - 1) {
			line[strcspn(line, "\n")] = '\0';
			return 1;
		}
	}
}

/*
 * After GO this process only logs and exits, and its exit (unmapping a
 * heap as large as the table) takes milliseconds of CPU: at the lowest
 * priority there is, it no longer keeps the new process (which may well
 * share its CPU, and its real-time priority, inherited) from serving.
 */
static void
upgrade_step_aside(void)
{
#ifdef SCHED_IDLE
	struct sched_param	sp = { 0 };

	(void)sched_setscheduler(0, SCHED_IDLE, &sp);
#endif
}

/* Most descriptors one message carries (the kernel's SCM_MAX_FD). */
#define UPGRADE_FDS_PER_MSG	253

/* Sends text with the descriptors fds[0..n) over chan by deadline_ms; 0
 * or an errno. */
static int
upgrade_send(int chan, const char *text, const int *fds, size_t n,
    uint64_t deadline_ms)
{
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) *
				    UPGRADE_FDS_PER_MSG)];
	}			 cm;
	struct msghdr		 msg;
	struct iovec		 iov;
	struct cmsghdr		*c;
	struct pollfd		 pfd = { chan, POLLOUT, 0 };
	uint64_t		 now;

	memset(&msg, 0, sizeof(msg));
	iov.iov_base = (void *)(uintptr_t)text;
	iov.iov_len = strlen(text);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (n > 0) {
		memset(&cm, 0, sizeof(cm));
		msg.msg_control = cm.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	}
	for (;;) {
		if (sendmsg(chan, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno != EAGAIN && errno != EINTR)
			return errno;
		if ((now = kl_clock_read_ms()) >= deadline_ms)
			return ETIMEDOUT;
		(void)poll(&pfd, 1, (int)(deadline_ms - now));
	}
}

bool
upgrade_handoff(struct upgrade_check *uc, struct ks_writer *w,
    const int *fds, size_t nfds, uint64_t deadline_ms,
    void (*ready)(pid_t), pid_t *child, char *why, size_t whylen)
{
	char		  line[UPGRADE_LINE_MAX], st[64];
	int		  state, rc = 0, status;
	pid_t		  pid = uc->pid;
	bool		  ok = false;

	*child = pid;
	if ((state = upgrade_state_seal(w, why, whylen)) == -1) {
		(void)upgrade_check_free(uc, 0);
		return false;
	}
	upgrade_mark("state sealed");
	/* the state, then the descriptors it names, in its order */
	snprintf(line, sizeof(line), "STATE %zu %zu\n", w->len, nfds);
	rc = upgrade_send(uc->fd, line, &state, 1, deadline_ms);
	for (size_t i = 0; i < nfds && rc == 0; i += UPGRADE_FDS_PER_MSG) {
		size_t	n = nfds - i < UPGRADE_FDS_PER_MSG ? nfds - i :
			    UPGRADE_FDS_PER_MSG;

		snprintf(line, sizeof(line), "FDS %zu\n", n);
		rc = upgrade_send(uc->fd, line, fds + i, n, deadline_ms);
	}
	upgrade_mark("state and descriptors sent");
	rc = rc == 0 ? upgrade_read_line(uc->fd, line, sizeof(line),
	    deadline_ms) : rc == ETIMEDOUT ? -1 : 0;
	upgrade_mark("the child's verdict heard");
	if (rc == 1 && strncmp(line, "READY ", 6) == 0) {
		ready(pid);
		if (send(uc->fd, "GO\n", 3, MSG_NOSIGNAL) == 3) {
			upgrade_mark("GO sent");
			upgrade_step_aside();
			ok = true;
			uc->pid = -1;	/* it is the server now */
			goto done;
		}
		snprintf(why, whylen, "the new process (pid %d) went away "
		    "after it reported ready", (int)pid);
	} else if (rc == 1 && strncmp(line, "ERR ", 4) == 0) {
		snprintf(why, whylen, "%s", line + 4);
	} else if (rc == 1) {
		snprintf(why, whylen, "the new process said \"%.64s\"", line);
	} else if (rc == 0) {
		status = upgrade_reap(pid, 1000);
		upgrade_status_why(status, st, sizeof(st));
		snprintf(why, whylen, "the new process (pid %d) %s before it "
		    "was ready", (int)pid, st);
		uc->pid = -1;
	} else {
		snprintf(why, whylen, "the new process (pid %d) was not ready "
		    "within %" PRIu64 " ms", (int)pid, upgrade_timeout_ms);
		upgrade_kill(pid);
	}
done:
	/* on failure: the channel closed, so that the child, if it still
	 * runs, exits touching nothing, and reaped */
	(void)upgrade_check_free(uc, 1000);
	return ok;
}

/* ---- the new process ---- */

/* A line to the old process: one message. */
static void
upgrade_say(int chan, const char *fmt, ...)
{
	char	line[KL_UPGRADE_WHY_MAX + 16];
	va_list	ap;
	int	n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	(void)send(chan, line, (size_t)n, MSG_NOSIGNAL);
}

/*
 * One message of the old process's: its text (a line) into line, the
 * descriptors it carries appended to in->fds (close-on-exec as they
 * arrive: MSG_CMSG_CLOEXEC), at most max of them. EOF or the deadline:
 * this process was not wanted after all, and exits touching nothing.
 */
static void
upgrade_in_recv(struct upgrade_in *in, char *line, size_t size, int *fds,
    size_t max, size_t *got, uint64_t deadline_ms)
{
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) *
				    UPGRADE_FDS_PER_MSG)];
	}			 cm;
	struct pollfd		 pfd = { in->chan_fd, POLLIN, 0 };
	struct msghdr		 msg;
	struct iovec		 iov;
	struct cmsghdr		*c;
	uint64_t		 now;
	ssize_t			 n;
	size_t			 k;

	*got = 0;
	for (;;) {
		memset(&msg, 0, sizeof(msg));
		iov.iov_base = line;
		iov.iov_len = size - 1;
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = cm.buf;
		msg.msg_controllen = sizeof(cm.buf);
		n = recvmsg(in->chan_fd, &msg, MSG_CMSG_CLOEXEC |
		    MSG_DONTWAIT);
		if (n >= 0)
			break;
		if (errno != EAGAIN && errno != EINTR)
			break;
		if ((now = kl_clock_read_ms()) >= deadline_ms)
			break;
		(void)poll(&pfd, 1, (int)(deadline_ms - now));
	}
	if (n <= 0) {
		log_warnx("upgrade: the old process did not hand over; "
		    "exiting without serving");
		_exit(1);
	}
	line[n] = '\0';
	for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (k > max - *got)
			upgrade_in_fail(in, "more descriptors than announced");
		memcpy(fds + *got, CMSG_DATA(c), k * sizeof(int));
		*got += k;
	}
	if (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC))
		upgrade_in_fail(in, "descriptors or text lost in passing "
		    "(the limit of open files?)");
}

bool
upgrade_in_open(struct upgrade_in *in)
{
	const char	*s = getenv(KL_UPGRADE_ENV);
	char		 line[UPGRADE_LINE_MAX];
	struct stat	 sb;
	unsigned long long len, nfds;
	uint64_t	 deadline;
	size_t		 hint, got;
	void		*p;
	int		 b, n = 0, state;

	memset(in, 0, sizeof(*in));
	in->state_fd = in->chan_fd = -1;
	if (s == NULL)
		return false;
	if (sscanf(s, "%d,%zu%n", &b, &hint, &n) != 2 || s[n] != '\0' ||
	    b < 3)
		fatalx("%s=%s: not a descriptor and a size", KL_UPGRADE_ENV, s);
	unsetenv(KL_UPGRADE_ENV);
	in->chan_fd = b;
	if (log_is_debug())
		log_debug("upgrade: new process: main at %" PRIu64 ".%06" PRIu64,
		    upgrade_main_us / 1000000, upgrade_main_us % 1000000);
	upgrade_mark("new process: configured, server made");
	if (fcntl(b, F_SETFD, FD_CLOEXEC) == -1)
		fatal("%s: channel descriptor %d", KL_UPGRADE_ENV, b);
	/* what the rebuild will take, faulted in while the old process
	 * still serves */
	upgrade_heap_prefault(hint);
	upgrade_mark("heap grown; waiting");
	upgrade_say(b, "WAITING %d\n", (int)getpid());
	/* the state, then its descriptors; the old process freezes and
	 * sends them as soon as it hears WAITING */
	deadline = kl_clock_read_ms() + upgrade_timeout_ms;
	upgrade_in_recv(in, line, sizeof(line), &state, 1, &got, deadline);
	in->start_ms = kl_clock_read_ms();
	upgrade_mark("state received");
	if (got != 1 || sscanf(line, "STATE %llu %llu\n", &len, &nfds) != 2)
		upgrade_in_fail(in, "no state in \"%.64s\"", line);
	in->state_fd = state;
	if (nfds > INT32_MAX || (nfds > 0 && ((in->fds = kl_calloc(nfds,
	    sizeof(*in->fds))) == NULL || (in->claimed = kl_calloc(nfds,
	    1)) == NULL)))
		upgrade_in_fail(in, "%llu descriptors: out of memory", nfds);
	while (in->nfds < nfds) {
		upgrade_in_recv(in, line, sizeof(line), in->fds + in->nfds,
		    nfds - in->nfds, &got, deadline);
		if (strncmp(line, "FDS ", 4) != 0 || got == 0)
			upgrade_in_fail(in, "no descriptors in \"%.64s\"",
			    line);
		in->nfds += got;
	}
	upgrade_mark("descriptors received");
	if (fstat(state, &sb) == -1)
		upgrade_in_fail(in, "the state descriptor: %s",
		    strerror(errno));
	if (sb.st_size <= 0 || (unsigned long long)sb.st_size != len ||
	    (uint64_t)sb.st_size > SIZE_MAX)
		upgrade_in_fail(in, "a state of %jd bytes, said to be %llu",
		    (intmax_t)sb.st_size, len);
	/* read once, all of it: its pages mapped in one call */
	p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE |
	    MAP_POPULATE, state, 0);
	if (p == MAP_FAILED)
		upgrade_in_fail(in, "mmap of the state: %s", strerror(errno));
	in->state = p;
	in->len = (size_t)sb.st_size;
	upgrade_mark("state mapped");
	return true;
}

int
upgrade_in_fd(struct upgrade_in *in, uint32_t index)
{
	if (index >= in->nfds || in->claimed[index])
		return -1;
	in->claimed[index] = 1;
	in->nclaimed++;
	return in->fds[index];
}

bool
upgrade_in_fds_claimed(const struct upgrade_in *in)
{
	return in->nclaimed == in->nfds;
}

void
upgrade_in_fail(struct upgrade_in *in, const char *fmt, ...)
{
	char	why[KL_UPGRADE_WHY_MAX];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	log_warnx("upgrade: refused the state: %s", why);
	upgrade_say(in->chan_fd, "ERR %s\n", why);
	_exit(1);
}

void
upgrade_in_ready(struct upgrade_in *in)
{
	char	line[16];

	if (in->state != NULL)
		munmap((void *)(uintptr_t)in->state, in->len);
	in->state = NULL;
	close(in->state_fd);
	kl_free(in->fds);
	kl_free(in->claimed);
	in->fds = NULL;
	in->claimed = NULL;
	upgrade_say(in->chan_fd, "READY %d\n", (int)getpid());
	upgrade_mark("READY sent");
	if (upgrade_read_line(in->chan_fd, line, sizeof(line),
	    kl_clock_read_ms() + upgrade_timeout_ms) != 1 ||
	    strcmp(line, "GO") != 0) {
		log_warnx("upgrade: the old process did not hand over; "
		    "exiting without serving");
		_exit(1);
	}
	upgrade_mark("GO heard");
	close(in->chan_fd);
}
