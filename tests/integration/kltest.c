/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The integration harness (see kltest.h): the run's settings from the
 * environment, time and timing factors, suites and fixtures, failures,
 * and the run's temporary directories. Daemons are in kltest_daemon.c,
 * connections in kltest_conn.c, the asserting layer in kltest_expect.c.
 * Daemons live in mkdtemp directories under /tmp; atexit and kt_teardown
 * stop them. Nothing here sleeps to synchronise: it polls a condition
 * until a deadline.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/resource.h>
#include <sys/stat.h>

#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "kltest_impl.h"

#define KT_MAX_TMPDIRS	8
#define KT_MAX_SLOW	1000	/* KEYLOCKD_TEST_SLOW */

struct kt_daemon *kt_d;

char		 kt_bin[PATH_MAX];
char		*kt_wrap[KT_MAX_WRAP + 1];
int		 kt_nwrap;
unsigned	 kt_startf = 1;
/* Every directory of a run lives under kt_rundir, made by the runner
 * process and removed by it at exit: a failed test ends with _exit() in
 * Check's fork mode and cannot clean up after itself. */
char		 kt_rundir[64];

static const char *kt_prog = "kltest";
static unsigned	 kt_slowf = 1;
static bool	 kt_ext;
static bool	 kt_keep;
static struct kt_daemon kt_extd;
static pid_t	 kt_rundir_owner;
static char	 kt_tmpdirs[KT_MAX_TMPDIRS][128];
static pid_t	 kt_tmpdir_owner[KT_MAX_TMPDIRS];

static void	 kt_atexit(void);
static int	 kt_rm_cb(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw);

/* Time */

uint64_t
kt_now_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

uint64_t
kt_now_us(void)
{
	return kt_now_ns() / 1000;
}

uint64_t
kt_now_ms(void)
{
	return kt_now_ns() / 1000000;
}

void
kt_sleep_us(uint64_t us)
{
	struct timespec	ts = { (time_t)(us / 1000000),
	    (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

void
kt_sleep_ms(uint64_t ms)
{
	kt_sleep_us(ms * 1000);
}

unsigned
kt_slow(void)
{
	return kt_slowf;
}

int64_t
kt_ms(int64_t ms)
{
	return ms * (int64_t)kt_slowf;
}

int64_t
kt_cpu_ms(int64_t ms)
{
	return ms * (int64_t)(kt_startf > kt_slowf ? kt_startf : kt_slowf);
}

int64_t
kt_upper(int64_t nominal, int64_t upper)
{
	return nominal + (upper - nominal) * (int64_t)kt_slowf;
}

const char *
kt_esc(const void *p, size_t len)
{
	static _Thread_local char bufs[4][1400];
	static _Thread_local int next;
	const unsigned char *s = p;
	char		*b = bufs[next++ & 3];
	size_t		 o = 0, i;

	for (i = 0; i < len && o < sizeof(bufs[0]) - 40; i++) {
		unsigned char ch = s[i];

		if (ch == '\\' || ch == '"') {
			b[o++] = '\\';
			b[o++] = (char)ch;
		} else if (ch == '\r') {
			b[o++] = '\\';
			b[o++] = 'r';
		} else if (ch == '\n') {
			b[o++] = '\\';
			b[o++] = 'n';
		} else if (ch < 0x20 || ch >= 0x7f) {
			o += (size_t)snprintf(b + o, 5, "\\x%02x", ch);
		} else
			b[o++] = (char)ch;
	}
	if (i < len)
		o += (size_t)snprintf(b + o, 40, "...(%zu bytes in all)", len);
	b[o] = '\0';
	return b;
}

/* Setup */

/* A number from the environment: digits only, no sign or spaces, within
 * [min, max]; anything else ends the run with a message naming what. */
static int64_t
kt_parse_setting(const char *what, const char *s, int64_t min, int64_t max)
{
	char		*end;
	long long	 v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (!isdigit((unsigned char)s[0]) || *end != '\0' || errno != 0 ||
	    v < min || v > max) {
		fprintf(stderr, "%s: %s: \"%s\" is not a whole number from "
		    "%lld to %lld\n", kt_prog, what, s, (long long)min,
		    (long long)max);
		exit(1);
	}
	return v;
}

int64_t
kt_env_int(const char *name, int64_t def, int64_t min, int64_t max)
{
	const char	*e = getenv(name);

	return e == NULL || *e == '\0' ? def : kt_parse_setting(name, e, min,
	    max);
}

/* Removes every KEYLOCK_* variable (KEYLOCK_SERVER, KEYLOCK_AUTH_FILE,
 * KEYLOCK_TLS_*, ...): a test's clients and daemons see only what the
 * test sets. KEYLOCKD* (the harness's own settings) stay. */
static void
kt_clear_client_env(void)
{
	char		name[256];
	size_t		i = 0;

	while (environ[i] != NULL) {
		const char *eq = strchr(environ[i], '=');
		size_t	    n = eq != NULL ? (size_t)(eq - environ[i]) : 0;

		if (strncmp(environ[i], "KEYLOCK_", 8) != 0 || n == 0 ||
		    n >= sizeof(name)) {
			i++;
			continue;
		}
		memcpy(name, environ[i], n);
		name[n] = '\0';
		unsetenv(name);		/* environ[i] is the next one now */
	}
}

/* KEYLOCKD_TEST_ADDR=host:port (and KEYLOCKD_TEST_UNIX): a running daemon
 * that every test shares. */
static void
kt_init_external(const char *prog, const char *addr)
{
	const char *colon = strrchr(addr, ':');
	const char *un = getenv("KEYLOCKD_TEST_UNIX");

	if (colon == NULL || colon == addr || colon[1] == '\0' ||
	    (size_t)(colon - addr) >= sizeof(kt_extd.host)) {
		fprintf(stderr, "%s: KEYLOCKD_TEST_ADDR=%s: want "
		    "host:port\n", prog, addr);
		exit(1);
	}
	kt_ext = true;
	if (addr[0] == '[' && colon[-1] == ']')	/* [::1]:7711 */
		memcpy(kt_extd.host, addr + 1, (size_t)(colon - addr) - 2);
	else
		memcpy(kt_extd.host, addr, (size_t)(colon - addr));
	kt_extd.port = (int)kt_parse_setting("KEYLOCKD_TEST_ADDR port",
	    colon + 1, 1, 65535);
	snprintf(kt_extd.addr, sizeof(kt_extd.addr), "%s", addr);
	kt_extd.external = true;
	kt_extd.running = true;
	if (un != NULL && *un != '\0' && strlen(un) < sizeof(kt_extd.sock)) {
		strcpy(kt_extd.sock, un);
		kt_extd.has_unix = true;
	}
	fprintf(stderr, "%s: using the running daemon at %s; tests "
	    "that need a private daemon are not run\n", prog, addr);
}

/* Private daemons: the binary from KEYLOCKD (or the build tree) and the
 * run's directory. */
static void
kt_init_private(const char *prog)
{
	const char	*bin = getenv("KEYLOCKD"), *tb = getenv("top_builddir");

	if (bin != NULL && *bin != '\0')
		snprintf(kt_bin, sizeof(kt_bin), "%s", bin);
	else if (tb != NULL && *tb != '\0')
		snprintf(kt_bin, sizeof(kt_bin), "%s/src/keylockd", tb);
	else {
		fprintf(stderr, "%s: SKIP: KEYLOCKD is not set (the "
		    "path of the keylockd binary; make check sets "
		    "it)\n", prog);
		exit(77);
	}
	if (access(kt_bin, X_OK) != 0) {
		fprintf(stderr, "%s: KEYLOCKD=%s: %s\n", prog, kt_bin,
		    strerror(errno));
		exit(1);
	}
	strcpy(kt_rundir, "/tmp/kltest.XXXXXX");
	if (mkdtemp(kt_rundir) == NULL) {
		fprintf(stderr, "%s: mkdtemp: %s\n", prog, strerror(errno));
		exit(1);
	}
	kt_rundir_owner = getpid();
}

/* KEYLOCKD_WRAPPER and KEYLOCKD_TEST_SLOW: the timing factors. */
static void
kt_init_timing(void)
{
	const char	*wrap = getenv("KEYLOCKD_WRAPPER");
	const char	*slow = getenv("KEYLOCKD_TEST_SLOW");

	if (wrap != NULL && *wrap != '\0') {
		char *w = strdup(wrap), *save = NULL, *tok;

		for (tok = strtok_r(w, " \t", &save); tok != NULL &&
		    kt_nwrap < KT_MAX_WRAP; tok = strtok_r(NULL, " \t", &save))
			kt_wrap[kt_nwrap++] = tok;
		if (kt_nwrap > 0) {
			kt_startf = 20;
			kt_slowf = 5;
		}
	}
	if (slow != NULL && *slow != '\0')
		kt_slowf = (unsigned)kt_parse_setting("KEYLOCKD_TEST_SLOW",
		    slow, 1, KT_MAX_SLOW);
}

void
kt_init(const char *prog)
{
	struct rlimit	 rl;
	const char	*addr;

	kt_prog = prog;
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stderr, NULL, _IONBF, 0);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	kt_clear_client_env();
	kt_keep = getenv("KEYLOCKD_KEEP_TMP") != NULL;
	addr = getenv("KEYLOCKD_TEST_ADDR");
	if (addr != NULL && *addr != '\0')
		kt_init_external(prog, addr);
	else
		kt_init_private(prog);
	kt_init_timing();
	atexit(kt_atexit);
}

bool
kt_external(void)
{
	return kt_ext;
}

bool
kt_have_unix(void)
{
	return !kt_ext || kt_extd.has_unix;
}

TCase *
kt_tcase(Suite *s, const char *name, int needs, double secs,
    void (*setup)(void))
{
	TCase	*tc;

	if (needs == KT_PRIVATE && kt_ext) {
		fprintf(stderr, "%s: not run against KEYLOCKD_TEST_ADDR: "
		    "tcase %s (needs a private daemon)\n", kt_prog, name);
		return NULL;
	}
	tc = tcase_create(name);
	tcase_add_checked_fixture(tc, setup != NULL ? setup : kt_setup,
	    kt_teardown);
	tcase_set_timeout(tc, secs * kt_slowf + (kt_startf - 1) * 10);
	suite_add_tcase(s, tc);
	return tc;
}

/* Failures */

void
kt_fail_at(const char *file, int line, const char *fmt, ...)
{
	char	msg[6000];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s:%d: FAIL: %s\n", file, line, msg);
	if (kt_d != NULL && !kt_d->external) {
		kt_print_log_tail(kt_d, 30);
		if (!kt_keep)
			fprintf(stderr, "(KEYLOCKD_KEEP_TMP=1 keeps the whole "
			    "log)\n");
	}
	_ck_assert_failed(file, line, "Failed", "%s", msg);
	abort();	/* not reached; _ck_assert_failed longjmps or exits */
}

/* Temporary directories */

static int
kt_rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

void
kt_rmtree(const char *dir)
{
	if (dir[0] != '\0' && !kt_keep)
		nftw(dir, kt_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

const char *
kt_tmpdir(void)
{
	for (int i = 0; i < KT_MAX_TMPDIRS; i++) {
		if (kt_tmpdirs[i][0] != '\0')
			continue;
		snprintf(kt_tmpdirs[i], sizeof(kt_tmpdirs[i]),
		    "%s/state.XXXXXX", kt_rundir);
		if (mkdtemp(kt_tmpdirs[i]) == NULL) {
			kt_tmpdirs[i][0] = '\0';
			return NULL;
		}
		kt_tmpdir_owner[i] = getpid();
		return kt_tmpdirs[i];
	}
	return NULL;
}

const char *
kt_secret_file(const char *dir, const char *name, const char *secret,
    char *buf, size_t len)
{
	FILE	*f;

	ck_assert_int_lt(snprintf(buf, len, "%s/%s", dir, name), (int)len);
	ck_assert_ptr_nonnull(f = fopen(buf, "w"));
	fprintf(f, "%s\n", secret);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(buf, 0600), 0);
	return buf;
}

/* Removes the test directories this process made (kt_tmpdir). */
static void
kt_tmpdirs_remove(void)
{
	for (int i = 0; i < KT_MAX_TMPDIRS; i++)
		if (kt_tmpdirs[i][0] != '\0' &&
		    kt_tmpdir_owner[i] == getpid()) {
			kt_rmtree(kt_tmpdirs[i]);
			kt_tmpdirs[i][0] = '\0';
		}
}

static void
kt_atexit(void)
{
	kt_daemons_kill();
	kt_tmpdirs_remove();
	if (kt_rundir[0] != '\0' && kt_rundir_owner == getpid()) {
		if (kt_keep)
			fprintf(stderr, "%s: kept %s\n", kt_prog, kt_rundir);
		kt_rmtree(kt_rundir);
	}
}

static void
kt_external_ready(void)
{
	struct kt_conn	*c;
	uint64_t	 deadline = kt_now_ms() + 3000;
	char		 why[128];

	/* A shared daemon: wait until earlier tests' connections are gone. */
	c = kt_connect_at(__FILE__, __LINE__, &kt_extd, KT_TCP);
	for (;;) {
		json_t *o;

		if (kt_conn_sendf(c, "STATS") != 0 ||
		    kt_conn_readline(c, kt_ms(KT_REPLY_MS)) != KT_LINE)
			kt_fail("no reply to STATS from %s:%d", kt_extd.host,
			    kt_extd.port);
		o = kt_parse_ok_json(c->line, c->linelen, why, sizeof(why));
		if (o != NULL && json_integer_value(json_object_get(o,
		    "keys")) == 0) {
			json_decref(o);
			break;
		}
		json_decref(o);
		if (kt_now_ms() > deadline)
			break;
		kt_sleep_ms(10);
	}
	kt_conn_close(c);
}

void
kt_setup(void)
{
	if (kt_ext) {
		kt_d = &kt_extd;
		kt_external_ready();
	} else
		kt_start_default();
}

void
kt_setup_none(void)
{
	kt_d = kt_ext ? &kt_extd : NULL;
}

void
kt_teardown(void)
{
	kt_conns_close();
	kt_daemons_stop();
	kt_tmpdirs_remove();
	kt_d = NULL;
}
