/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unary calls of the etcd client against the real cluster: put, range
 * (single key, prefix, limit, count, an old revision), deleterange,
 * transactions (one revision for all their puts, compares, etcd's own
 * refusals), leases, the bounded queue and cancellation.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "etcd_test.h"

static void
range_prefix(struct res *r, const char *prefix, int64_t rev, int64_t limit,
    bool count_only)
{
	char			end[256];
	size_t			plen = strlen(prefix);
	struct etcd_range	rg = {
		.key = prefix, .keylen = plen, .end = end,
		.endlen = etcd_prefix_end(prefix, plen, end),
		.revision = rev, .limit = limit, .count_only = count_only
	};

	memset(r, 0, sizeof(*r));
	ck_assert_ptr_nonnull(etcd_range(t_e, &rg, ETCD_RETRY, res_cb, r));
	t_wait_ok(r, "range");
}

START_TEST(put_then_range_returns_the_value_and_revisions)
{
	int64_t			rev = t_put(t_key("a"), "hello");
	struct res		r = { 0 };
	struct etcd_range	rg = { .key = t_key("a"),
	    .keylen = strlen(t_key("a")) };

	ck_assert_int_gt(rev, 0);
	ck_assert_ptr_nonnull(etcd_range(t_e, &rg, 0, res_cb, &r));
	t_wait_ok(&r, "range");
	ck_assert_uint_eq(r.nkvs, 1);
	ck_assert_int_eq(r.count, 1);
	ck_assert_str_eq(r.kvs[0].key, t_key("a"));
	ck_assert_str_eq(r.kvs[0].value, "hello");
	ck_assert_int_eq(r.kvs[0].create_revision, rev);
	ck_assert_int_eq(r.kvs[0].mod_revision, rev);
	ck_assert_int_eq(r.kvs[0].version, 1);
	ck_assert_int_ge(r.revision, rev);
	ck_assert_str_ne(r.endpoint, "");
}
END_TEST

START_TEST(absent_key_gives_no_kvs_and_count_zero)
{
	struct res		r = { 0 };
	struct etcd_range	rg = { .key = t_key("none"),
	    .keylen = strlen(t_key("none")) };

	ck_assert_ptr_nonnull(etcd_range(t_e, &rg, 0, res_cb, &r));
	t_wait_ok(&r, "range");
	ck_assert_uint_eq(r.nkvs, 0);
	ck_assert_int_eq(r.count, 0);
	ck_assert(!r.more);
}
END_TEST

START_TEST(binary_keys_and_values_survive_base64)
{
	char		key[64], val[200];
	struct res	r = { 0 };
	size_t		klen = (size_t)snprintf(key, sizeof(key), "%sb", t_prefix);

	key[klen++] = '\0';
	key[klen++] = '\xff';
	key[klen++] = '\n';
	for (size_t i = 0; i < sizeof(val); i++)
		val[i] = (char)(255 - i);
	ck_assert_ptr_nonnull(etcd_put(t_e, key, klen, val, sizeof(val), 0, 0,
	    res_cb, &r));
	t_wait_ok(&r, "put");

	struct etcd_range rg = { .key = key, .keylen = klen };

	memset(&r, 0, sizeof(r));
	ck_assert_ptr_nonnull(etcd_range(t_e, &rg, 0, res_cb, &r));
	t_wait_ok(&r, "range");
	ck_assert_uint_eq(r.nkvs, 1);
	ck_assert_uint_eq(r.kvs[0].keylen, klen);
	ck_assert_mem_eq(r.kvs[0].key, key, klen);
	ck_assert_uint_eq(r.kvs[0].valuelen, sizeof(val));
	ck_assert_mem_eq(r.kvs[0].value, val, sizeof(val));
}
END_TEST

START_TEST(prefix_range_with_limit_sets_more_and_old_revision_reads_past)
{
	struct res	r;
	int64_t		rev1;

	t_put(t_key("p/1"), "one");
	rev1 = t_put(t_key("p/2"), "two");
	t_put(t_key("p/3"), "three");
	t_put(t_key("p0"), "outside");		/* just past the range */
	range_prefix(&r, t_key("p/"), 0, 0, false);
	ck_assert_uint_eq(r.nkvs, 3);
	ck_assert_str_eq(r.kvs[0].value, "one");
	ck_assert_str_eq(r.kvs[2].value, "three");
	range_prefix(&r, t_key("p/"), 0, 2, false);
	ck_assert_uint_eq(r.nkvs, 2);
	ck_assert(r.more);
	ck_assert_int_eq(r.count, 3);
	range_prefix(&r, t_key("p/"), 0, 0, true);
	ck_assert_uint_eq(r.nkvs, 0);
	ck_assert_int_eq(r.count, 3);
	range_prefix(&r, t_key("p/"), rev1, 0, false);
	ck_assert_uint_eq(r.nkvs, 2);
	ck_assert_int_eq(r.revision, rev1 + 2);
}
END_TEST

START_TEST(deleterange_of_a_prefix_counts_what_it_deleted)
{
	struct res	r = { 0 };
	char		end[64];
	const char	*p = t_key("d/");
	size_t		plen = strlen(p);

	t_put(t_key("d/1"), "x");
	t_put(t_key("d/2"), "x");
	ck_assert_ptr_nonnull(etcd_deleterange(t_e, p, plen, end,
	    etcd_prefix_end(p, plen, end), 0, res_cb, &r));
	t_wait_ok(&r, "deleterange");
	ck_assert_int_eq(r.deleted, 2);
	range_prefix(&r, p, 0, 0, true);
	ck_assert_int_eq(r.count, 0);
}
END_TEST

START_TEST(txn_puts_share_one_revision)
{
	struct etcd_txn	*t = etcd_txn_new();
	struct res	 r = { 0 };

	for (int i = 0; i < 5; i++) {
		char k[16];

		snprintf(k, sizeof(k), "x/%d", i);
		ck_assert_int_eq(etcd_txn_put(t, true, t_key(k), strlen(t_key(k)),
		    "v", 1, 0), 0);
	}
	ck_assert_uint_eq(etcd_txn_nops(t), 5);
	ck_assert_ptr_nonnull(etcd_txn(t_e, t, 0, res_cb, &r));
	t_wait_ok(&r, "txn");
	ck_assert(r.succeeded);

	int64_t rev = r.revision;

	range_prefix(&r, t_key("x/"), 0, 0, false);
	ck_assert_uint_eq(r.nkvs, 5);
	for (size_t i = 0; i < 5; i++)
		ck_assert_int_eq(r.kvs[i].create_revision, rev);
}
END_TEST

START_TEST(txn_compare_picks_the_branch)
{
	struct etcd_txn	*t;
	struct res	 r = { 0 };
	const char	*k = t_key("c");

	t_put(k, "1");
	/* version is 1: "version == 5" fails, the failure branch runs */
	t = etcd_txn_new();
	etcd_txn_compare(t, k, strlen(k), ETCD_CMP_VERSION, ETCD_CMP_EQUAL, 5);
	etcd_txn_put(t, true, k, strlen(k), "success", 7, 0);
	etcd_txn_put(t, false, k, strlen(k), "failure", 7, 0);
	ck_assert_ptr_nonnull(etcd_txn(t_e, t, 0, res_cb, &r));
	t_wait_ok(&r, "txn");
	ck_assert(!r.succeeded);	/* absent in the JSON: false */

	struct etcd_range rg = { .key = k, .keylen = strlen(k) };

	memset(&r, 0, sizeof(r));
	etcd_range(t_e, &rg, 0, res_cb, &r);
	t_wait_ok(&r, "range");
	ck_assert_str_eq(r.kvs[0].value, "failure");
	ck_assert_int_eq(r.kvs[0].version, 2);

	t = etcd_txn_new();
	etcd_txn_compare(t, k, strlen(k), ETCD_CMP_VERSION, ETCD_CMP_EQUAL, 2);
	etcd_txn_put(t, true, k, strlen(k), "success", 7, 0);
	memset(&r, 0, sizeof(r));
	etcd_txn(t_e, t, 0, res_cb, &r);
	t_wait_ok(&r, "txn");
	ck_assert(r.succeeded);
}
END_TEST

START_TEST(txn_refusals_carry_grpc_codes)
{
	struct etcd_txn	*t = etcd_txn_new();
	struct res	 r = { 0 };
	const char	*k = t_key("dup");

	/* a put and a delete of one key in one txn: refused */
	etcd_txn_put(t, true, k, strlen(k), "v", 1, 0);
	etcd_txn_delete(t, true, k, strlen(k), NULL, 0);
	ck_assert_ptr_nonnull(etcd_txn(t_e, t, 0, res_cb, &r));
	ck_assert(t_run_until(&r.done, T_WAIT_MS));
	ck_assert_int_eq(r.status, ETCD_ERR_GRPC);
	ck_assert_int_eq(r.grpc_code, ETCD_GRPC_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.msg, "duplicate key") != NULL, "%s", r.msg);

	/* over --max-txn-ops (128) */
	t = etcd_txn_new();
	for (int i = 0; i < 129; i++) {
		char kk[16];

		snprintf(kk, sizeof(kk), "many/%d", i);
		etcd_txn_put(t, true, t_key(kk), strlen(t_key(kk)), "v", 1, 0);
	}
	memset(&r, 0, sizeof(r));
	ck_assert_ptr_nonnull(etcd_txn(t_e, t, 0, res_cb, &r));
	ck_assert(t_run_until(&r.done, T_WAIT_MS));
	ck_assert_int_eq(r.status, ETCD_ERR_GRPC);
	ck_assert_int_eq(r.grpc_code, ETCD_GRPC_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.msg, "too many operations") != NULL, "%s",
	    r.msg);
}
END_TEST

START_TEST(lease_grant_keepalive_revoke_and_its_keys_go)
{
	struct res	r = { 0 };
	int64_t		id;
	const char	*k = t_key("leased");

	ck_assert_ptr_nonnull(etcd_lease_grant(t_e, 30, 0, 0, res_cb, &r));
	t_wait_ok(&r, "grant");
	id = r.lease_id;
	ck_assert_int_ne(id, 0);
	ck_assert_int_eq(r.ttl, 30);

	memset(&r, 0, sizeof(r));
	etcd_put(t_e, k, strlen(k), "v", 1, id, 0, res_cb, &r);
	t_wait_ok(&r, "put with lease");

	struct etcd_range rg = { .key = k, .keylen = strlen(k) };

	memset(&r, 0, sizeof(r));
	etcd_range(t_e, &rg, 0, res_cb, &r);
	t_wait_ok(&r, "range");
	ck_assert_int_eq(r.kvs[0].lease, id);

	memset(&r, 0, sizeof(r));
	ck_assert_ptr_nonnull(etcd_lease_keepalive(t_e, id, ETCD_RETRY, res_cb,
	    &r));
	t_wait_ok(&r, "keepalive");
	ck_assert_int_eq(r.lease_id, id);
	ck_assert_int_eq(r.ttl, 30);

	memset(&r, 0, sizeof(r));
	ck_assert_ptr_nonnull(etcd_lease_revoke(t_e, id, 0, res_cb, &r));
	t_wait_ok(&r, "revoke");

	memset(&r, 0, sizeof(r));
	etcd_lease_keepalive(t_e, id, 0, res_cb, &r);
	t_wait_ok(&r, "keepalive of a revoked lease");
	ck_assert_int_eq(r.ttl, 0);	/* absent TTL: the lease is gone */

	memset(&r, 0, sizeof(r));
	etcd_range(t_e, &rg, 0, res_cb, &r);
	t_wait_ok(&r, "range");
	ck_assert_uint_eq(r.nkvs, 0);

	memset(&r, 0, sizeof(r));
	etcd_lease_revoke(t_e, id, 0, res_cb, &r);
	ck_assert(t_run_until(&r.done, T_WAIT_MS));
	ck_assert_int_eq(r.status, ETCD_ERR_GRPC);
	ck_assert_int_eq(r.grpc_code, ETCD_GRPC_NOT_FOUND);
}
END_TEST

START_TEST(many_calls_share_the_pool_and_all_complete)
{
	enum { N = 200 };
	static struct res	r[N];
	size_t			done = 0;

	for (int i = 0; i < N; i++) {
		char k[16];

		snprintf(k, sizeof(k), "many/%d", i);
		memset(&r[i], 0, sizeof(r[i]));
		ck_assert_ptr_nonnull(etcd_put(t_e, t_key(k), strlen(t_key(k)),
		    "v", 1, 0, 0, res_cb, &r[i]));
	}
	ck_assert_uint_eq(etcd_pending(t_e), N);
	for (int i = 0; i < N; i++) {
		t_wait_ok(&r[i], "put");
		done++;
	}
	ck_assert_uint_eq(done, N);
	ck_assert_uint_eq(etcd_pending(t_e), 0);
}
END_TEST

START_TEST(a_full_queue_refuses_with_enobufs)
{
	struct etcd	*e = t_client(t_ec.endpoints, 3000, 1, 2);
	struct res	 r[4] = { { 0 } };

	/* one goes out at once, two wait, the fourth is refused */
	for (int i = 0; i < 3; i++)
		ck_assert_ptr_nonnull(etcd_put(e, t_key("q"), strlen(t_key("q")),
		    "v", 1, 0, 0, res_cb, &r[i]));
	errno = 0;
	ck_assert_ptr_null(etcd_put(e, t_key("q"), strlen(t_key("q")), "v", 1,
	    0, 0, res_cb, &r[3]));
	ck_assert_int_eq(errno, ENOBUFS);
	for (int i = 0; i < 3; i++)
		ck_assert(t_run_until(&r[i].done, T_WAIT_MS));
	ck_assert(!r[3].done);
	etcd_free(e);
}
END_TEST

START_TEST(canceled_calls_never_call_back)
{
	struct etcd		*e = t_client(t_ec.endpoints, 3000, 1, 0);
	struct res		 r[3] = { { 0 } };
	struct etcd_call	*c[3];

	for (int i = 0; i < 3; i++)
		c[i] = etcd_put(e, t_key("cx"), strlen(t_key("cx")), "v", 1, 0,
		    0, res_cb, &r[i]);
	etcd_cancel(c[0]);	/* in flight */
	etcd_cancel(c[1]);	/* queued */
	ck_assert(t_run_until(&r[2].done, T_WAIT_MS));
	ck_assert_int_eq(r[2].status, ETCD_OK);
	t_run_for(200);
	ck_assert(!r[0].done && !r[1].done);
	etcd_free(e);
}
END_TEST

START_TEST(free_ends_pending_calls_as_canceled)
{
	struct etcd	*e = t_client(t_ec.endpoints, 3000, 1, 0);
	struct res	 r[2] = { { 0 } };

	for (int i = 0; i < 2; i++)
		etcd_put(e, t_key("fx"), strlen(t_key("fx")), "v", 1, 0, 0,
		    res_cb, &r[i]);
	etcd_free(e);
	for (int i = 0; i < 2; i++) {
		ck_assert(r[i].done);
		ck_assert_int_eq(r[i].status, ETCD_ERR_CANCELED);
	}
}
END_TEST

START_TEST(generic_post_reaches_other_services)
{
	struct res	 r = { 0 };
	json_t		*b = json_object();

	ck_assert_ptr_nonnull(etcd_post(t_e, "/v3/maintenance/status", b, 0,
	    res_cb, &r));
	t_wait_ok(&r, "status");
	ck_assert_int_gt(r.revision, 0);
	memset(&r, 0, sizeof(r));
	ck_assert_ptr_nonnull(etcd_post(t_e, "/v3/no/such/thing", json_object(),
	    0, res_cb, &r));
	ck_assert(t_run_until(&r.done, T_WAIT_MS));
	ck_assert_int_ne(r.status, ETCD_OK);
}
END_TEST

Suite *
etcd_kv_suite(void)
{
	Suite	*s = suite_create("etcd_kv");
	TCase	*tc = tcase_create("kv");

	tcase_add_checked_fixture(tc, t_setup, t_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, put_then_range_returns_the_value_and_revisions);
	tcase_add_test(tc, absent_key_gives_no_kvs_and_count_zero);
	tcase_add_test(tc, binary_keys_and_values_survive_base64);
	tcase_add_test(tc,
	    prefix_range_with_limit_sets_more_and_old_revision_reads_past);
	tcase_add_test(tc, deleterange_of_a_prefix_counts_what_it_deleted);
	tcase_add_test(tc, txn_puts_share_one_revision);
	tcase_add_test(tc, txn_compare_picks_the_branch);
	tcase_add_test(tc, txn_refusals_carry_grpc_codes);
	tcase_add_test(tc, lease_grant_keepalive_revoke_and_its_keys_go);
	tcase_add_test(tc, many_calls_share_the_pool_and_all_complete);
	tcase_add_test(tc, a_full_queue_refuses_with_enobufs);
	tcase_add_test(tc, canceled_calls_never_call_back);
	tcase_add_test(tc, free_ends_pending_calls_as_canceled);
	tcase_add_test(tc, generic_post_reaches_other_services);
	suite_add_tcase(s, tc);
	return s;
}
