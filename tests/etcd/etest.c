/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * etest.h: the cluster and prefix of a front end test, its front ends and
 * members, cycling client threads and the history checker. The checker
 * sorts what it is given and asserts through Check (the main thread); the
 * clients use kltest's non-asserting layer only.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etest.h"

struct ec	et_ec;
char		et_prefix[64];

void
et_init(const char *prog)
{
	kt_init(prog);
	if (ec_start(&et_ec, 3) != 0)
		exit(1);
}

void
et_done(void)
{
	ec_down(&et_ec);
}

void
et_setup(void)
{
	ck_assert_msg(ec_run(&et_ec, NULL, 0, "heal", NULL) == 0,
	    "the etcd cluster did not heal");
	snprintf(et_prefix, sizeof(et_prefix), "kltest-%ld/", (long)getpid());
	kt_setup_none();
}

struct kt_daemon *
et_fe_start_at(const char *file, int line, const char *endpoints,
    const char *ttl, const char *timeout, const char *const *extra)
{
	const char	*argv[KT_MAX_EXTRA + 1];
	int		 n = 0;

	argv[n++] = "--backend";
	argv[n++] = "etcd";
	argv[n++] = "--etcd-endpoints";
	argv[n++] = endpoints != NULL ? endpoints : et_ec.endpoints;
	argv[n++] = "--etcd-prefix";
	argv[n++] = et_prefix;
	/* the tests' watching connections sit idle through kills and
	 * leases, longer than auth-timeout's 10 s once KEYLOCKD_TEST_SLOW
	 * scales their sleeps; auth-timeout has tests of its own */
	argv[n++] = "--auth-timeout";
	argv[n++] = "0";
	if (ttl != NULL) {
		argv[n++] = "--etcd-lease-ttl";
		argv[n++] = ttl;
	}
	if (timeout != NULL) {
		argv[n++] = "--etcd-timeout";
		argv[n++] = timeout;
	}
	for (; extra != NULL && *extra != NULL; extra++) {
		if (n == KT_MAX_EXTRA)
			kt_fail_at(file, line, "more than %d front end "
			    "arguments", KT_MAX_EXTRA);
		argv[n++] = *extra;
	}
	argv[n] = NULL;
	return kt_daemon_start_at(file, line, NULL, argv);
}

const char *
et_endpoints_from(int first)
{
	static char	buf[EC_ENDPOINTS_MAX];
	size_t		n = 0;

	n += (size_t)snprintf(buf, sizeof(buf), "%s", ec_url(&et_ec, first));
	for (int i = 1; i <= et_ec.n; i++)
		if (i != first)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, ",%s",
			    ec_url(&et_ec, i));
	return buf;
}

void
et_member(const char *cmd, int i)
{
	char	name[8];

	snprintf(name, sizeof(name), "m%d", i);
	ck_assert_msg(ec_member(&et_ec, cmd, name) == 0, "%s %s", cmd, name);
}

int
et_leader(void)
{
	char	leader[16];

	ck_assert_msg(ec_leader(&et_ec, leader, sizeof(leader)) == 0,
	    "no etcd leader");
	return atoi(leader + 1);
}

void
et_ask(const char *request, char *reply, size_t len)
{
	struct kt_daemon	*d;
	struct kt_conn		*c;

	kt_setup_none();
	snprintf(et_prefix, sizeof(et_prefix), "kltest-%ld-ask/",
	    (long)getpid());
	d = et_fe_start(NULL, NULL, NULL);
	c = kt_conn_open(d, KT_TCP, kt_ms(5000));
	if (c == NULL || kt_conn_sendf(c, "%s", request) != 0 ||
	    kt_conn_readline(c, kt_ms(10000)) != KT_LINE)
		snprintf(reply, len, "(no reply)");
	else
		snprintf(reply, len, "%.*s", (int)c->linelen, c->line);
	if (c != NULL)
		kt_conn_close(c);
	kt_teardown();
}

/* ---- the history checker ---- */

static const char *
et_who_default(const struct et_hold *h)
{
	static char	buf[4][128];
	static int	k;
	char		*b = buf[k++ % 4];

	snprintf(b, sizeof(buf[0]), "token %" PRIu64 " held %" PRIu64 ".%06"
	    PRIu64 " to %" PRIu64 ".%06" PRIu64, h->token, h->reply_us /
	    1000000, h->reply_us % 1000000, h->end_us / 1000000, h->end_us %
	    1000000);
	return b;
}

static int
et_cmp_reply(const void *pa, const void *pb)
{
	const struct et_hold *a = *(struct et_hold *const *)pa;
	const struct et_hold *b = *(struct et_hold *const *)pb;

	return a->reply_us < b->reply_us ? -1 : a->reply_us > b->reply_us;
}

static int
et_cmp_send(const void *pa, const void *pb)
{
	const struct et_hold *a = *(struct et_hold *const *)pa;
	const struct et_hold *b = *(struct et_hold *const *)pb;

	return a->send_us < b->send_us ? -1 : a->send_us > b->send_us;
}

size_t
et_check_key(struct et_hold **v, size_t n, int limit, const char *key,
    et_who_fn *who)
{
	struct et_hold		*act[64];
	int			 nact = 0;
	uint64_t		 ended_max = 0;
	const struct et_hold	*ended_by = NULL;

	ck_assert_int_le(limit, 63);
	if (who == NULL)
		who = et_who_default;
	qsort(v, n, sizeof(*v), et_cmp_reply);
	for (size_t a = 0; a < n; a++) {
		for (int b = 0; b < nact; b++)
			if (act[b]->end_us <= v[a]->reply_us) {
				if (act[b]->token > ended_max) {
					ended_max = act[b]->token;
					ended_by = act[b];
				}
				act[b--] = act[--nact];
			}
		ck_assert_msg(nact < limit, "%s: %d holds at once: %s and %s",
		    key, nact + 1, who(v[a]), who(act[0]));
		if (limit == 1)
			ck_assert_msg(ended_by == NULL ||
			    v[a]->token > ended_max, "%s: after %s, %s", key,
			    who(ended_by), who(v[a]));
		act[nact++] = v[a];
	}
	return n;
}

void
et_check_cluster_tokens(struct et_hold **byreply, struct et_hold **bysend,
    size_t n, et_who_fn *who)
{
	size_t			 r = 0;
	uint64_t		 max = 0;
	const struct et_hold	*maxop = NULL;

	if (who == NULL)
		who = et_who_default;
	qsort(byreply, n, sizeof(*byreply), et_cmp_reply);
	qsort(bysend, n, sizeof(*bysend), et_cmp_send);
	for (size_t s = 0; s < n; s++) {
		while (r < n && byreply[r]->reply_us < bysend[s]->send_us) {
			if (byreply[r]->token > max) {
				max = byreply[r]->token;
				maxop = byreply[r];
			}
			r++;
		}
		ck_assert_msg(maxop == NULL || bysend[s]->token > max,
		    "cluster: a LOCK sent at %" PRIu64 " us got %s, after %s "
		    "had arrived", bysend[s]->send_us, who(bysend[s]),
		    who(maxop));
	}
}

/* ---- cycling clients ---- */

static void
et_client_wrong(struct et_client *cl, const char *req, const char *line)
{
	if (line != NULL && strncmp(line, "ERR BACKEND", 11) == 0)
		cl->backend++;
	if (line == NULL)
		cl->unanswered++;
	else
		cl->errors++;
	if (cl->first[0] == '\0')
		snprintf(cl->first, sizeof(cl->first), "client %d, %s %s: %s",
		    cl->id, req, cl->key, line != NULL ? line : "no reply");
}

static void *
et_client_main(void *arg)
{
	struct et_client	*cl = arg;
	struct kt_conn		*c;

	if ((c = kt_conn_open(cl->d, KT_TCP, kt_ms(5000))) == NULL) {
		et_client_wrong(cl, "connect", NULL);
		return NULL;
	}
	while (!*cl->stop) {
		struct et_cycle	op;

		memset(&op, 0, sizeof(op));
		op.h.send_us = kt_now_us();
		if (kt_conn_sendf(c, "LOCK %s", cl->key) != 0 ||
		    kt_conn_readline(c, kt_ms(ET_REPLY_MS)) != KT_LINE) {
			et_client_wrong(cl, "LOCK", NULL);
			break;
		}
		op.h.reply_us = kt_now_us();
		if (!kt_line_token(c, &op.h.token)) {
			et_client_wrong(cl, "LOCK", c->line);
			continue;
		}
		if (cl->hold_ms > 0)
			kt_sleep_ms(cl->hold_ms);
		op.h.end_us = kt_now_us();
		if (kt_conn_sendf(c, "UNLOCK %s", cl->key) != 0 ||
		    kt_conn_readline(c, kt_ms(ET_REPLY_MS)) != KT_LINE) {
			et_client_wrong(cl, "UNLOCK", NULL);
			break;
		}
		op.done_us = kt_now_us();
		if (!kt_line_is(c, "OK 1"))
			et_client_wrong(cl, "UNLOCK", c->line);
		if (cl->nops == cl->cap) {
			size_t		 cap = cl->cap ? cl->cap * 2 : 4096;
			struct et_cycle	*p;

			if ((p = realloc(cl->ops, cap * sizeof(*p))) == NULL) {
				cl->oom = true;
				break;
			}
			cl->ops = p;
			cl->cap = cap;
		}
		cl->ops[cl->nops++] = op;
	}
	kt_conn_close(c);
	return NULL;
}

void
et_client_start(struct et_client *cl)
{
	cl->ops = NULL;
	cl->nops = cl->cap = 0;
	cl->errors = cl->backend = cl->unanswered = 0;
	cl->first[0] = '\0';
	cl->oom = false;
	ck_assert_int_eq(pthread_create(&cl->th, NULL, et_client_main, cl),
	    0);
}

bool
et_client_join(struct et_client *cl, char *why, size_t len)
{
	pthread_join(cl->th, NULL);
	if (cl->oom)
		snprintf(why, len, "client %d: out of memory for the history",
		    cl->id);
	else if (cl->errors != 0 || cl->unanswered != 0)
		snprintf(why, len, "client %d: %" PRIu64 " wrong replies (%"
		    PRIu64 " ERR BACKEND), %" PRIu64 " unanswered; the first: "
		    "%s", cl->id, cl->errors, cl->backend, cl->unanswered,
		    cl->first);
	else
		return true;
	return false;
}

struct et_hold **
et_client_holds(struct et_client *cls, int n, const char *key,
    size_t *count)
{
	struct et_hold	**v;
	size_t		  k = 0;

	for (int i = 0; i < n; i++)
		if (strcmp(cls[i].key, key) == 0)
			k += cls[i].nops;
	ck_assert_ptr_nonnull(v = calloc(k + 1, sizeof(*v)));
	k = 0;
	for (int i = 0; i < n; i++)
		if (strcmp(cls[i].key, key) == 0)
			for (size_t j = 0; j < cls[i].nops; j++)
				v[k++] = &cls[i].ops[j].h;
	*count = k;
	return v;
}
