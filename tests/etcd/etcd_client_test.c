/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Tests of the etcd client (src/etcd/etcd.h) against a real, private 3-member
 * etcd cluster on loopback (tests/etcd/cluster.sh), never a mock: the
 * pure helpers here, unary calls in etcd_client_kv.c, the watch in
 * etcd_client_watch.c, and member kills, stops and timeouts in
 * etcd_client_faults.c. The cluster is started once in main, since a
 * start costs seconds; each test works under a key prefix of its own and
 * each fault test leaves every member running and healthy.
 */
#include <sys/time.h>

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "check_main.h"
#include "etcd_test.h"

struct ec		 t_ec;
struct event_base	*t_base;
struct etcd		*t_e;
char			 t_prefix[64];
size_t			 t_prefixlen;

static uint64_t
now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct etcd *
t_client(const char *endpoints, int timeout_ms, int conns, size_t max_queue)
{
	struct etcd_opts	 o = { .conns = conns, .timeout_ms = timeout_ms,
	    .max_queue = max_queue };
	const char		*why = NULL;
	struct etcd		*e = etcd_new(t_base, endpoints, &o, &why);

	ck_assert_msg(e != NULL, "etcd_new(%s): %s", endpoints,
	    why != NULL ? why : "?");
	return e;
}

void
t_setup(void)
{
	t_base = event_base_new();
	ck_assert_ptr_nonnull(t_base);
	t_e = t_client(t_ec.endpoints, 3000, 4, 0);
	t_prefixlen = (size_t)snprintf(t_prefix, sizeof(t_prefix), "t%ld/",
	    (long)getpid());
}

void
t_teardown(void)
{
	etcd_free(t_e);
	t_e = NULL;
	event_base_free(t_base);
	t_base = NULL;
}

const char *
t_key(const char *name)
{
	static char	buf[4][256];
	static int	i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%s%s", t_prefix, name);
	return buf[i];
}

void
res_cb(void *arg, const struct etcd_result *r)
{
	struct res *x = arg;

	ck_assert_msg(!x->done, "a callback ran twice");
	x->done = true;
	x->at_ms = now_ms();
	x->status = r->status;
	x->grpc_code = r->grpc_code;
	snprintf(x->msg, sizeof(x->msg), "%s", r->message != NULL ?
	    r->message : "");
	snprintf(x->endpoint, sizeof(x->endpoint), "%s", r->endpoint != NULL ?
	    r->endpoint : "");
	x->revision = r->revision;
	x->count = r->count;
	x->deleted = r->deleted;
	x->lease_id = r->lease_id;
	x->ttl = r->ttl;
	x->succeeded = r->succeeded;
	x->more = r->more;
	x->nkvs = r->nkvs;
	for (size_t i = 0; i < r->nkvs && i < T_KVS_MAX; i++) {
		struct res_kv		*d = &x->kvs[i];
		const struct etcd_kv	*s = &r->kvs[i];

		ck_assert_uint_lt(s->keylen, sizeof(d->key));
		ck_assert_uint_lt(s->valuelen, sizeof(d->value));
		memcpy(d->key, s->key, s->keylen);
		d->key[s->keylen] = '\0';
		d->keylen = s->keylen;
		memcpy(d->value, s->value, s->valuelen);
		d->value[s->valuelen] = '\0';
		d->valuelen = s->valuelen;
		d->create_revision = s->create_revision;
		d->mod_revision = s->mod_revision;
		d->version = s->version;
		d->lease = s->lease;
	}
}

bool
t_run_until(const bool *flag, int ms)
{
	uint64_t	deadline = now_ms() + (uint64_t)ms;
	struct timeval	tick = { 0, 20000 };

	while (!*flag) {
		if (now_ms() >= deadline)
			return false;
		event_base_loopexit(t_base, &tick);
		event_base_loop(t_base, EVLOOP_ONCE);
	}
	return true;
}

void
t_run_for(int ms)
{
	bool never = false;

	t_run_until(&never, ms);
}

void
t_wait_ok(struct res *r, const char *what)
{
	ck_assert_msg(t_run_until(&r->done, T_WAIT_MS), "%s: no result", what);
	ck_assert_msg(r->status == ETCD_OK, "%s: %s (%d): %s", what,
	    etcd_status_name(r->status), r->grpc_code, r->msg);
}

int64_t
t_put(const char *key, const char *value)
{
	struct res r = { 0 };

	ck_assert_ptr_nonnull(etcd_put(t_e, key, strlen(key), value,
	    strlen(value), 0, 0, res_cb, &r));
	t_wait_ok(&r, "put");
	return r.revision;
}

int64_t
t_del(const char *key)
{
	struct res r = { 0 };

	ck_assert_ptr_nonnull(etcd_deleterange(t_e, key, strlen(key), NULL, 0,
	    0, res_cb, &r));
	t_wait_ok(&r, "delete");
	return r.revision;
}

static void
wrec_events(void *arg, const struct etcd_event *ev, size_t n, int64_t hrev)
{
	struct wrec *w = arg;

	w->batches++;
	for (size_t i = 0; i < n; i++) {
		if (w->nev > 0 &&
		    ev[i].kv.mod_revision < w->ev[w->nev - 1].mod_revision)
			w->order_broken = true;
		if (w->nev == T_EVENTS_MAX)
			continue;
		w->ev[w->nev].is_delete = ev[i].is_delete;
		snprintf(w->ev[w->nev].key, sizeof(w->ev[0].key), "%.*s",
		    (int)ev[i].kv.keylen, ev[i].kv.key);
		snprintf(w->ev[w->nev].value, sizeof(w->ev[0].value), "%.*s",
		    (int)ev[i].kv.valuelen, ev[i].kv.value);
		w->ev[w->nev].mod_revision = ev[i].kv.mod_revision;
		w->ev[w->nev].create_revision = ev[i].kv.create_revision;
		w->ev[w->nev].version = ev[i].kv.version;
		w->ev[w->nev].batch = w->batches;
		w->nev++;
	}
	ck_assert_int_ge(hrev, ev[n - 1].kv.mod_revision);
	if (w->stop_in_cb)
		etcd_watch_stop(w->e);
}

static void
wrec_created(void *arg, int64_t rev)
{
	struct wrec *w = arg;

	w->created++;
	w->created_revision = rev;
}

static void
wrec_compacted(void *arg, int64_t rev)
{
	struct wrec *w = arg;

	w->compacted++;
	w->compact_revision = rev;
}

static void
wrec_down(void *arg, enum etcd_status st, const char *why)
{
	struct wrec *w = arg;

	w->down++;
}

const struct etcd_watch_cbs wrec_cbs = {
	.events = wrec_events,
	.created = wrec_created,
	.compacted = wrec_compacted,
	.down = wrec_down
};

/* The pure helpers: no cluster needed. */

START_TEST(b64_round_trips_every_length_and_byte)
{
	char	src[300], enc[420], dec[300];

	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (char)(i * 37 + 11);
	for (size_t len = 0; len < sizeof(src); len++) {
		size_t	n = etcd_b64_encode(src, len, enc);

		ck_assert_uint_eq(n, 4 * ((len + 2) / 3));
		ck_assert_uint_eq(strlen(enc), n);
		ck_assert_int_eq(etcd_b64_decode(enc, n, dec), (long)len);
		ck_assert_mem_eq(src, dec, len);
	}
}
END_TEST

START_TEST(b64_matches_rfc4648_vectors_and_refuses_garbage)
{
	static const char *const v[][2] = {
		{ "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" },
		{ "foo", "Zm9v" }, { "foob", "Zm9vYg==" },
		{ "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" }
	};
	char	buf[16];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		etcd_b64_encode(v[i][0], strlen(v[i][0]), buf);
		ck_assert_str_eq(buf, v[i][1]);
	}
	ck_assert_int_eq(etcd_b64_decode("Zm9v!", 5, buf), -1);
	ck_assert_int_eq(etcd_b64_decode("Z", 1, buf), -1);
	ck_assert_int_eq(etcd_b64_decode("Zm9vYg", 6, buf), 4);
}
END_TEST

START_TEST(prefix_end_increments_the_last_byte_below_ff)
{
	char	out[8];

	ck_assert_uint_eq(etcd_prefix_end("keylock/", 8, out), 8);
	ck_assert_mem_eq(out, "keylock0", 8);
	ck_assert_uint_eq(etcd_prefix_end("a\xff\xff", 3, out), 1);
	ck_assert_mem_eq(out, "b", 1);
	ck_assert_uint_eq(etcd_prefix_end("\xff", 1, out), 1);
	ck_assert_mem_eq(out, "\0", 1);
}
END_TEST

START_TEST(endpoint_lists_are_checked)
{
	static const char *const bad[] = {
		"", "ftp://127.0.0.1:2379", "127.0.0.1", "http://:2379",
		"http://127.0.0.1:2379/v3", "http://127.0.0.1:2379,",
		"http://127.0.0.1:99999", "http://u@127.0.0.1:2379"
	};
	struct event_base	*base = event_base_new();
	const char		*why;
	struct etcd		*e;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why = NULL;
		e = etcd_new(base, bad[i], NULL, &why);
		ck_assert_msg(e == NULL, "accepted \"%s\"", bad[i]);
		ck_assert_ptr_nonnull(why);
	}
	e = etcd_new(base, "127.0.0.1:2379, http://[::1]:2380/", NULL, &why);
	ck_assert_ptr_nonnull(e);
	ck_assert_uint_eq(etcd_nendpoints(e), 2);
	ck_assert_str_eq(etcd_endpoint(e, 0), "http://127.0.0.1:2379");
	ck_assert_str_eq(etcd_endpoint(e, 1), "http://[::1]:2380");
	ck_assert_str_eq(etcd_current_endpoint(e), "http://127.0.0.1:2379");
	etcd_free(e);
	e = etcd_new(base, "https://127.0.0.1:2379", NULL, &why);
	ck_assert_msg(e != NULL, "https: %s", why);
	ck_assert_str_eq(etcd_endpoint(e, 0), "https://127.0.0.1:2379");
	etcd_free(e);
	event_base_free(base);
}
END_TEST

/* TLS files are read by etcd_new(): one that is missing, or a CA or a
 * certificate without https, is refused with its name. */
START_TEST(tls_files_are_checked_at_creation)
{
	struct event_base	*base = event_base_new();
	struct etcd_opts	 o = { .ca_file = "/nonexistent/ca.pem" };
	const char		*why = NULL;
	struct etcd		*e;

	e = etcd_new(base, "https://127.0.0.1:2379", &o, &why);
	ck_assert_ptr_null(e);
	ck_assert_msg(why != NULL && strstr(why, "/nonexistent/ca.pem") !=
	    NULL, "%s", why != NULL ? why : "-");
	e = etcd_new(base, "http://127.0.0.1:2379", &o, &why);
	ck_assert_ptr_null(e);
	ck_assert_msg(strstr(why, "https") != NULL, "%s", why);
	o.ca_file = NULL;
	o.cert_file = "/nonexistent/cert.pem";
	e = etcd_new(base, "https://127.0.0.1:2379", &o, &why);
	ck_assert_ptr_null(e);
	ck_assert_msg(strstr(why, "key") != NULL, "%s", why);
	event_base_free(base);
}
END_TEST

Suite *
etcd_pure_suite(void)
{
	Suite	*s = suite_create("etcd_pure");
	TCase	*tc = tcase_create("helpers");

	tcase_add_test(tc, b64_round_trips_every_length_and_byte);
	tcase_add_test(tc, b64_matches_rfc4648_vectors_and_refuses_garbage);
	tcase_add_test(tc, prefix_end_increments_the_last_byte_below_ff);
	tcase_add_test(tc, endpoint_lists_are_checked);
	tcase_add_test(tc, tls_files_are_checked_at_creation);
	suite_add_tcase(s, tc);
	return s;
}

static void
t_init(const char *name)
{
	if (ec_start(&t_ec, 3) != 0)
		exit(1);
	fprintf(stderr, "%s: etcd cluster %s\n", name, t_ec.endpoints);
}

static void
t_done(void)
{
	ec_down(&t_ec);
}

const struct check_program check_program = {
	.name = "etcd_client_test",
	.init = t_init,
	.done = t_done,
	.suites = { etcd_pure_suite, etcd_kv_suite, etcd_watch_suite,
	    etcd_fault_suite, etcd_hostile_suite, NULL }
};
