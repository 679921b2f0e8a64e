/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Helpers shared by the protocol_*_test programs, which test the wire
 * protocol against the real daemon one theme per program: commands,
 * framing, errors and limits, waits, server-wide state. They assert
 * through Check; call them from a test's main thread.
 */
#ifndef PROTOCOL_UTIL_H
#define PROTOCOL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "kltest.h"

/* unit repeated n times, NUL-terminated; the caller frees it. */
char		*pu_repeat(const char *unit, size_t n);
/* Element i of the array member of o; asserts that there is one. */
json_t		*pu_jarr_at(json_t *o, const char *member, size_t i);
/* The client id of whoever holds key first, from INFO on connection o. */
json_int_t	 pu_holder_id(struct kt_conn *o, const char *key);
/* Asserts that line names key, the blocking client's id and, unless NULL,
 * its name. */
void		 pu_check_blocker_text(const char *line, const char *key,
		    json_int_t id, const char *name);
int64_t		 pu_elapsed_since(uint64_t t0);
/* Lets time pass (the scenario, not synchronisation) until t0 + ms. */
void		 pu_sleep_until(uint64_t t0, int64_t ms);

/* The integer members of STATS, NULL-terminated. */
extern const char *const pu_stats_ints[];
/* Asserts the shape of a STATS reply: every member with its type, both
 * histograms, hot_keys ordered by waiters. */
void		 pu_check_stats_shape(json_t *s);

#endif /* PROTOCOL_UTIL_H */
