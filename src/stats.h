/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The server's own counters and the JSON of STATS and INFO (jansson). The
 * lock table keeps its counters itself; this module adds the server's and
 * turns both into one line. It never touches a socket.
 */
#ifndef STATS_H
#define STATS_H

#include <stddef.h>
#include <stdint.h>

#include "locktable.h"

#define KL_HOT_KEYS	10
#define KL_INFO_LIST_MAX 1000	/* holders and waiters INFO lists */

struct stats {
	uint64_t	start_ms;
	uint64_t	clients;		/* open connections */
	uint64_t	connections;		/* accepted since start */
	uint64_t	rejected_connections;	/* over max-clients */
	uint64_t	requests;
	uint64_t	errors;			/* ERR replies */
	uint64_t	auth_failures;
	uint64_t	output_closes;		/* closed at max-output */
};

/* Names a lock-table owner (its connection's NAME) or NULL. */
typedef const char *(*stats_name_fn)(const struct lt_owner *o);

/* One line of JSON, malloc'd (free with free()), or NULL on no memory. */
char	*stats_to_json(const struct stats *st, const struct locktable *lt,
	    uint64_t now_ms, const char *version);
char	*stats_info_json(const struct locktable *lt, const char *key,
	    size_t keylen, uint64_t now_ms, stats_name_fn name);

#endif /* STATS_H */
