/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Helpers shared by the concurrency tests (concurrency_*.c, one program):
 * workers, one thread per connection, started together at a barrier; the
 * first error any worker records, for the main thread to assert. Workers
 * never call Check. Also one function per theme that adds its TCase to the
 * suite, in the order main() runs them.
 */
#ifndef CONCURRENCY_UTIL_H
#define CONCURRENCY_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <check.h>
#include <pthread.h>

#include "kltest.h"

/* The first worker error and how many there were, since cu_reset_errors. */
extern char		 cu_first_err[1024];
extern atomic_int	 cu_nerrs;
/* The barrier cu_start_workers sets up and the workers wait at. */
extern pthread_barrier_t cu_start_line;

/* Records an error from a worker thread; only the first text is kept. */
void		 cu_worker_error(const char *fmt, ...)
		    __attribute__((format(printf, 1, 2)));
void		 cu_reset_errors(void);
#define assert_no_worker_errors()					\
	ck_assert_msg(atomic_load(&cu_nerrs) == 0,			\
	    "%d worker errors; first: %s", atomic_load(&cu_nerrs),	\
	    cu_first_err)

/* One request, one reply line, from a worker: false (error recorded) if
 * the send fails or no line comes within timeout_ms. */
bool		 cu_w_request(struct kt_conn *c, int64_t timeout_ms,
		    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Opens n connections and waits until the server counts them all (plus
 * already open); the caller frees the array. */
struct kt_conn	**cu_open_many(struct kt_conn *o, int n, int already);
/* Creates n threads running fn(args + i * argsize), held at the barrier
 * until cu_go_and_join releases them and joins them all. */
void		 cu_start_workers(pthread_t *th, int n, void *(*fn)(void *),
		    void *args, size_t argsize);
void		 cu_go_and_join(pthread_t *th, int n);

/* Mutual exclusion (concurrency_exclusion.c) */
void		 cu_add_exclusion(Suite *s);
/* Timeouts, BUSY, killed holders, churn (concurrency_waiting.c) */
void		 cu_add_waiting(Suite *s);
/* FIFO, readers and writers, deadlock races (concurrency_order.c) */
void		 cu_add_order(Suite *s);

#endif /* CONCURRENCY_UTIL_H */
