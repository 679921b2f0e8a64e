/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Helpers for the hostile-client tests and the chaos soak: what the kernel
 * says about the daemon (/proc: RSS, peak RSS, CPU time, open files), raw
 * sockets a hostile client needs (no buffers of its own, a small receive
 * window, RST on close), and a probe: a normal client in its own thread
 * that times PING / LOCK / UNLOCK round trips while a test misbehaves, so
 * every test can show that the others were unaffected.
 */
#ifndef HOSTILE_UTIL_H
#define HOSTILE_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <pthread.h>

#include "kltest.h"

struct keylock;

/* /proc/PID/status VmRSS, VmHWM and VmSize in KiB; -1 if unreadable. */
long		 hu_rss_kib(pid_t pid);
long		 hu_hwm_kib(pid_t pid);
long		 hu_vmsize_kib(pid_t pid);
/* utime + stime of /proc/PID/stat in ms; -1 if unreadable. */
long		 hu_cpu_ms(pid_t pid);
/* Entries of /proc/PID/fd; -1 if unreadable. */
int		 hu_nfds(pid_t pid);
/* Whether the daemon runs under a tool that keeps freed memory (ASan's
 * quarantine, valgrind's freed-block queue): RSS figures are then loose. */
enum hu_mem {
	HU_MEM_PLAIN = 0,
	HU_MEM_ASAN,
	HU_MEM_VALGRIND
};
enum hu_mem	 hu_memory_kind(pid_t pid);
bool		 hu_memory_is_instrumented(pid_t pid);

/* A non-blocking socket connected (or connecting, for TCP) to d; rcvbuf
 * > 0 sets SO_RCVBUF before connect. -1 with errno. */
int		 hu_socket(const struct kt_daemon *d, enum kt_transport t,
		    int rcvbuf);
/* Waits until a TCP connect completes; false on error or timeout. */
bool		 hu_connected(int fd, int64_t timeout_ms);
/* Closes with an RST instead of a FIN (SO_LINGER 0). */
void		 hu_close_rst(int fd);

/* The probe: round trips of a normal client, in microseconds. */
struct hu_probe;

/* The probe's connection: one request (no LF) and its reply line (no LF,
 * valid until the next), or why not (p->why may say more); and its
 * close. */
struct hu_probe_io {
	enum kt_read	 (*rt)(struct hu_probe *p, const char *req,
			    const char **line, size_t *len);
	void		 (*close)(struct hu_probe *p);
};

struct hu_probe {
	pthread_t	 thread;
	const struct hu_probe_io *io;
	struct kt_conn	*c;		/* plain */
	struct keylock	*kl;		/* TLS (hostile_tls.c) */
	char		 why[256];
	atomic_size_t	 done;		/* round trips */
	char		 key[64];
	atomic_bool	 stop;
	uint32_t	*lat_us;
	size_t		 n, cap;
	uint64_t	 max_ops;	/* 0: until hu_probe_stop */
	int64_t		 reply_ms;	/* later is a failure */
	char		 err[512];
	bool		 running;
};

struct hu_lat {
	size_t		 n;
	double		 p50_ms, p99_ms, max_ms;
};

/* Connects now (asserting) and starts timing in a thread; a reply that
 * takes over reply_ms is an error. */
void		 hu_probe_start_at(const char *file, int line,
		    struct hu_probe *p, const struct kt_daemon *d,
		    const char *key, int64_t reply_ms);
/* Stops the thread once it has min_ops replies (or after 10 s); prints
 * "what: probe ..." and asserts that it saw no error, got min_ops replies,
 * and p99 stayed under p99_ms. */
struct hu_lat	 hu_probe_stop_at(const char *file, int line,
		    struct hu_probe *p, const char *what, size_t min_ops,
		    double p99_ms);
/* The same over TLS to d's --tls-port (hostile_tls.c, in hostile_test
 * only: libkeylock is the client), trusting tests/certs/ca.pem. */
void		 hu_probe_start_tls_at(const char *file, int line,
		    struct hu_probe *p, const struct kt_daemon *d,
		    const char *key, int64_t reply_ms);
/* tests/certs/name, under $top_srcdir (make check's), into buf. */
const char	*hu_test_cert(char *buf, size_t len, const char *name);
/* Round trips so far, while it runs. */
size_t		 hu_probe_done(struct hu_probe *p);
/* For a start function of another connection: p cleared, then the
 * thread started once p->io and its connection are set. */
void		 hu_probe_init(struct hu_probe *p, const char *key,
		    int64_t reply_ms);
void		 hu_probe_launch_at(const char *file, int line,
		    struct hu_probe *p);
#define hu_probe_start(p, key) \
	hu_probe_start_at(KT_AT, (p), kt_d, (key), kt_ms(KT_REPLY_MS))
#define hu_probe_start_tls(p, key) \
	hu_probe_start_tls_at(KT_AT, (p), kt_d, (key), kt_ms(KT_REPLY_MS))
#define hu_probe_stop(p, what, n, ms) \
	hu_probe_stop_at(KT_AT, (p), (what), (n), (ms))
/* Percentiles of n samples in microseconds (sorts them). */
struct hu_lat	 hu_lat_of(uint32_t *us, size_t n);

#endif /* HOSTILE_UTIL_H */
