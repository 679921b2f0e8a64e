/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * An etcd v3 client over etcd's JSON gateway (HTTP/1.1, evhttp): unary
 * calls on a small pool of keep-alive connections, one request in flight
 * on each, and one long-lived prefix watch on a connection of its own.
 * Everything is callback-based on the caller's event_base and never
 * blocks; memory is bounded by the queue of calls (max_queue), the size
 * of one reply (max_body) and of one watch line (max_line). Calls fail
 * over across the endpoints: one endpoint is current for every
 * connection, and a failure on it (no connection, a timeout, "no leader")
 * moves the client to the next. A call that waits on a member is checked
 * by a probe of that member's raft status (etcd_probe.c): one that cannot
 * be carried out there (its member lost its leader) is sent to the next
 * member, under the same deadline.
 *
 * The gateway's JSON: keys and values are base64, int64 fields are JSON
 * strings both ways, and proto3 leaves out every field at its default
 * (an absent "succeeded" is false, an event without "type" is a PUT, an
 * absent "count" is 0). This module hides all of that.
 */
#ifndef ETCD_H
#define ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct event_base;
struct etcd;
struct etcd_call;
struct etcd_txn;

#define ETCD_CONNS_DEFAULT	4	/* pool of unary connections */
#define ETCD_CONNS_MAX		64
#define ETCD_TIMEOUT_MS_DEFAULT	3000	/* one call, queueing included */
#define ETCD_MAX_QUEUE_DEFAULT	4096	/* calls waiting for a connection */
#define ETCD_MAX_BODY_DEFAULT	(32 * 1024 * 1024)	/* one reply */
#define ETCD_MAX_LINE_DEFAULT	(32 * 1024 * 1024)	/* one watch reply */
#define ETCD_ENDPOINTS_MAX	16
#define ETCD_WATCH_RETRY_MS	100	/* first pause before re-watching */
#define ETCD_WATCH_RETRY_MAX_MS	1000
#define ETCD_RETRY_PAUSE_MS	100	/* after each round of the endpoints */

/* gRPC status codes etcd answers with (google.golang.org/grpc/codes). */
#define ETCD_GRPC_INVALID_ARGUMENT	3	/* too many ops, duplicate key */
#define ETCD_GRPC_DEADLINE_EXCEEDED	4
#define ETCD_GRPC_NOT_FOUND		5	/* lease not found */
#define ETCD_GRPC_PERMISSION_DENIED	7	/* etcd auth: a role's range */
#define ETCD_GRPC_OUT_OF_RANGE		11	/* revision compacted */
#define ETCD_GRPC_UNAVAILABLE		14	/* no leader, stopping */
#define ETCD_GRPC_UNAUTHENTICATED	16	/* etcd auth: a bad token */

enum etcd_status {
	ETCD_OK = 0,
	ETCD_ERR_TIMEOUT,	/* no answer within the call's timeout */
	ETCD_ERR_CONNECT,	/* no endpoint could be reached */
	ETCD_ERR_GRPC,		/* etcd refused it: grpc_code, message */
	ETCD_ERR_PROTO,		/* not what the gateway sends */
	ETCD_ERR_NOMEM,
	ETCD_ERR_CANCELED	/* etcd_free() ended it */
};

struct etcd_opts {
	int		conns;		/* unary connections, >= 1 */
	int		timeout_ms;	/* per call */
	size_t		max_queue;
	size_t		max_body;
	size_t		max_line;
	/* https:// endpoints: the server's certificate must chain to
	 * ca_file (NULL: the system's CAs) and name the endpoint's host;
	 * cert_file and key_file (PEM, both or neither) are sent to it */
	const char	*ca_file;
	const char	*cert_file;
	const char	*key_file;
	/* etcd's own authentication (NULL: none): every call carries the
	 * token of /v3/auth/authenticate, got again when etcd refuses it
	 * as expired. The password is copied, and wiped when freed. */
	const char	*user;
	const char	*password;
	size_t		 passwordlen;
};

/* One key-value; key and value point into the result and live as long as
 * the callback runs. */
struct etcd_kv {
	const char	*key;
	size_t		 keylen;
	const char	*value;
	size_t		 valuelen;
	int64_t		 create_revision;
	int64_t		 mod_revision;
	int64_t		 version;
	int64_t		 lease;
};

/* What a call's callback gets; valid only during the callback. */
struct etcd_result {
	enum etcd_status	 status;
	int			 grpc_code;	/* ETCD_ERR_GRPC */
	const char		*message;	/* why, for any error */
	const char		*endpoint;	/* that answered, or was tried */
	int			 tries;		/* members it was sent to: past
						 * 1, an abandoned try may still
						 * be carried out, late */
	int64_t			 revision;	/* header.revision */
	int64_t			 raft_term;
	/* range */
	const struct etcd_kv	*kvs;
	size_t			 nkvs;
	int64_t			 count;
	bool			 more;
	/* txn */
	bool			 succeeded;
	/* deleterange */
	int64_t			 deleted;
	/* lease grant, keepalive: ttl 0 after a keepalive means the lease
	 * is gone */
	int64_t			 lease_id;
	int64_t			 ttl;
	/* the whole reply ("result" unwrapped), for what is not above */
	const json_t		*json;
};

typedef void	etcd_cb(void *arg, const struct etcd_result *r);

/* Call flags */
#define ETCD_RETRY	0x01	/* a repeat changes nothing that matters (a
				 * read, a put of the same value, a delete):
				 * on a connection failure, "unavailable", or
				 * a member that cannot carry it out (it has
				 * no leader, a new one since it took the
				 * call, or does not answer a probe), try the
				 * next endpoint, until the deadline */

/*
 * endpoints: URLs separated by commas, "http://host:port" or
 * "https://host:port" (the scheme may be left out: http). NULL with errno
 * EINVAL (and *why) for a bad list or TLS files that cannot be used;
 * *why is valid until the next etcd_new(). opts may be NULL for the
 * defaults.
 */
struct etcd	*etcd_new(struct event_base *base, const char *endpoints,
		    const struct etcd_opts *opts, const char **why);
/* Ends every call (callbacks with ETCD_ERR_CANCELED) and the watch (no
 * callback), then frees. NULL does nothing. */
void		 etcd_free(struct etcd *e);
size_t		 etcd_nendpoints(const struct etcd *e);
const char	*etcd_endpoint(const struct etcd *e, size_t i);
/* The endpoint calls go to now. */
const char	*etcd_current_endpoint(const struct etcd *e);
/* Calls queued or in flight. */
size_t		 etcd_pending(const struct etcd *e);

/*
 * Unary calls. Each returns a handle, or NULL with errno (ENOBUFS: the
 * queue is full; ENOMEM) and then never calls cb. cb runs exactly once,
 * never from inside the call that made it, unless etcd_cancel() comes
 * first. Keys, values and ranges are copied.
 */
struct etcd_call *etcd_post(struct etcd *e, const char *path, json_t *body,
		    unsigned flags, etcd_cb *cb, void *arg);	/* steals body */

struct etcd_range {
	const char	*key;
	size_t		 keylen;
	const char	*end;		/* NULL: the key alone */
	size_t		 endlen;
	int64_t		 revision;	/* 0: the newest */
	int64_t		 limit;		/* 0: no limit */
	bool		 keys_only;
	bool		 count_only;
};
struct etcd_call *etcd_range(struct etcd *e, const struct etcd_range *r,
		    unsigned flags, etcd_cb *cb, void *arg);
struct etcd_call *etcd_put(struct etcd *e, const char *key, size_t keylen,
		    const char *value, size_t valuelen, int64_t lease,
		    unsigned flags, etcd_cb *cb, void *arg);
/* end NULL: the key alone. */
struct etcd_call *etcd_deleterange(struct etcd *e, const char *key,
		    size_t keylen, const char *end, size_t endlen,
		    unsigned flags, etcd_cb *cb, void *arg);
/* id 0: etcd picks one. */
struct etcd_call *etcd_lease_grant(struct etcd *e, int64_t ttl, int64_t id,
		    unsigned flags, etcd_cb *cb, void *arg);
struct etcd_call *etcd_lease_keepalive(struct etcd *e, int64_t id,
		    unsigned flags, etcd_cb *cb, void *arg);
struct etcd_call *etcd_lease_revoke(struct etcd *e, int64_t id,
		    unsigned flags, etcd_cb *cb, void *arg);
/* Sends t and frees it (also on failure). */
struct etcd_call *etcd_txn(struct etcd *e, struct etcd_txn *t,
		    unsigned flags, etcd_cb *cb, void *arg);
/* The callback will not run. A call already on the wire is abandoned
 * with its connection; etcd may still carry it out. */
void		 etcd_cancel(struct etcd_call *c);

/*
 * A transaction: compares, then the success or the failure operations.
 * The adders return -1 (ENOMEM) and leave t as it was.
 */
enum etcd_cmp_target {
	ETCD_CMP_VERSION,
	ETCD_CMP_CREATE,
	ETCD_CMP_MOD,
	ETCD_CMP_LEASE
};
enum etcd_cmp_result {
	ETCD_CMP_EQUAL,
	ETCD_CMP_GREATER,
	ETCD_CMP_LESS,
	ETCD_CMP_NOT_EQUAL
};
struct etcd_txn	*etcd_txn_new(void);
void		 etcd_txn_free(struct etcd_txn *t);
int		 etcd_txn_compare(struct etcd_txn *t, const char *key,
		    size_t keylen, enum etcd_cmp_target target,
		    enum etcd_cmp_result result, int64_t value);
int		 etcd_txn_put(struct etcd_txn *t, bool success,
		    const char *key, size_t keylen, const char *value,
		    size_t valuelen, int64_t lease);
int		 etcd_txn_delete(struct etcd_txn *t, bool success,
		    const char *key, size_t keylen, const char *end,
		    size_t endlen);
/* Operations in both branches, and compares. */
size_t		 etcd_txn_nops(const struct etcd_txn *t);

/*
 * The watch: one prefix, from start_revision on, on a connection of its
 * own. Events come in revision order, with every event of a revision in
 * one call. When the stream is cut (the member died, a timeout, "no
 * leader") the client says so through down() and watches again by itself
 * from the revision after the last it delivered, on the current endpoint,
 * after a pause that grows to ETCD_WATCH_RETRY_MAX_MS. When etcd has
 * compacted that revision, compacted() is called and the watch is over:
 * range again and etcd_watch_start() again.
 */
struct etcd_event {
	bool		is_delete;
	struct etcd_kv	kv;		/* a delete has the key and
					 * mod_revision only */
};
struct etcd_watch_cbs {
	/* header_revision: etcd's revision when it sent these */
	void	(*events)(void *arg, const struct etcd_event *ev, size_t n,
		    int64_t header_revision);
	/* The watch is in place (again); revision: etcd's, at creation. */
	void	(*created)(void *arg, int64_t revision);
	void	(*compacted)(void *arg, int64_t compact_revision);
	void	(*down)(void *arg, enum etcd_status st, const char *why);
};
/* One watch per client: a second start replaces the first. -1 with errno
 * ENOMEM. Callbacks never run from inside etcd_watch_start(). */
int		 etcd_watch_start(struct etcd *e, const char *prefix,
		    size_t prefixlen, int64_t start_revision,
		    const struct etcd_watch_cbs *cbs, void *arg);
/* No more callbacks; safe from inside one. */
void		 etcd_watch_stop(struct etcd *e);
/* Cuts the stream and watches again from the next revision on another
 * endpoint, as after a failure: for a watch that has gone quiet while
 * etcd has moved on (a member cut off from its peers). */
void		 etcd_watch_restart(struct etcd *e);
/* The revision the watch waits for next; 0 before the first start. */
int64_t		 etcd_watch_next_revision(const struct etcd *e);
bool		 etcd_watch_is_up(const struct etcd *e);

/*
 * Helpers. The range end of a prefix: the prefix with its last byte that
 * is not 0xff incremented and the rest cut; "\0" (every key) when there is
 * none. out has room for len bytes; returns the end's length.
 */
size_t		 etcd_prefix_end(const char *prefix, size_t len, char *out);
/* Base64 (RFC 4648, padded). Encode writes 4 * ((len + 2) / 3) bytes and
 * a NUL; decode returns the length, or -1 for bad input. */
size_t		 etcd_b64_encode(const void *src, size_t len, char *out);
long		 etcd_b64_decode(const char *src, size_t len, char *out);
const char	*etcd_status_name(enum etcd_status st);

#endif /* ETCD_H */
