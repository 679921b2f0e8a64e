/*
 * keylock-bench: a load generator for keylockd. SPDX-License-Identifier: MIT
 *
 * The report of a run: text for people, or one JSON object (--json) for
 * scripts such as bench/compare.sh. Latencies are printed in milliseconds
 * from the histograms' nanoseconds; rates are per second of the run.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "keylock-bench.h"

double
bench_secs(const struct bench *b)
{
	uint64_t	end = b->t_end != 0 ? b->t_end : bench_now();

	return b->t_start != 0 && end > b->t_start ?
	    (double)(end - b->t_start) / 1e9 : 0.0;
}

static double
bench_ms(uint64_t ns)
{
	return round((double)ns / 1e3) / 1e3;
}

static json_t *
bench_hist_json(const struct bhist *h, uint64_t fails)
{
	json_t	*o = json_object();

	json_object_set_new(o, "count", json_integer((json_int_t)h->count));
	json_object_set_new(o, "failed", json_integer((json_int_t)fails));
	json_object_set_new(o, "mean", json_real(bench_ms(
	    (uint64_t)bhist_mean(h))));
	json_object_set_new(o, "p50", json_real(bench_ms(
	    bhist_percentile(h, 50))));
	json_object_set_new(o, "p90", json_real(bench_ms(
	    bhist_percentile(h, 90))));
	json_object_set_new(o, "p99", json_real(bench_ms(
	    bhist_percentile(h, 99))));
	json_object_set_new(o, "p99.9", json_real(bench_ms(
	    bhist_percentile(h, 99.9))));
	json_object_set_new(o, "max", json_real(bench_ms(h->max)));
	return o;
}

static json_t *
bench_mem_json(const struct bench *b, uint64_t n, const char *per)
{
	const struct bench_mem	*m = &b->mem;
	json_t			*o = json_object();
	bool			 redis = b->o.proto == BENCH_REDIS;

	if (m->have_rss) {
		json_object_set_new(o, "rss_before", json_integer(
		    (json_int_t)m->rss_before));
		json_object_set_new(o, "rss_after", json_integer(
		    (json_int_t)m->rss_after));
		json_object_set_new(o, per, json_real(n > 0 ? round(
		    ((double)m->rss_after - (double)m->rss_before) /
		    (double)n * 10) / 10 : 0));
	}
	if (m->have_used) {
		json_object_set_new(o, redis ? "used_memory_before" :
		    "table_bytes_before", json_integer(
		    (json_int_t)m->used_before));
		json_object_set_new(o, redis ? "used_memory_after" :
		    "table_bytes_after", json_integer(
		    (json_int_t)m->used_after));
		json_object_set_new(o, redis ? "used_memory_per_key" :
		    "table_bytes_per_key", json_real(
		    n > 0 ? round(((double)m->used_after -
		    (double)m->used_before) / (double)n * 10) / 10 : 0));
	}
	return o;
}

/* --session=MS, as "MS ms". */
static const char *
bench_grace(const struct bench_opts *o)
{
	static char	buf[32];

	snprintf(buf, sizeof(buf), "%" PRId64 " ms", o->session_grace_ms);
	return buf;
}

static json_t *
bench_json(const struct bench *b)
{
	const struct bench_opts	*o = &b->o;
	json_t			*root = json_object(), *lat = json_object();
	double			 s = bench_secs(b);

	json_object_set_new(root, "server", json_string(o->server));
	json_object_set_new(root, "protocol", json_string(o->proto ==
	    BENCH_REDIS ? "redis" : o->proto == BENCH_ETCD ? "etcd" :
	    "keylock"));
	json_object_set_new(root, "workload", json_string(
	    bench_work_name(o->work)));
	if (o->proto == BENCH_REDIS)
		json_object_set_new(root, "redis_unlock", json_string(
		    o->redis_script ? "script" : "del"));
	json_object_set_new(root, "connections", json_integer(o->conns));
	if (o->channels > 0)
		json_object_set_new(root, "channels_over", json_integer(
		    o->channels));
	json_object_set_new(root, "pipeline", json_integer(o->pipeline));
	json_object_set_new(root, "keyspace", json_integer(
	    (json_int_t)o->keyspace));
	json_object_set_new(root, "keys_per_lock", json_integer(
	    o->keys_per_lock));
	json_object_set_new(root, "sources", json_integer(o->sources));
	if (o->work == WORK_REFRESH || o->ttl_ms > 0)
		json_object_set_new(root, "ttl_ms", json_integer(
		    (json_int_t)(o->work == WORK_REFRESH ? b->refresh_ttl_ms :
		    o->ttl_ms)));
	if (o->session) {
		json_object_set_new(root, "session_grace_ms", o->session_grace_ms
		    > 0 ? json_integer((json_int_t)o->session_grace_ms) :
		    json_null());
		json_object_set_new(root, "sessions", json_integer(
		    (json_int_t)b->sessions));
	}
	json_object_set_new(root, "ok", json_boolean(b->status == 0));
	if (b->status != 0)
		json_object_set_new(root, "failure", json_string(b->failure));
	json_object_set_new(root, "seconds", json_real(s));
	json_object_set_new(root, "cycles", json_integer(
	    (json_int_t)b->cycles));
	json_object_set_new(root, "requests", json_integer(
	    (json_int_t)b->requests));
	json_object_set_new(root, "cycles_per_s", json_real(s > 0 ?
	    round((double)b->cycles / s) : 0));
	json_object_set_new(root, "requests_per_s", json_real(s > 0 ?
	    round((double)b->requests / s) : 0));
	if (o->proto == BENCH_ETCD && b->etcd_rev_after > b->etcd_rev_before) {
		int64_t w = b->etcd_rev_after - b->etcd_rev_before;

		json_object_set_new(root, "etcd_writes", json_integer(w));
		json_object_set_new(root, "etcd_writes_per_cycle", json_real(
		    b->cycles > 0 ? round((double)w / (double)b->cycles *
		    100) / 100 : 0));
	}
	json_object_set_new(root, "lock_failures", json_integer(
	    (json_int_t)b->lock_failures));
	json_object_set_new(root, "retries", json_integer(
	    (json_int_t)b->retries));
	json_object_set_new(root, "errors", json_integer(
	    (json_int_t)b->errors));
	if (b->first_error[0] != '\0')
		json_object_set_new(root, "first_error", json_string(
		    b->first_error));
	if (b->all_hist.count > 0)
		json_object_set_new(lat, "all", bench_hist_json(&b->all_hist,
		    0));
	for (int t = 0; t < RT_MAX; t++)
		if (b->hist[t].count > 0)
			json_object_set_new(lat, bench_rt_name((enum bench_rt)t),
			    bench_hist_json(&b->hist[t], b->fail[t]));
	json_object_set_new(root, "latency_ms", lat);
	return root;
}

static void
bench_json_extra(const struct bench *b, json_t *root)
{
	json_t	*o;

	if (b->nholders > 0) {
		o = bench_mem_json(b, b->held_keys, "rss_per_key");
		json_object_set_new(o, "keys", json_integer(
		    (json_int_t)b->held_keys));
		json_object_set_new(o, "connections", json_integer(
		    b->nholders));
		json_object_set_new(o, "seconds", json_real(b->t_hold_end >
		    b->t_hold_start ? (double)(b->t_hold_end -
		    b->t_hold_start) / 1e9 : 0));
		json_object_set_new(root, "hold", o);
	}
	if (b->o.work == WORK_IDLE) {
		o = bench_mem_json(b, (uint64_t)b->nwork, "rss_per_conn");
		json_object_set_new(o, "connections", json_integer(b->nwork));
		json_object_set_new(root, "idle", o);
	}
	if (b->o.work == WORK_SEED) {
		o = json_object();
		json_object_set_new(o, "operations", json_integer(
		    (json_int_t)b->cycles));
		json_object_set_new(o, "keys", json_integer(
		    (json_int_t)b->o.keyspace));
		json_object_set_new(o, "hold_ms", json_integer(b->o.hold_ms));
		json_object_set_new(o, "elapsed_s", json_real(bench_secs(b)));
		json_object_set_new(o, "overlaps", json_integer(
		    (json_int_t)b->seed_overlaps));
		json_object_set_new(o, "token_errors", json_integer(
		    (json_int_t)b->seed_token_errors));
		json_object_set_new(o, "first_grant_ms", json_real(bench_ms(
		    b->seed_first_grant)));
		json_object_set_new(o, "locks_written_ms", json_real(bench_ms(
		    b->seed_locks_written)));
		json_object_set_new(o, "handoff_ms", bench_hist_json(
		    &b->seed_handoff, 0));
		json_object_set_new(o, "hold_overrun_ms", bench_hist_json(
		    &b->seed_overrun, 0));
		json_object_set_new(root, "seed", o);
	}
}

static void
bench_print_hist(const char *name, const struct bhist *h)
{
	printf("  %-10s %10" PRIu64 " %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n",
	    name, h->count, bhist_mean(h) / 1e6,
	    bench_ms(bhist_percentile(h, 50)),
	    bench_ms(bhist_percentile(h, 90)),
	    bench_ms(bhist_percentile(h, 99)),
	    bench_ms(bhist_percentile(h, 99.9)), bench_ms(h->max));
}

static void
bench_print_mem(const struct bench *b, uint64_t n, const char *what)
{
	const struct bench_mem	*m = &b->mem;

	if (m->have_rss)
		printf("  server RSS %+.1f MiB: %.1f bytes per %s\n",
		    ((double)m->rss_after - (double)m->rss_before) / 1048576,
		    n > 0 ? ((double)m->rss_after - (double)m->rss_before) /
		    (double)n : 0, what);
	if (m->have_used)
		printf("  %s %+.1f MiB: %.1f bytes per %s\n",
		    b->o.proto == BENCH_REDIS ? "Redis used_memory" :
		    "keylockd table_bytes",
		    ((double)m->used_after - (double)m->used_before) /
		    1048576, n > 0 ? ((double)m->used_after -
		    (double)m->used_before) / (double)n : 0, what);
}

static void
bench_print(const struct bench *b)
{
	const struct bench_opts	*o = &b->o;
	double			 s = bench_secs(b), hs;

	printf("%s on %s at %s: %d %s, pipeline %d, keyspace %"
	    PRIu64 "\n", bench_work_name(o->work), o->proto == BENCH_REDIS ?
	    (o->redis_script ? "Redis (SET NX PX + EVALSHA)" :
	    "Redis (SET NX PX + DEL)") : o->proto == BENCH_ETCD ?
	    "etcd (/v3/lock/lock + /v3/lock/unlock)" : "keylockd", o->server,
	    o->conns, o->channels > 0 ? "clients" : "connections",
	    o->pipeline, o->keyspace);
	if (o->channels > 0)
		printf("  the %d clients are channels of %d connection%s\n",
		    o->conns, o->channels, o->channels > 1 ? "s" : "");
	if (o->work == WORK_REFRESH)
		printf("  each client keeps a lock of its own (refresh:N) "
		    "with REFRESH ttl=%" PRId64 "\n", b->refresh_ttl_ms);
	if (o->session)
		printf("  %" PRIu64 " sessions (grace %s%s)\n", b->sessions,
		    o->session_grace_ms > 0 ? "" : "the server's",
		    o->session_grace_ms > 0 ? bench_grace(o) : "");
	if (b->nholders > 0) {
		hs = b->t_hold_end > b->t_hold_start ? (double)(b->t_hold_end -
		    b->t_hold_start) / 1e9 : 0;
		printf("  held %" PRIu64 " keys on %d %s in %.2f s\n",
		    b->held_keys, b->nholders, o->channels > 0 &&
		    o->work == WORK_HOLD ? "channels" : "connections", hs);
		bench_print_mem(b, b->held_keys, "key");
	}
	if (o->work == WORK_IDLE) {
		printf("  %d idle connections\n", b->nwork);
		bench_print_mem(b, (uint64_t)b->nwork, "connection");
	}
	if (o->work == WORK_SEED)
		printf("  seed: %" PRIu64 " operations of %d ms on %" PRIu64
		    " keys finished in %.4f s; %" PRIu64 " overlaps, %" PRIu64
		    " token errors\n", b->cycles, o->hold_ms, o->keyspace, s,
		    b->seed_overlaps, b->seed_token_errors);
	if (o->work == WORK_SEED)
		printf("  seed: first grant after %.3f ms, last LOCK written "
		    "after %.3f ms; hand-off (UNLOCK written to the next "
		    "grant read) p50 %.3f ms, p90 %.3f ms; hold past %d ms "
		    "p50 %.3f ms, p90 %.3f ms\n", bench_ms(b->seed_first_grant),
		    bench_ms(b->seed_locks_written),
		    bench_ms(bhist_percentile(&b->seed_handoff, 50)),
		    bench_ms(bhist_percentile(&b->seed_handoff, 90)),
		    o->hold_ms, bench_ms(bhist_percentile(&b->seed_overrun, 50)),
		    bench_ms(bhist_percentile(&b->seed_overrun, 90)));
	if (o->work != WORK_HOLD)
		printf("  %.3f s: %" PRIu64 " cycles (%.0f/s), %" PRIu64
		    " requests (%.0f/s)\n", s, b->cycles, s > 0 ?
		    (double)b->cycles / s : 0, b->requests, s > 0 ?
		    (double)b->requests / s : 0);
	if (o->proto == BENCH_ETCD && b->etcd_rev_after > b->etcd_rev_before)
		printf("  etcd writes: %" PRId64 " revisions, %.2f per cycle\n",
		    b->etcd_rev_after - b->etcd_rev_before, b->cycles > 0 ?
		    (double)(b->etcd_rev_after - b->etcd_rev_before) /
		    (double)b->cycles : 0);
	if (b->lock_failures > 0 || b->retries > 0 || b->errors > 0)
		printf("  %" PRIu64 " locks refused, %" PRIu64 " retries, %"
		    PRIu64 " error replies%s%s\n", b->lock_failures,
		    b->retries, b->errors, b->first_error[0] != '\0' ?
		    "; first: " : "", b->first_error);
	printf("  %-10s %10s %9s %9s %9s %9s %9s %9s\n", "latency ms",
	    "count", "mean", "p50", "p90", "p99", "p99.9", "max");
	for (int t = 0; t < RT_MAX; t++)
		if (b->hist[t].count > 0)
			bench_print_hist(bench_rt_name((enum bench_rt)t), &b->hist[t]);
	if (b->all_hist.count > 0)
		bench_print_hist("all", &b->all_hist);
}

void
bench_report(const struct bench *b)
{
	json_t	*root;
	char	*s;

	if (b->tick != NULL)
		printf("\r\033[K");
	if (!b->o.json) {
		bench_print(b);
		return;
	}
	root = bench_json(b);
	bench_json_extra(b, root);
	s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
	    JSON_REAL_PRECISION(9));
	if (s != NULL) {
		printf("%s\n", s);
		free(s);
	}
	json_decref(root);
}

