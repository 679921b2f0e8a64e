/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the harness's own files share (kltest.c: settings, time, fixtures;
 * kltest_daemon.c; kltest_conn.c; kltest_expect.c). Tests include kltest.h
 * only. The settings are written once by kt_init() and only read after.
 */
#ifndef KLTEST_IMPL_H
#define KLTEST_IMPL_H

#include <limits.h>
#include <stdbool.h>

#include "kltest.h"

#define KT_MAX_WRAP	32

/* kltest.c: the run's settings (kt_init) and its directories */
extern char	 kt_bin[PATH_MAX];
extern char	*kt_wrap[KT_MAX_WRAP + 1];
extern int	 kt_nwrap;
extern unsigned	 kt_startf;
extern char	 kt_rundir[64];
/* Removes dir and what is in it, unless KEYLOCKD_KEEP_TMP is set. */
void		 kt_rmtree(const char *dir);

/* kltest_daemon.c */
void		 kt_print_log_tail(const struct kt_daemon *d, int nlines);
/* Teardown: SIGTERM every daemon this process started, assert exit 0,
 * forget them. */
void		 kt_daemons_stop(void);
/* At exit: SIGTERM, then SIGKILL after the deadline; forget them. */
void		 kt_daemons_kill(void);

/* kltest_conn.c: closes every connection still open. */
void		 kt_conns_close(void);

#endif /* KLTEST_IMPL_H */
