/*
 * keylock-bench: a load generator for keylockd. SPDX-License-Identifier: MIT
 *
 * What keylock-bench's modules share: the options, the run (struct bench),
 * one socket (struct bsock) and the clients that ride it (struct bconn),
 * each with its requests in flight. Without --channels a socket carries one
 * client on channel 0, which is a connection as keylockd has always seen
 * it; with --channels N the clients are channels 1, 2, ... of N sockets.
 * The tool is one thread and one libevent loop; each socket does one
 * recv() per readable event and one send() per batch of requests, for all
 * of its clients, so that the client costs no more system calls per
 * request than the server.
 */
#ifndef KEYLOCK_BENCH_H
#define KEYLOCK_BENCH_H

#include <sys/socket.h>
#include <sys/types.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keylock-bench-hist.h"

#define BENCH_TOKEN_LEN		20	/* Redis lock value: 20 digits */
#define BENCH_SHA_LEN		40	/* SCRIPT LOAD's SHA1, in hex */
#define BENCH_SCRATCH_SIZE	(256 * 1024)	/* one recv() at most */
#define BENCH_CONNECT_WINDOW	64	/* connects in flight at setup */
#define BENCH_STATS_SAMPLES	9	/* STATS timed after holding */
#define BENCH_FD_SPARE		32	/* descriptors besides connections */
#define BETCD_REQ_MAX		1024	/* one etcd gateway request */
#define BENCH_SERVERS_MAX	16	/* -S a,b,...: connections take turns */
#define BENCH_PRIORITIES	3	/* seed: of libevent's events */

enum bench_proto {
	BENCH_KEYLOCK,
	BENCH_REDIS,
	BENCH_ETCD	/* etcd's lock API (keylock-bench-etcd.c) */
};

enum bench_work {
	WORK_LOCK_UNLOCK,
	WORK_TRYLOCK,
	WORK_CONTENDED,
	WORK_SHARED,
	WORK_SEMAPHORE,
	WORK_HOLD,
	WORK_CONNECT,
	WORK_IDLE,
	WORK_SEED,
	WORK_REFRESH,	/* one lock per client, kept by REFRESH */
	WORK_MAX
};

/* Request types: one latency histogram and two counters each. */
enum bench_rt {
	RT_LOCK,
	RT_TRYLOCK,
	RT_UNLOCK,
	RT_SET,
	RT_DEL,
	RT_EVALSHA,
	RT_CONNECT,	/* connect() to writable: no reply */
	RT_STATS,
	RT_PING,
	RT_INFO,
	RT_SCRIPT,
	RT_GRANT,	/* etcd: a lease per connection */
	RT_REVOKE,
	RT_RANGE,	/* etcd: its revision */
	RT_SESSION,	/* --session: once per connection at setup */
	RT_REFRESH,
	RT_MAX
};

enum bench_phase {
	PH_CONNECT,	/* open every connection */
	PH_SETUP,	/* SCRIPT LOAD, memory baseline, PING idle ones */
	PH_HOLD,	/* take the held keys */
	PH_MEASURE,	/* memory and STATS with the keys held */
	PH_RUN,		/* the measured workload */
	PH_DRAIN,	/* Redis: finish the cycles begun, unmeasured */
	PH_REVOKE,	/* etcd: revision, then revoke the leases */
	PH_DONE
};

enum bconn_role {
	ROLE_WORK,	/* runs the workload */
	ROLE_HOLD,	/* takes its share of the held keys, then idles */
	ROLE_IDLE,	/* one PING, then idles (-w idle) */
	ROLE_CTL,	/* control requests; the probe of -w idle */
	ROLE_CHAN0	/* --channels: a socket's own channel 0 (SESSION) */
};

struct bench_opts {
	const char		*server;	/* host:port or a unix path, or a
						 * comma-separated list of them */
	enum bench_proto	 proto;
	enum bench_work		 work;
	int			 conns;
	int			 channels;	/* --channels: sockets that
						 * carry the -c clients; 0: a
						 * socket each */
	uint64_t		 requests;	/* -n; 0: run for seconds */
	double			 seconds;
	int			 pipeline;
	uint64_t		 keyspace;
	int			 keys_per_lock;
	int			 limit;		/* semaphore limit= */
	int64_t			 ttl_ms;	/* ttl=; -1: none */
	int64_t			 px_ms;		/* Redis PX */
	int64_t			 hold_px_ms;	/* Redis PX of held keys */
	bool			 redis_script;	/* unlock with EVALSHA */
	uint64_t		 held;		/* --held: keys held meanwhile */
	int			 held_conns;
	long			 server_pid;	/* for VmRSS; 0: none */
	int			 sources;	/* loopback source addresses */
	int			 hold_ms;	/* seed: time each lock is held */
	bool			 session;	/* SESSION on every connection */
	int64_t			 session_grace_ms;	/* its grace=; 0: the
						 * server's session-grace */
	bool			 json;
	int			 progress;	/* -1: when stdout is a tty */
	uint64_t		 seed;
};

struct inflight {
	uint64_t	t_send;		/* ns; 0 until the bytes went out */
	uint8_t		type;		/* enum bench_rt */
	bool		last;		/* ends a cycle */
};

/* A reply: OK (or +, :N>0, $bulk), else an error (ERR, -ERR) or a refusal
 * (Redis nil, :0); val is the value after OK, or the whole error line. */
struct breply {
	bool		 ok;
	bool		 is_error;
	const char	*val;
	size_t		 vlen;
};

/*
 * One socket: its descriptor, events and buffers, shared by the clients
 * that ride it. Replies are routed to their client by the @N in front
 * (none: channel 0). A socket of several clients does not send at once:
 * bconn_flush() marks it, and one event of the loop, run after every
 * other callback of its turn, sends what all of them queued (bsock_sendall).
 */
struct bsock {
	struct bench		*b;
	int			 id;		/* in b->all[] */
	int			 srv;		/* its server in b->srv[] */
	int			 fd;
	unsigned		 gen;		/* bumped by every close */
	bool			 is_ctl;
	struct event		*rev;
	struct event		*wev;
	bool			 wev_on;
	bool			 connecting;
	bool			 connected;
	bool			 marked;	/* in b->marked[]: to send */
	uint64_t		 t_connect;
	char			*obuf;		/* obuf[ooff..olen): unsent */
	size_t			 ooff, olen, ocap;
	char			*ibuf;		/* a partial reply */
	size_t			 ilen, icap;
	struct bconn		*ch0;		/* channel 0's client */
	struct bconn		**chans;	/* channel N's: chans[N - 1] */
	int			 nchans, capchans;
	struct bconn		**unstamped;	/* clients with requests not
						 * yet sent: 1 + nchans */
	int			 nunstamped;
	struct bconn		**replied;	/* clients with replies read
						 * by this recv(): 1 + nchans */
	int			 nreplied;
};

struct bconn {
	struct bench		*b;
	struct bsock		*s;
	int			 id;
	uint32_t		 chan;		/* 0: no @N */
	char			 chan_prefix[16];	/* "@N " or "" */
	size_t			 chan_prefix_len;
	enum bconn_role		 role;
	bool			 unstamped_on;	/* in s->unstamped[] */
	bool			 replied_on;	/* in s->replied[] */
	struct inflight		*q;		/* ring of requests sent */
	unsigned		 qhead, qlen, qcap, qunstamped;
	int			 step;		/* next step of the cycle */
	bool			 cycle_sent;	/* connect: cycle written */
	uint64_t		 key;		/* first key of the cycle */
	char			 token[BENCH_TOKEN_LEN + 1];
	uint64_t		 hold_next;	/* holders: next key to take */
	uint64_t		 hold_end;
	struct event		*timer;		/* seed: the hold time */
	int			 seed_index;	/* seed: in the LOCKs' order */
	uint64_t		 t_granted;	/* seed: when the grant was read */
	bool			 seed_done;
	int64_t			 lease;		/* etcd: this connection's */
	int64_t			 erev;		/* etcd: revision of a range */
	char			 ekey[256];	/* etcd: the lock held */
	char			 eerr[160];	/* etcd: an error's text */
};

struct bench_mem {
	bool		have_rss;
	uint64_t	rss_before;	/* bytes */
	uint64_t	rss_after;
	bool		have_used;
	uint64_t	used_before;	/* Redis: INFO used_memory; */
	uint64_t	used_after;	/* keylockd: STATS table_bytes */
};

/* One server of -S. */
struct bench_server {
	char			 name[256];	/* as given */
	struct sockaddr_storage	 addr;
	socklen_t		 addrlen;
	bool			 is_unix;
};

struct bench {
	struct bench_opts	 o;
	struct event_base	*base;
	struct bench_server	 srv[BENCH_SERVERS_MAX];
	int			 nsrv;
	struct sockaddr_storage	 addr;		/* srv[0]'s */
	socklen_t		 addrlen;
	bool			 is_unix;	/* any of srv[] */
	bool			 is_tty;

	struct bsock		**all;		/* every socket */
	int			 nall;
	struct bconn		**clients;	/* every client */
	int			 nclients;
	struct bconn		**work;		/* ROLE_WORK or ROLE_IDLE */
	int			 nwork;
	struct bconn		**holders;
	int			 nholders;
	struct bconn		*ctl;
	struct bsock		**marked;	/* --channels: sockets to send */
	int			 nmarked;
	struct event		*sendall;	/* sends b->marked[] */

	enum bench_phase	 phase;
	int			 next_connect;	/* PH_CONNECT: next in all[] */
	int			 connecting;	/* connects in flight */
	int			 nconnected;
	uint64_t		 pending;	/* replies the phase awaits */
	int			 stats_left;
	bool			 stopping;
	int			 status;	/* exit status */
	char			 failure[256];

	uint64_t		 issued;	/* workload requests written */
	uint64_t		 outstanding;
	uint64_t		 cycles;
	uint64_t		 requests;
	uint64_t		 lock_failures;
	uint64_t		 retries;
	uint64_t		 t_start, t_end;
	struct bhist		 hist[RT_MAX];
	struct bhist		 all_hist;	/* every workload request */
	uint64_t		 count[RT_MAX];
	uint64_t		 fail[RT_MAX];
	uint64_t		 errors;	/* error replies (ERR, -ERR) */
	char			 first_error[160];

	uint64_t		 sessions;	/* SESSIONs answered OK */
	uint64_t		 held_keys;	/* granted so far */
	uint64_t		 held_total;
	uint64_t		 t_hold_start, t_hold_end;
	struct bench_mem	 mem;
	char			 sha[BENCH_SHA_LEN + 1];
	char			 lock_opts[64];	/* " mode=shared" etc. */
	size_t			 lock_opts_len;
	char			 hold_opts[32];	/* " ttl=MS" or "" */
	size_t			 hold_opts_len;
	int64_t			 refresh_ttl_ms;	/* -w refresh */

	int			*seed_holder;	/* per key: conn id or -1 */
	uint64_t		*seed_token;	/* per key: last token */
	uint64_t		 seed_overlaps;
	uint64_t		 seed_token_errors;
	int			 seed_left;	/* operations not yet done */
	int			 seed_next;	/* next connection to LOCK */
	struct event		*seed_burst;	/* the next LOCKs, when idle */
	uint64_t		*seed_released;	/* per key: UNLOCK written, ns */
	uint64_t		 seed_first_grant;	/* ns after t_start */
	uint64_t		 seed_locks_written;	/* ns after t_start */
	struct bhist		 seed_handoff;	/* UNLOCK written: next grant */
	struct bhist		 seed_overrun;	/* hold's end past hold_ms */

	int64_t			 etcd_ttl_s;	/* of the leases */
	int64_t			 etcd_rev_before, etcd_rev_after;
	char			*ebody;		/* a chunked body, joined */

	uint64_t		 rng;
	char			*scratch;
	struct event		*deadline;
	struct event		*tick;
	struct event		*sigint;
	struct event		*sigterm;
	uint64_t		 tick_cycles, tick_requests, t_tick;
};

/* keylock-bench.c */
uint64_t	bench_now(void);
void		bench_fail(struct bench *b, const char *fmt, ...)
		    __attribute__((format(printf, 2, 3)));
const char	*bench_rt_name(enum bench_rt t);
const char	*bench_work_name(enum bench_work w);

/* keylock-bench-report.c */
double		 bench_secs(const struct bench *b);
void		 bench_report(const struct bench *b);

/* keylock-bench-conn.c: sockets, framing, encoding */
struct bsock	*bsock_new(struct bench *b, int id);
void		 bsock_free(struct bsock *s);
bool		 bsock_add(struct bsock *s, struct bconn *c, bool channel);
int		 bsock_connect(struct bsock *s);
void		 bsock_close(struct bsock *s);
bool		 bsock_events(struct bench *b);
struct bconn	*bconn_new(struct bench *b, int id, enum bconn_role role);
void		 bconn_free(struct bconn *c);
void		 bconn_quit_all(struct bench *b);
void		 bconn_flush(struct bconn *c);
void		 bsock_flush(struct bsock *s);
void		 bconn_put(struct bconn *c, enum bench_rt type, bool last,
		    const char *prefix, uint64_t key, int nkeys);
void		 bconn_put_raw(struct bconn *c, enum bench_rt type,
		    const char *req, size_t len);

/* keylock-bench-etcd.c: etcd's gateway, for --etcd */
size_t		 betcd_encode(struct bconn *c, char *p, enum bench_rt type,
		    const char *prefix, uint64_t key);
ssize_t		 betcd_parse(struct bconn *c, const char *p, size_t len,
		    enum bench_rt type, struct breply *rep);

/* keylock-bench-work.c: phases and workloads */
void		 work_connected(struct bsock *s);
void		 work_reply(struct bconn *c, const struct inflight *r,
		    const struct breply *rep, uint64_t now);
void		 work_lost(struct bsock *s, const char *why);
void		 work_fill(struct bconn *c);
void		 work_check_done(struct bench *b);
void		 work_advance(struct bench *b);
void		 work_start(struct bench *b);
void		 work_stop(struct bench *b);
void		 work_finish(struct bench *b);
uint64_t	 work_random(struct bench *b);
bool		 work_rss(long pid, uint64_t *bytes);

#endif /* KEYLOCK_BENCH_H */
