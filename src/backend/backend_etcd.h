/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend etcd (backend_etcd.c, keylockd(8) BACKEND ETCD): the lock table
 * replicated by etcd across front ends. What backend_new() and
 * server_check() call; the rest is private (backend_etcd_int.h).
 */
#ifndef BACKEND_ETCD_H
#define BACKEND_ETCD_H

#include <stddef.h>

struct backend;
struct be_hooks;
struct config;
struct event_base;

/* Returns once the table is built from etcd (start-up runs the loop),
 * or NULL with a message in err when etcd cannot be reached in time. */
struct backend	*backend_etcd_new(const struct config *cfg,
		    struct event_base *base, const struct be_hooks *hooks,
		    char *err, size_t errlen);
/* --check-config and start-up: every endpoint answers, with one etcd
 * cluster; -1 with a message in err otherwise. */
int		 backend_etcd_check(const struct config *cfg, char *err,
		    size_t errlen);

#endif /* BACKEND_ETCD_H */
