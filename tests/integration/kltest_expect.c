/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The harness's asserting layer (kltest.h), for a test's main thread:
 * connect, send and expect a reply (an exact line, a prefix, ERR CODE, a
 * token, JSON, silence, EOF), read STATS and INFO, and poll them until a
 * deadline. A failure names the caller's file and line, what was sent and
 * what came back.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "kltest.h"

struct kt_conn *
kt_connect_at(const char *file, int line, const struct kt_daemon *d,
    enum kt_transport t)
{
	struct kt_conn	*c;

	if (d == NULL)
		kt_fail_at(file, line, "no daemon to connect to");
	c = kt_conn_open(d, t, kt_ms(KT_REPLY_MS));
	if (c == NULL) {
		if (t == KT_UNIX)
			kt_fail_at(file, line, "connect to unix %s: %s",
			    d->sock, strerror(errno));
		kt_fail_at(file, line, "connect to %s:%d: %s", d->host,
		    d->port, strerror(errno));
	}
	return c;
}

void
kt_send_raw_at(const char *file, int line, struct kt_conn *c,
    const void *buf, size_t len)
{
	if (kt_conn_send(c, buf, len, kt_ms(10000)) != 0)
		kt_fail_at(file, line, "%s: sending \"%s\": %s", c->label,
		    c->lastsent, strerror(errno));
}

void
kt_send_at(const char *file, int line, struct kt_conn *c, const char *fmt,
    ...)
{
	char	*p = NULL;
	va_list	 ap;
	int	 n;

	va_start(ap, fmt);
	n = vasprintf(&p, fmt, ap);
	va_end(ap);
	if (n < 0)
		kt_fail_at(file, line, "out of memory");
	{
		char *q = realloc(p, (size_t)n + 2);

		if (q == NULL)
			kt_fail_at(file, line, "out of memory");
		p = q;
	}
	p[n] = '\n';
	p[n + 1] = '\0';
	if (kt_conn_send(c, p, (size_t)n + 1, kt_ms(10000)) != 0) {
		int err = errno;

		free(p);
		kt_fail_at(file, line, "%s: sending \"%s\": %s", c->label,
		    c->lastsent, strerror(err));
	}
	free(p);
}

static const char *
kt_read_result(struct kt_conn *c, enum kt_read r)
{
	static _Thread_local char buf[200];

	switch (r) {
	case KT_TIMEOUT:
		if (c->len > c->off)
			snprintf(buf, sizeof(buf), "no complete line (partial: "
			    "\"%s\")", kt_esc(c->buf + c->off,
			    c->len - c->off));
		else
			snprintf(buf, sizeof(buf), "no reply (timeout)");
		break;
	case KT_EOF:
		snprintf(buf, sizeof(buf), "connection closed by the "
		    "server%s%s", c->err ? ": " : "",
		    c->err ? strerror(c->err) : "");
		break;
	default:
		snprintf(buf, sizeof(buf), "read error: %s", strerror(c->err));
		break;
	}
	return buf;
}

const char *
kt_recv_at(const char *file, int line, struct kt_conn *c, int64_t timeout_ms)
{
	enum kt_read r = kt_conn_readline(c, timeout_ms);

	if (r != KT_LINE)
		kt_fail_at(file, line, "%s: after sending \"%s\": %s within "
		    "%lld ms", c->label, c->lastsent, kt_read_result(c, r),
		    (long long)timeout_ms);
	return c->line;
}

void
kt_expect_line_at(const char *file, int line, struct kt_conn *c,
    const char *expect)
{
	kt_recv_at(file, line, c, kt_ms(KT_REPLY_MS));
	if (!kt_line_is(c, expect))
		kt_fail_at(file, line, "%s: sent \"%s\": expected \"%s\", got "
		    "\"%s\"", c->label, c->lastsent, expect,
		    kt_esc(c->line, c->linelen));
}

const char *
kt_expect_prefix_at(const char *file, int line, struct kt_conn *c,
    const char *prefix)
{
	kt_recv_at(file, line, c, kt_ms(KT_REPLY_MS));
	if (!kt_line_has_prefix(c, prefix))
		kt_fail_at(file, line, "%s: sent \"%s\": expected a line "
		    "starting \"%s\", got \"%s\"", c->label, c->lastsent,
		    prefix, kt_esc(c->line, c->linelen));
	return c->line;
}

const char *
kt_expect_err_at(const char *file, int line, struct kt_conn *c,
    const char *code)
{
	kt_recv_at(file, line, c, kt_ms(KT_REPLY_MS));
	if (!kt_line_is_err(c, code))
		kt_fail_at(file, line, "%s: sent \"%s\": expected \"ERR %s "
		    "<text>\", got \"%s\"", c->label, c->lastsent, code,
		    kt_esc(c->line, c->linelen));
	return c->line;
}

uint64_t
kt_expect_token_at(const char *file, int line, struct kt_conn *c)
{
	uint64_t token;

	kt_recv_at(file, line, c, kt_ms(KT_REPLY_MS));
	if (!kt_line_token(c, &token))
		kt_fail_at(file, line, "%s: sent \"%s\": expected \"OK "
		    "<token>\", got \"%s\"", c->label, c->lastsent,
		    kt_esc(c->line, c->linelen));
	return token;
}

void
kt_expect_silence_at(const char *file, int line, struct kt_conn *c,
    int64_t ms)
{
	enum kt_read r = kt_conn_readline(c, ms);

	if (r == KT_LINE)
		kt_fail_at(file, line, "%s: after \"%s\": expected no reply "
		    "within %lld ms, got \"%s\"", c->label, c->lastsent,
		    (long long)ms, kt_esc(c->line, c->linelen));
	if (r != KT_TIMEOUT)
		kt_fail_at(file, line, "%s: after \"%s\": expected no reply "
		    "within %lld ms: %s", c->label, c->lastsent, (long long)ms,
		    kt_read_result(c, r));
	if (c->len > c->off)
		kt_fail_at(file, line, "%s: after \"%s\": expected nothing "
		    "within %lld ms, got partial \"%s\"", c->label, c->lastsent,
		    (long long)ms, kt_esc(c->buf + c->off, c->len - c->off));
}

void
kt_expect_eof_at(const char *file, int line, struct kt_conn *c, int64_t ms)
{
	enum kt_read r = kt_conn_readline(c, ms);

	if (r == KT_LINE)
		kt_fail_at(file, line, "%s: after \"%s\": expected the server "
		    "to close the connection, got \"%s\"", c->label,
		    c->lastsent, kt_esc(c->line, c->linelen));
	if (r == KT_TIMEOUT)
		kt_fail_at(file, line, "%s: after \"%s\": expected the server "
		    "to close the connection within %lld ms: %s", c->label,
		    c->lastsent, (long long)ms, kt_read_result(c, r));
	if (c->len > c->off)
		kt_fail_at(file, line, "%s: closed after a partial line \"%s\"",
		    c->label, kt_esc(c->buf + c->off, c->len - c->off));
}

json_t *
kt_expect_json_at(const char *file, int line, struct kt_conn *c)
{
	char	 why[200];
	json_t	*o;

	kt_recv_at(file, line, c, kt_ms(KT_REPLY_MS));
	o = kt_parse_ok_json(c->line, c->linelen, why, sizeof(why));
	if (o == NULL)
		kt_fail_at(file, line, "%s: sent \"%s\": expected \"OK "
		    "{json}\": %s; got \"%s\"", c->label, c->lastsent, why,
		    kt_esc(c->line, c->linelen));
	return o;
}

json_int_t
kt_jint_at(const char *file, int line, const json_t *o, const char *member)
{
	json_t	*v = json_object_get(o, member);
	char	*dump;

	if (!json_is_integer(v)) {
		dump = json_dumps(o, JSON_COMPACT);
		kt_fail_at(file, line, "member \"%s\" is %s, want a JSON "
		    "integer, in %s", member, v == NULL ? "missing" :
		    "not an integer", dump != NULL ? kt_esc(dump,
		    strlen(dump)) : "?");
	}
	return json_integer_value(v);
}

json_t *
kt_stats_at(const char *file, int line, struct kt_conn *c)
{
	kt_send_at(file, line, c, "STATS");
	return kt_expect_json_at(file, line, c);
}

json_int_t
kt_stat_at(const char *file, int line, struct kt_conn *c, const char *member)
{
	json_t		*o = kt_stats_at(file, line, c);
	json_int_t	 v = kt_jint_at(file, line, o, member);

	json_decref(o);
	return v;
}

void
kt_wait_stat_at(const char *file, int line, struct kt_conn *c,
    const char *member, json_int_t value, int64_t ms)
{
	uint64_t	deadline = kt_now_ms() + (uint64_t)kt_ms(ms);
	json_int_t	v;

	for (;;) {
		v = kt_stat_at(file, line, c, member);
		if (v == value)
			return;
		if (kt_now_ms() > deadline)
			break;
		kt_sleep_ms(5);		/* polling interval */
	}
	kt_fail_at(file, line, "STATS \"%s\" is %lld, want %lld (waited %lld "
	    "ms)", member, (long long)v, (long long)value,
	    (long long)kt_ms(ms));
}

json_t *
kt_info_at(const char *file, int line, struct kt_conn *c, const char *key)
{
	kt_send_at(file, line, c, "INFO %s", key);
	return kt_expect_json_at(file, line, c);
}

json_t *
kt_wait_queue_at(const char *file, int line, struct kt_conn *c,
    const char *key, size_t nholders, size_t nwaiters)
{
	uint64_t	 deadline = kt_now_ms() + (uint64_t)kt_ms(5000);
	char		 why[200], last[600] = "";

	for (;;) {
		json_t	*o;
		size_t	 h = 0, w = 0;

		kt_send_at(file, line, c, "INFO %s", key);
		kt_recv_at(file, line, c, kt_ms(KT_REPLY_MS));
		snprintf(last, sizeof(last), "%s", kt_esc(c->line, c->linelen));
		o = kt_parse_ok_json(c->line, c->linelen, why, sizeof(why));
		/* keylockd-protocol(7) leaves INFO of a key not in the table open:
		 * an ERR reply reads as no holders and no waiters. */
		if (o == NULL && !kt_line_has_prefix(c, "ERR "))
			kt_fail_at(file, line, "INFO %s: %s: \"%s\"", key, why,
			    last);
		if (o != NULL) {
			json_t *hs = json_object_get(o, "holders");
			json_t *ws = json_object_get(o, "waiters");

			if (!json_is_array(hs) || !json_is_array(ws))
				kt_fail_at(file, line, "INFO %s: holders "
				    "and waiters must be arrays: \"%s\"", key,
				    last);
			h = json_array_size(hs);
			w = json_array_size(ws);
		}
		if (h == nholders && w == nwaiters)
			return o;
		json_decref(o);
		if (kt_now_ms() > deadline)
			break;
		kt_sleep_ms(2);		/* polling interval */
	}
	kt_fail_at(file, line, "INFO %s never showed %zu holders and %zu "
	    "waiters within %lld ms; last \"%s\"", key, nholders, nwaiters,
	    (long long)kt_ms(5000), last);
}
