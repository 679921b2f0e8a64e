/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the etcd client's files share (etcd.c: endpoints, the pool and the
 * calls; etcd_watch.c: the watch; etcd_json.c: base64, request bodies and
 * the decoding of replies). Nothing outside src/etcd*.c includes it.
 */
#ifndef ETCD_IMPL_H
#define ETCD_IMPL_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "etcd.h"

struct bufferevent;
struct evbuffer;
struct evdns_base;
struct evhttp_connection;
struct evhttp_request;
struct event;

#define ETCD_URL_MAX	300
#define ETCD_HOST_MAX	256
#define ETCD_PATH_MAX	48
#define ETCD_MAX_HEADERS (64 * 1024)	/* one reply's status line and
					 * headers: etcd's are a few hundred
					 * bytes */

struct etcd_endpoint {
	char	url[ETCD_URL_MAX];	/* as given, normalised */
	char	host[ETCD_HOST_MAX];	/* for connect */
	char	hosthdr[ETCD_HOST_MAX + 8];	/* Host: header */
	int	port;
	bool	tls;				/* https:// */
};

enum etcd_call_state {
	CALL_QUEUED,
	CALL_INFLIGHT,
	CALL_FAILING,		/* completes from its timer at once */
	CALL_PAUSED		/* in e->inflight: queued again by its timer */
};

struct etcd_conn;

struct etcd_call {
	struct etcd		*e;
	TAILQ_ENTRY(etcd_call)	 entry;		/* e->queue or e->inflight */
	enum etcd_call_state	 state;
	char			 path[ETCD_PATH_MAX];
	char			*body;
	size_t			 bodylen;
	unsigned		 flags;
	etcd_cb			*cb;
	void			*arg;
	struct event		*timer;		/* the deadline */
	uint64_t		 deadline_ms;
	struct etcd_conn	*conn;		/* CALL_INFLIGHT */
	struct evhttp_request	*req;
	int			 ep;		/* endpoint of the last try */
	int			 tries;
	int			 refused;	/* tries that could not connect */
	uint64_t		 sent_ms;	/* of the last try */
	/* a raft term of its member no later than the member's when it
	 * took this try (0: none known yet, the next probe gives one); for
	 * a member not heard from yet, the newest any member told */
	int64_t			 base_term;
	int			 http_error;	/* from the error callback */
	uint64_t		 token_gen;	/* of the token it was sent with */
	bool			 reauthed;	/* sent again after a refused token */
	bool			 got_error_cb;
	enum etcd_status	 fail_status;	/* CALL_FAILING */
	char			 fail_msg[256];	/* and why the last try ended */
};
TAILQ_HEAD(etcd_callq, etcd_call);

struct etcd_conn {
	struct etcd			*e;
	struct evhttp_connection	*evcon;
	int				 ep;	/* of evcon; -1: none */
	int				 nodelay_fd;	/* TCP_NODELAY set */
	struct etcd_call		*call;	/* in flight, or NULL */
	bool				 stale;	/* TLS, closed: to be remade */
};

/*
 * A member that a call has waited on for stall_ms is asked for its raft
 * status (etcd_probe.c) on a connection of its own; what the answer says
 * is applied from the stall timer, never from inside an evhttp callback.
 */
enum etcd_probe_verdict {
	PROBE_NONE,		/* no answer yet, or one that says nothing */
	PROBE_SILENT,		/* no answer within probe_ms */
	PROBE_NOLEADER,		/* the member has no leader */
	PROBE_TERM		/* the member has a leader, in term */
};

struct etcd_member {
	struct etcd		*e;
	int64_t			 term;		/* last raft term it told */
	struct evhttp_connection *probe;	/* the probe on its way */
	uint64_t		 probe_sent_ms;
	uint64_t		 probe_last_ms;	/* of the last probe sent */
	bool			 probe_done;	/* answered, to be applied */
	enum etcd_probe_verdict	 verdict;
	int64_t			 probe_term;
	char			 probe_why[160]; /* a failed probe's reason */
	/* found silent (a probe, a call or the watch's creation not
	 * answered in time) or not reachable: the calls and the watch pass
	 * it over until then, unless every other member is passed over too */
	uint64_t		 down_until;
};

/* The watch's life; every move between these is made by the timer, so
 * that no evhttp connection is freed inside its own callback. */
enum etcd_watch_state {
	WATCH_IDLE,		/* not started, or stopped and closed */
	WATCH_CLOSING,		/* timer: drop the stream, then pause */
	WATCH_PAUSED,		/* timer: open the stream */
	WATCH_OPENING,		/* timer: "created" did not come in time */
	WATCH_UP
};

struct etcd_watch {
	enum etcd_watch_state	 state;
	bool			 active;	/* started, not stopped */
	char			*key;		/* the prefix */
	size_t			 keylen;
	char			*end;
	size_t			 endlen;
	int64_t			 next_rev;
	struct etcd_watch_cbs	 cbs;
	void			*arg;
	struct evhttp_connection *evcon;
	struct evhttp_request	*req;
	int			 ep;
	uint64_t		 opened_ms;	/* the creation was sent */
	struct evbuffer		*line;		/* a reply not yet ended */
	struct event		*timer;
	int			 pause_ms;	/* before the next open */
	int			 backoff_ms;	/* the pause after a cut */
	bool			 refused;	/* etcd refused the last try
						 * ("no leader", say) */
	uint64_t		 gen;		/* bumped by every (re)start */
	uint64_t		 token_gen;	/* of the token it was opened with */
};

struct etcd {
	struct event_base	*base;
	struct evdns_base	*dns;		/* only for host names */
	struct etcd_opts	 o;
	struct etcd_endpoint	 eps[ETCD_ENDPOINTS_MAX];
	struct etcd_member	 mem[ETCD_ENDPOINTS_MAX];
	int			 neps;
	int			 cur;		/* endpoint calls go to */
	char			 last_fail[256];	/* why the last try of
						 * any call ended */
	struct etcd_conn	*conns;
	struct etcd_callq	 queue;
	size_t			 nqueue;
	struct etcd_callq	 inflight;
	size_t			 ninflight;
	struct event		*kick;		/* dispatch outside callbacks */
	struct event		*stall;		/* probes stuck calls' members */
	int			 stall_ms;	/* a call this old: probe */
	int			 probe_ms;	/* a probe's own timeout */
	int			 down_ms;	/* a member found down is
						 * passed over this long */
	int64_t			 term_max;	/* the newest raft term any
						 * member told */
	struct etcd_watch	 w;
	void			*tls;		/* SSL_CTX: an https endpoint */
	/* etcd auth: the token calls carry, its generation (bumped when it
	 * is dropped), and the /v3/auth/authenticate call in progress */
	char			*user;
	char			*password;
	size_t			 passwordlen;
	char			*token;
	uint64_t		 token_gen;
	struct etcd_call	*auth;
};

/* etcd.c */
uint64_t	 etcd_now_ms(void);
void		 etcd_endpoint_failed(struct etcd *e, int ep, const char *why);
/* A connection to endpoint ep whose replies may have max_body bytes of
 * body (for a chunked stream: so far, see etcd_watch.c). */
struct evhttp_connection *etcd_evcon_new(struct etcd *e, int ep,
		    int timeout_ms, size_t max_body);
/* token: the Authorization header, or NULL. */
struct evhttp_request *etcd_request_new(struct etcd *e, int ep,
		    void (*cb)(struct evhttp_request *, void *), void *arg,
		    const char *body, size_t bodylen, const char *token);
/* etcd refused the token of generation gen (a refused call, or a watch):
 * drop it if it is still the current one, and authenticate again. */
void		 etcd_auth_refused(struct etcd *e, uint64_t gen);
/* With etcd auth and no token yet: true, and the authentication is on
 * its way. */
bool		 etcd_auth_wait(struct etcd *e);
/* The reply is etcd refusing a call's token: expired, or issued before a
 * change of its auth store. */
bool		 etcd_token_refused(int grpc_code, const char *message);

/* A try of c (in flight, ETCD_RETRY) that cannot succeed on its member:
 * dropped with its connection, c queued again for the next member within
 * its deadline. why: for the log and the final error. */
void		 etcd_call_abandon(struct etcd_call *c, const char *why);
/* A reply from member ep told its raft term. */
void		 etcd_member_term(struct etcd *e, int ep, int64_t term);
/* Member ep did not answer in time, or could not be reached (why): passed
 * over for down_ms by etcd_endpoint_failed(); or it answered. */
void		 etcd_member_down(struct etcd *e, int ep, const char *why);
void		 etcd_member_up(struct etcd *e, int ep);

/* etcd_probe.c */
int		 etcd_probe_init(struct etcd *e);
/* A call went out: the stall timer runs. */
void		 etcd_probe_arm(struct etcd *e);
void		 etcd_probe_free(struct etcd *e);

/* etcd_tls.c */
void		*etcd_tls_ctx_new(const struct etcd_opts *o, char *err,
		    size_t errlen);
void		 etcd_tls_ctx_free(void *ctx);
struct bufferevent *etcd_tls_bev_new(struct etcd *e, int ep);
/* Why the TLS of evcon failed, into buf; false if it says nothing. */
bool		 etcd_tls_why(struct evhttp_connection *evcon, char *buf,
		    size_t len);

/* etcd_json.c */
int		 etcd_json_i64(const json_t *v, int64_t *out);
json_t		*etcd_json_b64(const char *p, size_t len);
json_t		*etcd_json_i64_new(int64_t v);
/* Decodes a reply into *r; kvs and their bytes go into *arena (freed by
 * the caller with kl_free). Returns 0, or -1 with r->message set. */
int		 etcd_result_decode(const json_t *root, struct etcd_result *r,
		    void **arena);
/* The kv at v into *kv, its bytes at *p (advanced). */
int		 etcd_kv_decode(const json_t *v, struct etcd_kv *kv, char **p);
/* A watch reply's "events" (NULL: none) into *out, one allocation the
 * caller frees with kl_free, *n of them, in order: every event's kv
 * decoded, with a mod_revision above 0 and none going back. 0, -1 for
 * anything else, -2 out of memory. */
int		 etcd_events_decode(const json_t *evs,
		    struct etcd_event **out, size_t *n);
/* Bytes etcd_kv_decode needs for the kv at v. */
size_t		 etcd_kv_size(const json_t *v);
/* s with control bytes as '?', cut to len - 1 bytes, in buf: a text
 * from etcd, on its way to a log line or a client. */
const char	*etcd_text_safe(const char *s, char *buf, size_t len);
/* An error reply ({"error":...,"code":N}, or the stream form
 * {"error":{"grpc_code":N,"message":...}}): its code and text. */
bool		 etcd_json_error(const json_t *root, int *code,
		    const char **message);
json_t		*etcd_txn_json(struct etcd_txn *t);

/* etcd_watch.c */
void		 etcd_watch_free(struct etcd *e);
/* A call was carried out: the cluster has a leader. A watch that waits
 * out its pause after etcd refused it opens now. */
void		 etcd_watch_leader_seen(struct etcd *e);

#endif /* ETCD_IMPL_H */
