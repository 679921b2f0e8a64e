/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * STATS and INFO as compact JSON. Every value is built with jansson's _new
 * setters so each has exactly one owner, and the root is released once
 * dumped. Keys and names are valid UTF-8 (proto.c checked them).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "session.h"
#include "stats.h"

static json_t *
stats_hist_json(const struct kl_hist *h)
{
	json_t	*o = json_object(), *b = json_array();

	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++) {
		uint64_t	 ub = kl_hist_bound(i);
		json_t		*pair = json_array();

		json_array_append_new(pair, ub == UINT64_MAX ? json_null() :
		    json_integer((json_int_t)ub));
		json_array_append_new(pair,
		    json_integer((json_int_t)h->counts[i]));
		json_array_append_new(b, pair);
	}
	json_object_set_new(o, "buckets", b);
	json_object_set_new(o, "count", json_integer((json_int_t)kl_hist_count(h)));
	json_object_set_new(o, "sum_ms", json_integer((json_int_t)h->sum_ms));
	return o;
}

static json_t *
stats_hot_json(const struct locktable *lt, stats_key_fn keep, void *arg)
{
	const struct lt_key	*hot[KL_HOT_KEYS];
	struct lt_key_view	 v;
	size_t			 n;
	json_t			*a = json_array();

	n = locktable_hot_keys_filter(lt, hot, KL_HOT_KEYS, keep, arg);
	for (size_t i = 0; i < n; i++) {
		json_t	*o = json_object();

		locktable_key_view(hot[i], &v);
		json_object_set_new(o, "key", json_stringn(v.key, v.keylen));
		json_object_set_new(o, "holders",
		    json_integer((json_int_t)v.nholders));
		json_object_set_new(o, "waiters",
		    json_integer((json_int_t)v.nwaiters));
		json_object_set_new(o, "max_waiters",
		    json_integer((json_int_t)v.max_waiters));
		json_object_set_new(o, "wait_ms_total",
		    json_integer((json_int_t)v.wait_ms_total));
		json_array_append_new(a, o);
	}
	return a;
}

static char *
stats_dump(json_t *root)
{
	char	*s = json_dumps(root, JSON_COMPACT);

	json_decref(root);
	return s;
}

#define SET_U(o, name, v)	\
	json_object_set_new((o), (name), json_integer((json_int_t)(v)))

char *
stats_to_json(const struct stats *st, const struct locktable *lt,
    uint64_t now_ms, const char *version, const char *backend)
{
	return stats_to_json_keys(st, lt, now_ms, version, backend, NULL,
	    NULL);
}

char *
stats_to_json_keys(const struct stats *st, const struct locktable *lt,
    uint64_t now_ms, const char *version, const char *backend,
    stats_key_fn keep, void *arg)
{
	const struct lt_counters	*c = locktable_counters(lt);
	json_t				*o = json_object();

	json_object_set_new(o, "version", json_string(version));
	SET_U(o, "uptime_ms", now_ms - st->start_ms);
#define STATS_SUFFIX_counter	""
#define STATS_SUFFIX_gauge	""
#define STATS_SUFFIX_gauge_ms	"_ms"
#define STATS_ROW(name, kind, value, help)				\
	SET_U(o, #name STATS_SUFFIX_##kind, (value));
	KL_COUNTER_LIST(STATS_ROW)
#undef STATS_ROW
	json_object_set_new(o, "wait_ms", stats_hist_json(&c->wait_ms));
	json_object_set_new(o, "hold_ms", stats_hist_json(&c->hold_ms));
	json_object_set_new(o, "hot_keys", stats_hot_json(lt, keep, arg));
	json_object_set_new(o, "backend", json_string(backend));
	if (st->be.frontend != 0) {
		char id[24];

		/* as the front end's entries in etcd name it */
		snprintf(id, sizeof(id), "%016" PRIx64, st->be.frontend);
		json_object_set_new(o, "frontend", json_string(id));
	}
	SET_U(o, "pid", st->pid);
	return stats_dump(o);
}

static json_t *
stats_client(json_t *o, const struct lt_owner *owner, stats_name_fn name)
{
	int64_t		 detached = -1;
	uint64_t	 client = locktable_owner_id(owner);
	uint32_t	 channel = 0;
	uint64_t	 fe = 0;
	const char	*n = name(owner, &detached, &client, &channel, &fe);
	char		 hex[17];

	SET_U(o, "client", client);
	if (channel != 0)
		SET_U(o, "channel", channel);
	if (fe != 0) {
		snprintf(hex, sizeof(hex), "%016" PRIx64, fe);
		json_object_set_new(o, "frontend", json_string(hex));
	}
	json_object_set_new(o, "name", n != NULL ? json_string(n) :
	    json_null());
	if (detached >= 0)
		SET_U(o, "detached_ms", (uint64_t)detached);
	return o;
}

struct info_walk {
	json_t		*holders;
	json_t		*waiters;
	stats_name_fn	 name;
	size_t		 nholders;	/* listed so far */
	size_t		 nwaiters;
	size_t		 max;		/* entries listed of each */
};

static const char *
stats_mode(enum lt_mode m)
{
	return m == LT_SHARED ? "shared" : "exclusive";
}

static bool
stats_info_holder(void *arg, const struct lt_holder_view *h)
{
	struct info_walk	*w = arg;
	json_t			*o;

	if (w->nholders++ == w->max)
		return true;	/* listed enough; go on to the waiters */
	o = stats_client(json_object(), h->owner, w->name);
	SET_U(o, "token", h->token);
	json_object_set_new(o, "mode", json_string(stats_mode(h->mode)));
	SET_U(o, "held_ms", h->held_ms);
	if (h->expires_in_ms != 0)
		SET_U(o, "expires_in_ms", h->expires_in_ms);
	json_array_append_new(w->holders, o);
	return true;
}

static bool
stats_info_waiter(void *arg, const struct lt_waiter_view *v)
{
	struct info_walk	*w = arg;
	json_t			*o;

	if (w->nwaiters++ == w->max)
		return false;
	o = stats_client(json_object(), v->owner, w->name);
	json_object_set_new(o, "mode", json_string(stats_mode(v->mode)));
	SET_U(o, "waited_ms", v->waited_ms);
	json_array_append_new(w->waiters, o);
	return true;
}

char *
stats_info_json(const struct locktable *lt, const char *key, size_t keylen,
    uint64_t now_ms, stats_name_fn name, size_t max)
{
	const struct lt_key	*k = locktable_find(lt, key, keylen);
	struct lt_key_view	 v;
	struct info_walk	 w;
	json_t			*o = json_object();

	memset(&w, 0, sizeof(w));
	memset(&v, 0, sizeof(v));
	v.limit = 1;
	w.holders = json_array();
	w.waiters = json_array();
	w.name = name;
	w.max = max;
	json_object_set_new(o, "key", json_stringn(key, keylen));
	if (k != NULL) {
		locktable_key_view(k, &v);
		locktable_key_walk(lt, k, now_ms, stats_info_holder,
		    stats_info_waiter, &w);
	}
	SET_U(o, "limit", v.limit);
	json_object_set_new(o, "holders", w.holders);
	json_object_set_new(o, "waiters", w.waiters);
	/* The lists stop at max entries (INFO: KL_INFO_LIST_MAX), so that
	 * one reply stays far below max-output and its cost bounded; the
	 * totals are always exact. */
	SET_U(o, "holders_total", v.nholders);
	SET_U(o, "waiters_total", v.nwaiters);
	return stats_dump(o);
}

struct stats_clients {
	json_t	*list;
	size_t	 max;
	size_t	 total;
	size_t	 bytes;		/* listed so far, about */
	size_t	 budget;
	bool	 full;		/* the budget ended the list */
	bool	 failed;
};

/* About the bytes s takes in JSON: keys and names have no control
 * bytes, so only '"' and '\\' grow. */
static size_t
stats_json_len(const char *s, size_t n)
{
	size_t	len = n + 3;

	for (size_t i = 0; i < n; i++)
		len += s[i] == '"' || s[i] == '\\';
	return len;
}

static bool
stats_wait_len(void *arg, const char *key, size_t keylen)
{
	size_t	*w = arg;

	if (w[1]++ < KL_CLIENTS_WAIT_KEYS)
		w[0] += stats_json_len(key, keylen);
	return true;
}

struct stats_clients *
stats_clients_new(size_t max, size_t budget)
{
	struct stats_clients	*l;

	if ((l = calloc(1, sizeof(*l))) == NULL)
		return NULL;
	if ((l->list = json_array()) == NULL) {
		free(l);
		return NULL;
	}
	l->max = max;
	l->budget = budget;
	return l;
}

static bool
stats_wait_key(void *arg, const char *key, size_t keylen)
{
	return json_array_append_new(arg, json_stringn(key, keylen)) == 0;
}

/* CLIENTS lists the first few keys a client waits for and counts them
 * all, so that one entry stays small (security review M5). */
struct wait_keys {
	json_t	*keys;
	size_t	 n;
};

static bool
stats_wait_key_capped(void *arg, const char *key, size_t keylen)
{
	struct wait_keys	*w = arg;

	if (w->n++ < KL_CLIENTS_WAIT_KEYS)
		return stats_wait_key(w->keys, key, keylen);
	return true;
}

void
stats_clients_add(struct stats_clients *l, const struct stats_client *c,
    uint64_t now_ms)
{
	struct wait_keys	 wk;
	json_t		*o, *keys;
	uint64_t	 since = 0;
	bool		 waiting = false;

	size_t			 w[2] = { 0, 0 }, est;

	if (l == NULL)
		return;
	if (l->total++ >= l->max || l->failed || l->full)
		return;
	/* The entry's size, about, before it is made: the list stops where
	 * the budget would be passed, and "total" still counts every one. */
	for (size_t i = 0; i <= c->nchans; i++)
		locktable_owner_wait_walk(i == 0 ? c->owner : c->chans[i - 1],
		    stats_wait_len, w, NULL);
	est = 256 + w[0] + stats_json_len(c->peer, strlen(c->peer)) +
	    (c->name != NULL ? stats_json_len(c->name, strlen(c->name)) : 0);
	if (l->bytes + est > l->budget) {
		l->full = true;
		return;
	}
	l->bytes += est;
	if ((o = json_object()) == NULL || (keys = json_array()) == NULL) {
		json_decref(o);
		l->failed = true;
		return;
	}
	SET_U(o, "id", c->id);
	json_object_set_new(o, "name", c->name != NULL ?
	    json_string(c->name) : json_null());
	json_object_set_new(o, "user", c->user != NULL ?
	    json_string(c->user) : json_null());
	json_object_set_new(o, "transport", json_string(c->transport));
	json_object_set_new(o, "peer", json_string(c->peer));
	if (c->uid >= 0) {
		SET_U(o, "uid", (uint64_t)c->uid);
		SET_U(o, "pid", (uint64_t)c->pid);
	}
	SET_U(o, "age_ms", c->age_ms);
	if (c->detached_ms >= 0)
		SET_U(o, "detached_ms", (uint64_t)c->detached_ms);
	SET_U(o, "channels", c->channels);
	SET_U(o, "held", c->held);
	wk.keys = keys;
	wk.n = 0;
	/* every channel's wait, channel 0's first: the keys in request
	 * order, channel by channel; the longest wait's time */
	for (size_t i = 0; i <= c->nchans; i++) {
		uint64_t	at;

		if (locktable_owner_wait_walk(i == 0 ? c->owner :
		    c->chans[i - 1], stats_wait_key_capped, &wk, &at) &&
		    (!waiting || at < since)) {
			since = at;
			waiting = true;
		}
	}
	if (waiting) {
		SET_U(o, "waited_ms", now_ms - since);
		if (wk.n > KL_CLIENTS_WAIT_KEYS)
			SET_U(o, "waiting_keys", wk.n);
	}
	json_object_set_new(o, "waiting_for", keys);
	if (json_array_append_new(l->list, o) != 0)
		l->failed = true;
}

void
stats_clients_nomem(struct stats_clients *l)
{
	if (l != NULL)
		l->failed = true;
}

char *
stats_clients_json(struct stats_clients *l)
{
	json_t	*o;

	if (l == NULL)
		return NULL;
	if (l->failed || (o = json_object()) == NULL) {
		json_decref(l->list);
		free(l);
		return NULL;
	}
	SET_U(o, "total", l->total);
	json_object_set_new(o, "clients", l->list);
	free(l);
	return stats_dump(o);
}

/* ---- RESUME ---- */

struct resume_walk {
	json_t		*held;
	json_t		*grant;		/* the entry of token, or NULL */
	uint64_t	 token;
	bool		 failed;
};

static bool
stats_resume_hold(void *arg, const struct lt_own_view *v)
{
	struct resume_walk	*w = arg;
	json_t			*keys;

	if (w->grant == NULL || v->token != w->token) {
		if ((w->grant = json_object()) == NULL ||
		    json_array_append_new(w->held, w->grant) != 0) {
			w->failed = true;
			return false;
		}
		w->token = v->token;
		json_object_set_new(w->grant, "keys", json_array());
		SET_U(w->grant, "token", v->token);
		json_object_set_new(w->grant, "mode",
		    json_string(stats_mode(v->mode)));
		SET_U(w->grant, "limit", v->limit);
		json_object_set_new(w->grant, "ttl_ms", v->expires_in_ms > 0 ?
		    json_integer((json_int_t)v->expires_in_ms) : json_null());
	}
	keys = json_object_get(w->grant, "keys");
	if (keys == NULL || json_array_append_new(keys,
	    json_stringn(v->key, v->keylen)) != 0) {
		w->failed = true;
		return false;
	}
	return true;
}

/* What owner o holds and waits for, into obj's "held" and "waiting";
 * false on no memory. */
static bool
stats_resume_owner(json_t *obj, const struct locktable *lt,
    const struct lt_owner *o, uint64_t now_ms)
{
	struct resume_walk	 w;
	json_t			*waiting = NULL, *keys;
	enum lt_mode		 mode;
	uint32_t		 limit;

	memset(&w, 0, sizeof(w));
	w.held = json_array();
	json_object_set_new(obj, "held", w.held);
	if (w.held != NULL)
		locktable_owner_hold_walk(lt, o, now_ms, stats_resume_hold,
		    &w);
	if (locktable_owner_wait_mode(o, &mode, &limit)) {
		waiting = json_object();
		keys = json_array();
		json_object_set_new(waiting, "keys", keys);
		locktable_owner_wait_walk(o, stats_wait_key, keys, NULL);
		json_object_set_new(waiting, "mode",
		    json_string(stats_mode(mode)));
		SET_U(waiting, "limit", limit);
	}
	json_object_set_new(obj, "waiting", waiting != NULL ? waiting :
	    json_null());
	return w.held != NULL && !w.failed;
}

char *
stats_resume_json(const struct locktable *lt, const struct lt_owner *o,
    const char *id, size_t idlen, uint64_t grace_ms, uint64_t now_ms,
    const struct lt_owner *const *chans, size_t nch)
{
	json_t	*obj, *list, *ch;
	bool	 ok;

	if ((obj = json_object()) == NULL)
		return NULL;
	json_object_set_new(obj, "session", json_stringn(id, idlen));
	SET_U(obj, "grace_ms", grace_ms);
	ok = stats_resume_owner(obj, lt, o, now_ms);
	list = json_array();
	json_object_set_new(obj, "channels", list);
	ok = ok && list != NULL;
	for (size_t i = 0; ok && i < nch; i++) {
		ok = (ch = json_object()) != NULL &&
		    json_array_append_new(list, ch) == 0;
		if (ok) {
			SET_U(ch, "channel", owner_channel(chans[i]));
			ok = stats_resume_owner(ch, lt, chans[i], now_ms);
		}
	}
	if (!ok) {
		json_decref(obj);
		return NULL;
	}
	return stats_dump(obj);
}
