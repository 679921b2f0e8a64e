/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The harness of every C test that talks to a real keylockd (integration,
 * hostile, soak, libkeylock): starts a private keylockd from the build tree
 * in a mkdtemp directory (or aims at KEYLOCKD_TEST_ADDR), connects to it
 * over TCP or the unix socket, and reads replies with deadlines. It never
 * sleeps to synchronise: readiness is "the port file exists and connect
 * succeeds", and conditions on the server are polled with a deadline.
 *
 * Hermetic: every daemon gets --config /dev/null ahead of the test's own
 * arguments (a test's --config comes later and wins), so the operator's
 * keylockd.conf never reaches it, and kt_init() removes every KEYLOCK_*
 * variable from the environment, so neither a daemon nor a client in the
 * test sees the caller's.
 *
 * Two layers. kt_conn_*() never assert and are safe in worker threads (one
 * connection per thread). The kt_*() macros below assert through Check and
 * name the caller's file and line; use them from the test's main thread.
 */
#ifndef KLTEST_H
#define KLTEST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>
#include <jansson.h>

/* Deadlines in ms before scaling (kt_ms(); startup and stop by 20 under
 * KEYLOCKD_WRAPPER). */
#define KT_REPLY_MS	3000	/* one reply */
#define KT_START_MS	5000	/* readiness of a started daemon */
#define KT_STOP_MS	5000	/* SIGTERM to exit */
#define KT_MAX_EXTRA	32	/* extra daemon arguments */

enum kt_transport {
	KT_TCP = 0,
	KT_UNIX
};

/* kt_conn_readline() results */
enum kt_read {
	KT_LINE = 1,
	KT_TIMEOUT = 0,
	KT_EOF = -1,		/* orderly close or reset by the peer */
	KT_ERROR = -2
};

struct kt_daemon {
	pid_t		 pid;
	pid_t		 owner;		/* who forked it */
	bool		 running;
	bool		 external;	/* KEYLOCKD_TEST_ADDR */
	bool		 has_unix;
	int		 status;	/* wait status once reaped */
	int		 port;
	int		 tls_port;	/* --tls-port's; 0: none */
	char		 host[256];
	char		 addr[264];	/* "host:port", for clients */
	char		 dir[128];	/* port file, socket, log */
	char		 portfile[192];
	char		 sock[192];
	char		 log[192];
	char		 statedir[192];
	char		*extra[KT_MAX_EXTRA + 1];
};

struct kt_conn {
	int		 fd;
	enum kt_transport transport;
	bool		 eof;
	int		 err;		/* errno of a failed read */
	char		*buf;		/* unread: buf[off..len) */
	size_t		 off, len, cap;
	char		*line;		/* last line, NUL added */
	size_t		 linelen;	/* without LF; may hold NULs */
	size_t		 linecap;
	char		 label[32];
	char		 lastsent[200];	/* escaped, for messages */
	struct kt_conn	*next;		/* closed at teardown */
};

/* Before the suites (check_program.init, tests/lib/check_main.h):
 * environment (KEYLOCK_* removed), fd limit, SIGPIPE; exits 77 if
 * KEYLOCKD is unset. */
void		 kt_init(const char *prog);
/* A whole number from the environment variable name, def when it is unset
 * or empty; anything but digits within [min, max] ends the run. */
int64_t		 kt_env_int(const char *name, int64_t def, int64_t min,
		    int64_t max);
bool		 kt_external(void);
/* Whether a test can reach a unix socket (private daemon, or
 * KEYLOCKD_TEST_UNIX with KEYLOCKD_TEST_ADDR). */
bool		 kt_have_unix(void);
/* Timing factor: 1, or more under KEYLOCKD_WRAPPER / KEYLOCKD_TEST_SLOW. */
unsigned	 kt_slow(void);
/* A deadline or an upper timing bound of ms, scaled by kt_slow(). */
int64_t		 kt_ms(int64_t ms);
/* A bound on CPU-bound work in the daemon: valgrind slows that ~20 times,
 * timers much less. */
int64_t		 kt_cpu_ms(int64_t ms);
/* Upper bound of a window: nominal + (upper - nominal) * kt_slow(). */
int64_t		 kt_upper(int64_t nominal, int64_t upper);
/* CLOCK_MONOTONIC, the same clock in every process. */
uint64_t	 kt_now_ns(void);
uint64_t	 kt_now_us(void);
uint64_t	 kt_now_ms(void);
void		 kt_sleep_us(uint64_t us);
void		 kt_sleep_ms(uint64_t ms);
/* Escapes bytes for messages (thread-local rotating buffers). */
const char	*kt_esc(const void *p, size_t len);

/* The daemon of the current test (set by kt_setup or kt_start). */
extern struct kt_daemon *kt_d;

/* Check fixtures: kt_setup starts a default daemon (or aims at the external
 * one); kt_setup_none starts nothing. kt_teardown closes every connection,
 * stops every daemon this process started, and asserts each exited 0. */
void		 kt_setup(void);
void		 kt_setup_none(void);
void		 kt_teardown(void);

/* Suite building: a TCase that needs a private daemon is not added when
 * running against KEYLOCKD_TEST_ADDR (a note goes to stderr). */
#define KT_ANY		0
#define KT_PRIVATE	1
TCase		*kt_tcase(Suite *s, const char *name, int needs,
		    double secs, void (*setup)(void));

/* Non-asserting layer (worker threads). */
struct kt_conn	*kt_conn_open(const struct kt_daemon *d,
		    enum kt_transport t, int64_t timeout_ms);
void		 kt_conn_close(struct kt_conn *c);
/* Writes all of buf within timeout_ms, reading (and keeping) input while
 * the socket is not writable. 0, or -1 with errno. */
int		 kt_conn_send(struct kt_conn *c, const void *buf, size_t len,
		    int64_t timeout_ms);
/* kt_conn_send on a bare socket, never reading. */
int		 kt_fd_write_all(int fd, const void *buf, size_t len,
		    int64_t timeout_ms);
/* Formats one request and appends LF. */
int		 kt_conn_sendf(struct kt_conn *c, const char *fmt, ...)
		    __attribute__((format(printf, 2, 3)));
/* One non-blocking write(); never reads. */
ssize_t		 kt_conn_write_some(struct kt_conn *c, const void *buf,
		    size_t len);
/* Reads one line into c->line (LF removed, nothing else). */
enum kt_read	 kt_conn_readline(struct kt_conn *c, int64_t timeout_ms);
/* Whether c->line is "OK <decimal token below 2^63>"; sets *token. */
bool		 kt_line_token(const struct kt_conn *c, uint64_t *token);
bool		 kt_line_is(const struct kt_conn *c, const char *s);
bool		 kt_line_has_prefix(const struct kt_conn *c, const char *p);
/* Whether line is "ERR CODE text" with a non-empty text. */
bool		 kt_line_is_err(const struct kt_conn *c, const char *code);
/* Parses "OK {json}" into an object, or NULL with why filled. */
json_t		*kt_parse_ok_json(const char *line, size_t len, char *why,
		    size_t whylen);

/* The daemon: start (extra arguments NULL-terminated; statedir NULL for
 * the instance's own directory), signal, wait, stop. */
struct kt_daemon *kt_daemon_start_at(const char *file, int line,
		    const char *statedir, const char *const *extra);
/* As kt_daemon_start_at, but returns at once: not yet ready, or never. */
struct kt_daemon *kt_daemon_launch_at(const char *file, int line,
		    const char *statedir, const char *const *extra);
/* Forgets a daemon that has exited (kt_daemon_wait) and removes its
 * directory; teardown does this for the rest. */
void		 kt_daemon_free(struct kt_daemon *d);
void		 kt_daemon_signal(struct kt_daemon *d, int sig);
/* Waits for the daemon to exit (deadline) and returns its wait status;
 * asserts exit status 0 if check_zero. */
int		 kt_daemon_wait_at(const char *file, int line,
		    struct kt_daemon *d, bool check_zero);
int		 kt_daemon_stop_at(const char *file, int line,
		    struct kt_daemon *d, bool check_zero);
/* A directory removed at teardown. */
const char	*kt_tmpdir(void);
/* A secret file dir/name holding secret and a line end, mode 0600 (the
 * daemon refuses a secret file group or others may read); its path in
 * buf. */
const char	*kt_secret_file(const char *dir, const char *name,
		    const char *secret, char *buf, size_t len);

/* Asserting layer: the test's main thread only. */
void		 kt_fail_at(const char *file, int line, const char *fmt,
		    ...) __attribute__((format(printf, 3, 4), noreturn));
struct kt_conn	*kt_connect_at(const char *file, int line,
		    const struct kt_daemon *d, enum kt_transport t);
void		 kt_send_at(const char *file, int line, struct kt_conn *c,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void		 kt_send_raw_at(const char *file, int line,
		    struct kt_conn *c, const void *buf, size_t len);
const char	*kt_recv_at(const char *file, int line, struct kt_conn *c,
		    int64_t timeout_ms);
void		 kt_expect_line_at(const char *file, int line,
		    struct kt_conn *c, const char *expect);
const char	*kt_expect_prefix_at(const char *file, int line,
		    struct kt_conn *c, const char *prefix);
const char	*kt_expect_err_at(const char *file, int line,
		    struct kt_conn *c, const char *code);
uint64_t	 kt_expect_token_at(const char *file, int line,
		    struct kt_conn *c);
void		 kt_expect_silence_at(const char *file, int line,
		    struct kt_conn *c, int64_t ms);
void		 kt_expect_eof_at(const char *file, int line,
		    struct kt_conn *c, int64_t ms);
json_t		*kt_expect_json_at(const char *file, int line,
		    struct kt_conn *c);
json_int_t	 kt_jint_at(const char *file, int line, const json_t *o,
		    const char *member);
json_t		*kt_stats_at(const char *file, int line,
		    struct kt_conn *c);
json_int_t	 kt_stat_at(const char *file, int line, struct kt_conn *c,
		    const char *member);
/* Polls STATS until member is value, for ms (scaled by kt_ms()). */
void		 kt_wait_stat_at(const char *file, int line,
		    struct kt_conn *c, const char *member, json_int_t value,
		    int64_t ms);
json_t		*kt_info_at(const char *file, int line, struct kt_conn *c,
		    const char *key);
json_t		*kt_wait_queue_at(const char *file, int line,
		    struct kt_conn *c, const char *key, size_t nholders,
		    size_t nwaiters);

#define KT_AT	__FILE__, __LINE__

#define KT_ARGS(...)	((const char *const []){ __VA_ARGS__, NULL })
/* kt_start("--max-keys", "4") starts another daemon and makes it kt_d. */
#define kt_start(...)	(kt_d = kt_daemon_start_at(KT_AT, NULL, \
			    KT_ARGS(__VA_ARGS__)))
#define kt_start_default()	(kt_d = kt_daemon_start_at(KT_AT, NULL, NULL))
#define kt_daemon_wait(d)	kt_daemon_wait_at(KT_AT, (d), true)
#define kt_daemon_stop(d)	kt_daemon_stop_at(KT_AT, (d), true)

#define kt_fail(...)		kt_fail_at(KT_AT, __VA_ARGS__)
#define kt_connect()		kt_connect_at(KT_AT, kt_d, KT_TCP)
#define kt_connect_unix()	kt_connect_at(KT_AT, kt_d, KT_UNIX)
#define kt_send(c, ...)		kt_send_at(KT_AT, (c), __VA_ARGS__)
#define kt_send_raw(c, b, n)	kt_send_raw_at(KT_AT, (c), (b), (n))
#define kt_connect_to(d, t)	kt_connect_at(KT_AT, (d), (t))
#define kt_recv(c)		kt_recv_at(KT_AT, (c), kt_ms(KT_REPLY_MS))
#define kt_recv_within(c, ms)	kt_recv_at(KT_AT, (c), (ms))
#define kt_expect_line(c, s)	kt_expect_line_at(KT_AT, (c), (s))
#define kt_expect_prefix(c, p)	kt_expect_prefix_at(KT_AT, (c), (p))
#define kt_expect_err(c, code)	kt_expect_err_at(KT_AT, (c), (code))
#define kt_expect_token(c)	kt_expect_token_at(KT_AT, (c))
#define kt_expect_silence(c, ms) kt_expect_silence_at(KT_AT, (c), (ms))
#define kt_expect_eof(c, ms)	kt_expect_eof_at(KT_AT, (c), (ms))
#define kt_expect_json(c)	kt_expect_json_at(KT_AT, (c))
#define kt_jint(o, m)		kt_jint_at(KT_AT, (o), (m))
#define kt_stats(c)		kt_stats_at(KT_AT, (c))
#define kt_stat(c, m)		kt_stat_at(KT_AT, (c), (m))
#define kt_wait_stat(c, m, v)	kt_wait_stat_at(KT_AT, (c), (m), (v), 5000)
#define kt_wait_stat_ms(c, m, v, ms) \
				kt_wait_stat_at(KT_AT, (c), (m), (v), (ms))
#define kt_info(c, k)		kt_info_at(KT_AT, (c), (k))
/* Polls INFO until the key has h holders and w waiters; returns it. */
#define kt_wait_queue(c, k, h, w) kt_wait_queue_at(KT_AT, (c), (k), (h), (w))

/* Sends a request and expects "OK <token>"; yields the token. */
#define kt_lock(c, ...)		(kt_send_at(KT_AT, (c), __VA_ARGS__), \
				    kt_expect_token_at(KT_AT, (c)))
/* Sends a request and expects exactly the line want. */
#define kt_req(c, want, ...)	(kt_send_at(KT_AT, (c), __VA_ARGS__), \
				    kt_expect_line_at(KT_AT, (c), (want)))
/* Sends a request and expects "ERR CODE text"; yields the line. */
#define kt_req_err(c, code, ...) (kt_send_at(KT_AT, (c), __VA_ARGS__), \
				    kt_expect_err_at(KT_AT, (c), (code)))

#endif /* KLTEST_H */
