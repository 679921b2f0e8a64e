/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the tests of the etcd client (src/etcd/etcd.h) share: one private
 * cluster per program (ec.h), started in main before the suites run, and
 * per test (a Check fork each) a fresh event_base, a client on the
 * cluster's endpoints and a key prefix of its own, so tests do not see
 * each other's keys. Results are copied out of the callbacks into struct
 * res and waited for by running the loop with a deadline.
 */
#ifndef ETCD_TEST_H
#define ETCD_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "ec.h"
#include "etcd.h"

#define T_WAIT_MS	10000	/* one result */
#define T_KVS_MAX	16

struct res_kv {
	char	key[256];
	size_t	keylen;
	char	value[256];
	size_t	valuelen;
	int64_t	create_revision, mod_revision, version, lease;
};

struct res {
	bool			done;
	enum etcd_status	status;
	int			grpc_code;
	char			msg[256];
	char			endpoint[128];
	int64_t			revision, count, deleted, lease_id, ttl;
	bool			succeeded, more;
	size_t			nkvs;
	struct res_kv		kvs[T_KVS_MAX];
	uint64_t		at_ms;	/* when the callback ran */
};

#define T_EVENTS_MAX	512

struct wrec {
	size_t		nev;
	struct {
		bool	is_delete;
		char	key[128];
		char	value[128];
		int64_t	mod_revision, create_revision, version;
		size_t	batch;		/* which events() call */
	}		ev[T_EVENTS_MAX];
	size_t		batches;
	int		created, down, compacted;
	int64_t		compact_revision;
	int64_t		created_revision;
	bool		order_broken;	/* a batch went back in revision */
	bool		stop_in_cb;	/* etcd_watch_stop from events() */
	struct etcd	*e;
};

extern struct ec		 t_ec;		/* the program's cluster */
extern struct event_base	*t_base;
extern struct etcd		*t_e;
extern char			 t_prefix[64];	/* "t<pid>/" */
extern size_t			 t_prefixlen;

void		 t_setup(void);		/* base, client, prefix */
void		 t_teardown(void);
struct etcd	*t_client(const char *endpoints, int timeout_ms, int conns,
		    size_t max_queue);
/* The test's key: prefix + name, in a rotating static buffer. */
const char	*t_key(const char *name);
void		 res_cb(void *arg, const struct etcd_result *r);
/* Runs the loop until *flag or ms have gone by; false on the deadline. */
bool		 t_run_until(const bool *flag, int ms);
void		 t_run_for(int ms);
/* Waits for r and asserts it succeeded. */
void		 t_wait_ok(struct res *r, const char *what);
/* put or delete key, synchronously; returns the revision. */
int64_t		 t_put(const char *key, const char *value);
int64_t		 t_del(const char *key);
extern const struct etcd_watch_cbs wrec_cbs;

/* The suites, one per file. */
Suite		*etcd_pure_suite(void);
Suite		*etcd_kv_suite(void);
Suite		*etcd_watch_suite(void);
Suite		*etcd_fault_suite(void);
Suite		*etcd_hostile_suite(void);

#endif /* ETCD_TEST_H */
