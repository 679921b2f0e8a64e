/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The backend layer's choice: which backend the configuration names. The
 * daemon asks here and nowhere else; each backend knows only itself.
 */
#include <string.h>

#include "backend.h"
#include "backend_etcd.h"
#include "config.h"

struct backend *
backend_new(const struct config *cfg, struct event_base *base,
    const struct be_hooks *hooks, char *err, size_t errlen)
{
	if (strcmp(cfg->backend, "etcd") == 0)
		return backend_etcd_new(cfg, base, hooks, err, errlen);
	return backend_local_new(cfg, base, hooks, err, errlen);
}

int
backend_check(const struct config *cfg, char *err, size_t errlen)
{
	if (strcmp(cfg->backend, "etcd") == 0)
		return backend_etcd_check(cfg, err, errlen);
	return 0;
}
