/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The etcd client's watch against the real cluster: events in revision
 * order with a transaction's events together, history from an old
 * revision, nothing from outside the prefix, a compacted revision, a
 * restart that neither loses nor repeats an event, and a stop from
 * inside a callback.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "etcd_test.h"

static struct wrec	*w;

static void
w_setup(void)
{
	t_setup();
	w = calloc(1, sizeof(*w));
	w->e = t_e;
}

static void
w_teardown(void)
{
	free(w);
	t_teardown();
}

static void
watch_from(int64_t rev)
{
	ck_assert_int_eq(etcd_watch_start(t_e, t_prefix, t_prefixlen, rev,
	    &wrec_cbs, w), 0);
}

static void
wait_events(size_t n)
{
	for (int i = 0; i < T_WAIT_MS / 20 && w->nev < n; i++)
		t_run_for(20);
	ck_assert_msg(w->nev >= n, "%zu events of %zu", w->nev, n);
}

static void
wait_created(int n)
{
	for (int i = 0; i < T_WAIT_MS / 20 && w->created < n; i++)
		t_run_for(20);
	ck_assert_int_ge(w->created, n);
}

START_TEST(events_come_in_revision_order_a_txn_together)
{
	int64_t		 rev = t_put(t_key("start"), "s");
	struct etcd_txn	*t = etcd_txn_new();
	struct res	 r = { 0 };

	watch_from(rev + 1);
	wait_created(1);
	ck_assert(etcd_watch_is_up(t_e));
	t_put(t_key("a"), "1");
	t_put(t_key("b"), "2");
	t_del(t_key("a"));
	for (int i = 0; i < 3; i++) {
		char k[8];

		snprintf(k, sizeof(k), "t%d", i);
		etcd_txn_put(t, true, t_key(k), strlen(t_key(k)), "x", 1, 0);
	}
	etcd_txn(t_e, t, 0, res_cb, &r);
	t_wait_ok(&r, "txn");
	wait_events(6);
	ck_assert_uint_eq(w->nev, 6);
	ck_assert(!w->order_broken);
	ck_assert_str_eq(w->ev[0].key, t_key("a"));
	ck_assert_str_eq(w->ev[0].value, "1");
	ck_assert(!w->ev[0].is_delete);
	ck_assert_int_eq(w->ev[0].mod_revision, rev + 1);
	ck_assert_int_eq(w->ev[1].mod_revision, rev + 2);
	ck_assert(w->ev[2].is_delete);	/* "type":"DELETE" */
	ck_assert_str_eq(w->ev[2].key, t_key("a"));
	ck_assert_int_eq(w->ev[2].mod_revision, rev + 3);
	for (int i = 3; i < 6; i++) {
		ck_assert_int_eq(w->ev[i].mod_revision, r.revision);
		ck_assert_int_eq(w->ev[i].create_revision, r.revision);
		ck_assert_uint_eq(w->ev[i].batch, w->ev[3].batch);
	}
	ck_assert_int_eq(etcd_watch_next_revision(t_e), r.revision + 1);
	ck_assert_int_eq(w->down, 0);
}
END_TEST

START_TEST(a_watch_from_an_old_revision_replays_history)
{
	int64_t	r1 = t_put(t_key("h"), "1");

	t_put(t_key("h"), "2");
	t_put(t_key("h"), "3");
	watch_from(r1);
	wait_events(3);
	ck_assert_str_eq(w->ev[0].value, "1");
	ck_assert_str_eq(w->ev[2].value, "3");
	ck_assert_int_eq(w->ev[2].version, 3);
	ck_assert_int_eq(w->ev[2].create_revision, r1);
}
END_TEST

START_TEST(keys_outside_the_prefix_are_not_seen)
{
	char	 other[64];
	int64_t	 rev;

	/* the prefix's last byte plus one: just past its range */
	snprintf(other, sizeof(other), "%.*s0x", (int)t_prefixlen - 1,
	    t_prefix);
	rev = t_put(other, "no");
	watch_from(rev);
	t_put(t_key("in"), "yes");
	wait_events(1);
	t_run_for(100);
	ck_assert_uint_eq(w->nev, 1);
	ck_assert_str_eq(w->ev[0].value, "yes");
}
END_TEST

START_TEST(a_compacted_start_revision_ends_the_watch_with_compacted)
{
	int64_t		 r1 = t_put(t_key("k"), "1");
	int64_t		 r2 = t_put(t_key("k"), "2");
	json_t		*b = json_object();
	struct res	 r = { 0 };
	char		 rev[24];

	snprintf(rev, sizeof(rev), "%lld", (long long)r2);
	json_object_set_new(b, "revision", json_string(rev));
	ck_assert_ptr_nonnull(etcd_post(t_e, "/v3/kv/compaction", b, 0, res_cb,
	    &r));
	t_wait_ok(&r, "compaction");
	watch_from(r1);
	for (int i = 0; i < T_WAIT_MS / 20 && w->compacted == 0; i++)
		t_run_for(20);
	ck_assert_int_eq(w->compacted, 1);
	ck_assert_int_eq(w->compact_revision, r2);
	ck_assert_uint_eq(w->nev, 0);
	ck_assert(!etcd_watch_is_up(t_e));
	/* over: later writes are not delivered */
	t_put(t_key("k"), "3");
	t_run_for(200);
	ck_assert_uint_eq(w->nev, 0);
	/* a new start from the compacted revision on works */
	watch_from(r2 + 1);
	wait_events(1);
	ck_assert_str_eq(w->ev[0].value, "3");
}
END_TEST

START_TEST(a_restart_neither_loses_nor_repeats_an_event)
{
	int64_t	rev = t_put(t_key("s"), "0");
	char	v[8];

	watch_from(rev + 1);
	wait_created(1);
	for (int i = 1; i <= 5; i++) {
		snprintf(v, sizeof(v), "%d", i);
		t_put(t_key("s"), v);
	}
	wait_events(5);
	etcd_watch_restart(t_e);
	for (int i = 6; i <= 10; i++) {
		snprintf(v, sizeof(v), "%d", i);
		t_put(t_key("s"), v);
	}
	wait_events(10);
	wait_created(2);
	t_run_for(200);
	ck_assert_uint_eq(w->nev, 10);
	for (int i = 0; i < 10; i++) {
		snprintf(v, sizeof(v), "%d", i + 1);
		ck_assert_str_eq(w->ev[i].value, v);
		ck_assert_int_eq(w->ev[i].mod_revision, rev + 1 + i);
	}
}
END_TEST

START_TEST(a_stop_from_inside_the_callback_ends_the_callbacks)
{
	int64_t		 rev = t_put(t_key("x"), "0");
	struct etcd_txn	*t = etcd_txn_new();
	struct res	 r = { 0 };

	w->stop_in_cb = true;
	watch_from(rev + 1);
	wait_created(1);
	t_put(t_key("x"), "1");
	wait_events(1);
	t_put(t_key("x"), "2");
	etcd_txn_put(t, true, t_key("y"), strlen(t_key("y")), "3", 1, 0);
	etcd_txn(t_e, t, 0, res_cb, &r);
	t_wait_ok(&r, "txn");
	t_run_for(300);
	ck_assert_uint_eq(w->nev, 1);
	ck_assert_uint_eq(w->batches, 1);
	ck_assert(!etcd_watch_is_up(t_e));
}
END_TEST

Suite *
etcd_watch_suite(void)
{
	Suite	*s = suite_create("etcd_watch");
	TCase	*tc = tcase_create("watch");

	tcase_add_checked_fixture(tc, w_setup, w_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, events_come_in_revision_order_a_txn_together);
	tcase_add_test(tc, a_watch_from_an_old_revision_replays_history);
	tcase_add_test(tc, keys_outside_the_prefix_are_not_seen);
	tcase_add_test(tc,
	    a_compacted_start_revision_ends_the_watch_with_compacted);
	tcase_add_test(tc, a_restart_neither_loses_nor_repeats_an_event);
	tcase_add_test(tc, a_stop_from_inside_the_callback_ends_the_callbacks);
	suite_add_tcase(s, tc);
	return s;
}
