/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend local: the lock table of this process, its fencing tokens on
 * disk and the one timer of its ttl expiries. Every operation is applied
 * at once and answered BE_DONE, except a LOCK that has to wait: its grant
 * arrives through the table's granted hook, while the table serves someone
 * else, and goes on to hooks.done.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "backend.h"
#include "clock.h"
#include "config.h"
#include "locktable.h"
#include "log.h"
#include "token.h"
#include "util.h"

struct backend_local {
	struct backend		 be;		/* first: the seam's view */
	struct locktable	*lt;
	struct token		*tokens;
	struct be_hooks		 hooks;
	struct event		*expiry;	/* the earliest ttl */
	uint64_t		 expiry_at;	/* UINT64_MAX: not armed */
};

static struct backend_local *
bl_of(struct backend *be)
{
	return (struct backend_local *)be;
}

static void
bl_granted(void *arg, struct lt_owner *o, uint64_t token, uint64_t waited)
{
	struct backend_local	*bl = arg;
	struct be_result	 r;

	memset(&r, 0, sizeof(r));
	r.op = BE_LOCK;
	r.value = token;
	bl->hooks.done(bl->hooks.arg, o, &r);
}

static void
bl_expired(void *arg, struct lt_owner *o)
{
	struct backend_local	*bl = arg;

	if (bl->hooks.released != NULL)
		bl->hooks.released(bl->hooks.arg, o);
}

/* The table issues a whole durable block of tokens without a call. */
static uint64_t
bl_reserve_tokens(void *arg, uint64_t *end)
{
	struct backend_local	*bl = arg;

	return token_reserve(bl->tokens, end);
}

static struct lt_owner *
bl_owner_new(struct backend *be, uint64_t id, void *udata)
{
	return locktable_owner_new(bl_of(be)->lt, id, udata);
}

static void
bl_owner_free(struct backend *be, struct lt_owner *o, uint64_t now_ms)
{
	locktable_owner_free(bl_of(be)->lt, o, now_ms);
}

static bool
bl_owner_idle(const struct backend *be, const struct lt_owner *o)
{
	(void)be;
	return locktable_owner_nholds(o) == 0 &&
	    !locktable_owner_is_waiting(o);
}

static void
bl_seal(struct backend *be, struct lt_owner *o)
{
	(void)be;
	locktable_owner_seal(o);
}

static enum be_status
bl_acquire(struct backend *be, struct lt_owner *o, const struct lt_acquire *a,
    uint64_t now_ms, struct be_result *r)
{
	struct locktable	*lt = bl_of(be)->lt;
	bool			 granted;
	struct lt_key_view	 v;

	r->op = BE_LOCK;
	if (!token_ready(bl_of(be)->tokens, now_ms)) {
		r->err = KL_ERR_BACKEND;
		r->text = "the fencing-token mark cannot be written to the "
		    "state directory";
		return BE_DONE;
	}
	r->err = locktable_acquire(lt, o, a, now_ms, &granted, &r->value,
	    &r->why);
	if (r->err == KL_OK)
		return granted ? BE_DONE : BE_PENDING;
	/* what a refusal's text names (commands.c) */
	r->limit = a->limit;
	r->max_waiters = a->max_waiters;
	if (r->err == KL_ERR_CONFLICT) {
		locktable_key_view(locktable_find(lt, r->why.key,
		    r->why.keylen), &v);
		r->key_limit = v.limit;
	}
	return BE_DONE;
}

/* NOTHELD names the key at bad. */
static void
bl_bad_key(struct be_result *r, enum kl_err err, const char *const *keys,
    const size_t *keylens, size_t bad)
{
	r->err = err;
	if (err == KL_ERR_NOTHELD) {
		r->why.key = keys[bad];
		r->why.keylen = keylens[bad];
	}
}

static enum be_status
bl_release(struct backend *be, struct lt_owner *o, const char *const *keys,
    const size_t *keylens, size_t nkeys, uint64_t now_ms,
    struct be_result *r)
{
	size_t		n = 0, bad = 0;
	enum kl_err	err;

	r->op = BE_UNLOCK;
	err = locktable_release(bl_of(be)->lt, o, keys, keylens, nkeys, now_ms,
	    &n, &bad);
	bl_bad_key(r, err, keys, keylens, bad);
	r->value = n;
	return BE_DONE;
}

static enum be_status
bl_release_owner(struct backend *be, struct lt_owner *o, uint64_t now_ms,
    struct be_result *r)
{
	r->op = BE_UNLOCKALL;
	r->err = KL_OK;
	r->value = locktable_release_owner(bl_of(be)->lt, o, now_ms,
	    LT_WHY_UNLOCK);
	return BE_DONE;
}

static enum be_status
bl_refresh(struct backend *be, struct lt_owner *o, const char *const *keys,
    const size_t *keylens, size_t nkeys, uint64_t ttl_ms, uint64_t now_ms,
    struct be_result *r)
{
	size_t		n = 0, bad = 0;
	enum kl_err	err;

	r->op = BE_REFRESH;
	err = locktable_refresh(bl_of(be)->lt, o, keys, keylens, nkeys, ttl_ms,
	    now_ms, &n, &bad);
	bl_bad_key(r, err, keys, keylens, bad);
	r->value = n;
	return BE_DONE;
}

static enum be_status
bl_withdraw(struct backend *be, struct lt_owner *o, enum lt_why why,
    uint64_t now_ms, struct be_result *r)
{
	struct locktable	*lt = bl_of(be)->lt;

	r->op = BE_LOCK;
	r->err = KL_OK;
	r->value = 0;
	if (!locktable_wait_blocker(lt, o, now_ms, &r->why))
		return BE_DONE;
	if (r->why.nwaiters > 0)
		r->why.nwaiters--;	/* not counting the one leaving */
	/* The blocker's key stays valid: the withdrawn request was not the
	 * last user of a key that is blocked by someone else. */
	locktable_withdraw(lt, o, now_ms, why);
	r->value = 1;
	r->err = why == LT_WHY_TIMEOUT ? KL_ERR_TIMEOUT :
	    why == LT_WHY_CANCEL ? KL_ERR_CANCELLED : KL_ERR_SHUTDOWN;
	return BE_DONE;
}

static const struct locktable *
bl_table(const struct backend *be)
{
	return ((const struct backend_local *)be)->lt;
}

static void
bl_freeze(struct backend *be)
{
	locktable_freeze(bl_of(be)->lt);
}

static void
bl_expiry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct backend_local	*bl = arg;

	bl->expiry_at = UINT64_MAX;
	locktable_expire(bl->lt, kl_now_ms());
	bl->hooks.end_turn(bl->hooks.arg);
}

static void
bl_end_turn(struct backend *be)
{
	struct backend_local	*bl = bl_of(be);
	uint64_t		 next = locktable_next_expiry(bl->lt), now, d;
	struct timeval		 tv;

	if (next >= bl->expiry_at)
		return;
	now = kl_now_ms();
	d = next > now ? next - now : 0;
	tv.tv_sec = (time_t)(d / 1000);
	tv.tv_usec = (suseconds_t)(d % 1000) * 1000;
	evtimer_add(bl->expiry, &tv);
	bl->expiry_at = next;
}

static void
bl_free(struct backend *be)
{
	struct backend_local	*bl = bl_of(be);

	locktable_free(bl->lt);
	token_close(bl->tokens);
	if (bl->expiry != NULL)
		event_free(bl->expiry);
	kl_free(bl);
}

static const struct backend_ops bl_ops = {
	.name = "local",
	.owner_new = bl_owner_new,
	.owner_free = bl_owner_free,
	.owner_idle = bl_owner_idle,
	.seal = bl_seal,
	.acquire = bl_acquire,
	.release = bl_release,
	.release_owner = bl_release_owner,
	.refresh = bl_refresh,
	.withdraw = bl_withdraw,
	.table = bl_table,
	.freeze = bl_freeze,
	.end_turn = bl_end_turn,
	.free = bl_free,
};

struct backend *
backend_local_new(const struct config *cfg, struct event_base *base,
    const struct be_hooks *hooks, char *err, size_t errlen)
{
	struct backend_local	*bl;
	struct lt_hooks		 lh;
	uint64_t		 seed;

	if ((bl = kl_calloc(1, sizeof(*bl))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	bl->be.ops = &bl_ops;
	if (hooks->counters != NULL)
		hooks->counters->ready = 1;	/* always serving */
	bl->hooks = *hooks;
	bl->expiry_at = UINT64_MAX;
	if ((bl->tokens = token_open(cfg->state_dir, err, errlen)) == NULL) {
		kl_free(bl);
		return NULL;
	}
	kl_random(&seed, sizeof(seed));
	lh.granted = bl_granted;
	lh.next_token = NULL;
	lh.arg = bl;
	lh.expired = bl_expired;
	if ((bl->lt = locktable_new(&lh, seed)) == NULL ||
	    (bl->expiry = evtimer_new(base, bl_expiry_cb, bl)) == NULL) {
		snprintf(err, errlen, "out of memory");
		bl_free(&bl->be);
		return NULL;
	}
	locktable_reserve_tokens(bl->lt, bl_reserve_tokens);
	log_info("backend local: state in %s, next fencing token %" PRIu64,
	    cfg->state_dir, token_peek(bl->tokens));
	return &bl->be;
}

struct locktable *
backend_local_table(struct backend *be)
{
	return be->ops == &bl_ops ? bl_of(be)->lt : NULL;
}

uint64_t
backend_local_next_token(const struct backend *be)
{
	return token_peek(((const struct backend_local *)be)->tokens);
}

bool
backend_local_token_recheck(struct backend *be, char *err, size_t errlen)
{
	return token_recheck(bl_of(be)->tokens, err, errlen);
}
