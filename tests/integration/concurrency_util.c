/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The workers of the concurrency tests: connections opened in bulk, one
 * thread each started together at a barrier, and the first error any of
 * them records, which the main thread then asserts (workers never call
 * Check).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/wait.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "concurrency_util.h"
#include "kltest.h"

#define WORKER_STACK	(256 * 1024)

/* Shared by the workers of one test */

static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
char		 cu_first_err[1024];
atomic_int	 cu_nerrs;
pthread_barrier_t cu_start_line;

void
cu_worker_error(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&err_lock);
	if (atomic_fetch_add(&cu_nerrs, 1) == 0) {
		va_start(ap, fmt);
		vsnprintf(cu_first_err, sizeof(cu_first_err), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&err_lock);
}

void
cu_reset_errors(void)
{
	atomic_store(&cu_nerrs, 0);
	cu_first_err[0] = '\0';
}

/* One request, one reply line, from a worker: false (error recorded) if
 * the send fails or no line comes within timeout_ms. */
bool
cu_w_request(struct kt_conn *c, int64_t timeout_ms, const char *fmt, ...)
{
	char		buf[512];
	va_list		ap;
	int		n;
	enum kt_read	r;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	buf[n] = '\n';
	if (kt_conn_send(c, buf, (size_t)n + 1, timeout_ms) != 0) {
		cu_worker_error("sending \"%.*s\": %s", n, buf,
		    strerror(errno));
		return false;
	}
	r = kt_conn_readline(c, timeout_ms);
	if (r != KT_LINE) {
		cu_worker_error("\"%.*s\": %s within %lld ms", n, buf,
		    r == KT_TIMEOUT ? "no reply" : r == KT_EOF ?
		    "connection closed" : "read error", (long long)timeout_ms);
		return false;
	}
	return true;
}

/* Opens n connections first, and waits until the server counts them all
 * (plus extra ones already open). */
struct kt_conn **
cu_open_many(struct kt_conn *o, int n, int already)
{
	struct kt_conn **cs = calloc((size_t)n, sizeof(*cs));

	ck_assert_ptr_nonnull(cs);
	for (int i = 0; i < n; i++)
		cs[i] = kt_connect();
	kt_wait_stat(o, "clients", n + already);
	return cs;
}

void
cu_start_workers(pthread_t *th, int n, void *(*fn)(void *), void *args,
    size_t argsize)
{
	pthread_attr_t	attr;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, WORKER_STACK);
	pthread_barrier_init(&cu_start_line, NULL, (unsigned)n + 1);
	for (int i = 0; i < n; i++) {
		int e = pthread_create(&th[i], &attr, fn, (char *)args +
		    (size_t)i * argsize);

		ck_assert_msg(e == 0, "pthread_create %d: %s", i, strerror(e));
	}
	pthread_attr_destroy(&attr);
}

void
cu_go_and_join(pthread_t *th, int n)
{
	pthread_barrier_wait(&cu_start_line);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&cu_start_line);
}
