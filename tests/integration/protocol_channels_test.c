/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * keylockd-protocol(7), CHANNELS, sentence by sentence against a private
 * daemon: @N and its errors, a wait on one channel that holds up no
 * other, the order of one channel's replies, HELD, NOTHELD, DEADLOCK and
 * UNLOCKALL between channels of one connection and of two, CANCEL per
 * channel, the commands that belong to the connection, max-channels on
 * both sides of its limit, a close that releases every channel, INFO and
 * refusal texts that name client/channel, a thousand channels queued on
 * one key granted in FIFO order, and a session that keeps and gives back
 * every channel.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "protocol_util.h"

/* The next n lines of c, in any order, each starting with one of the
 * prefixes want[0..n), each prefix taken once. */
static void
pc_expect_any(struct kt_conn *c, size_t n, const char *const *want)
{
	bool	taken[16] = { false };

	ck_assert(n <= 16);
	for (size_t i = 0; i < n; i++) {
		size_t	j;

		kt_recv(c);
		for (j = 0; j < n; j++)
			if (!taken[j] && strncmp(c->line, want[j],
			    strlen(want[j])) == 0)
				break;
		ck_assert_msg(j < n, "unexpected reply \"%s\"", c->line);
		taken[j] = true;
	}
}

/* "@N OK TOKEN": the token. */
static uint64_t
pc_token(struct kt_conn *c, uint32_t chan)
{
	char		 want[24];
	size_t		 n;
	uint64_t	 t;

	kt_recv(c);
	n = (size_t)snprintf(want, sizeof(want), "@%u OK ", chan);
	ck_assert_msg(strncmp(c->line, want, n) == 0 &&
	    sscanf(c->line + n, "%lu", &t) == 1, "expected \"%s<token>\", "
	    "got \"%s\"", want, c->line);
	return t;
}

START_TEST(channel_numbers_and_what_a_channel_may_send)
{
	struct kt_conn	*c = kt_connect();
	char		*longline;
	json_t		*s;

	kt_req(c, "@1 OK PONG", "@1 PING");
	kt_req(c, "@4294967295 OK PONG", "@4294967295 PING");
	kt_req(c, "@1 OK PONG", "  @1\tping");	/* blanks around */
	kt_req(c, "@7 OK PONG", "@07 PING");
	kt_req_err(c, "SYNTAX", "@0 PING");
	kt_req_err(c, "SYNTAX", "@4294967296 PING");
	kt_req_err(c, "SYNTAX", "@x PING");
	kt_req_err(c, "SYNTAX", "@ PING");
	kt_req_err(c, "SYNTAX", "@-1 PING");
	kt_req_err(c, "SYNTAX", "@1PING");
	kt_req_err(c, "SYNTAX", "@+1 PING");
	/* An empty request on a channel is an empty line: no reply. */
	kt_send(c, "@9");
	kt_send(c, "@9   ");
	kt_req(c, "OK PONG", "PING");

	/* What belongs to the connection. */
	kt_send(c, "@1 AUTH secret");
	kt_expect_prefix(c, "@1 ERR SYNTAX ");
	kt_send(c, "@1 NAME worker");
	kt_expect_prefix(c, "@1 ERR SYNTAX ");
	kt_send(c, "@1 SESSION");
	kt_expect_prefix(c, "@1 ERR SYNTAX ");
	kt_send(c, "@1 RESUME AAAA");
	kt_expect_prefix(c, "@1 ERR SYNTAX ");
	kt_send(c, "@1 QUIT");
	kt_expect_prefix(c, "@1 ERR SYNTAX ");
	kt_send(c, "@1 CLIENTS");
	kt_expect_prefix(c, "@1 ERR SYNTAX ");
	kt_send(c, "@1 KILL 1");
	kt_expect_prefix(c, "@1 ERR SYNTAX ");
	kt_send(c, "@1 UPGRADE");	/* SYNTAX comes before AUTH */
	kt_expect_prefix(c, "@1 ERR SYNTAX ");
	/* What any channel may send. */
	kt_send(c, "@2 STATS");
	kt_expect_prefix(c, "@2 OK {\"version\":");
	kt_send(c, "@2 INFO nothing");
	kt_expect_prefix(c, "@2 OK {\"key\":\"nothing\"");
	kt_send(c, "@2 CANCEL");
	kt_expect_line(c, "@2 OK 0");
	/* Errors of a request keep its channel. */
	kt_send(c, "@3 LOCK a timeout=x");
	kt_expect_prefix(c, "@3 ERR SYNTAX ");
	kt_send(c, "@3 LOCK \x01");
	kt_expect_prefix(c, "@3 ERR BADKEY ");
	kt_send(c, "@3 FROB");
	kt_expect_prefix(c, "@3 ERR SYNTAX ");
	longline = pu_repeat("x", 5000);
	kt_send(c, "@3 LOCK %s", longline);
	kt_expect_prefix(c, "@3 ERR TOOLONG ");
	kt_send(c, "%s", longline);
	kt_expect_prefix(c, "ERR TOOLONG ");
	free(longline);
	kt_req(c, "@3 OK PONG", "@3 PING");
	/* Nothing held or waited for: no channel is left in use. */
	s = kt_stats(c);
	ck_assert_int_eq(kt_jint(s, "channels"), 0);
	ck_assert_int_eq(kt_jint(s, "keys"), 0);
	json_decref(s);
	kt_req(c, "OK", "QUIT");
	kt_expect_eof(c, kt_ms(1000));
}
END_TEST

/* keylockd-protocol(7), CHANNELS: "@ followed by anything else ... is ERR
 * SYNTAX on channel 0", and channel 0's replies come in its request
 * order: after the reply of the LOCK it waits for. */
START_TEST(a_line_with_a_bad_channel_waits_for_channel_0s_turn)
{
	struct kt_conn	*h = kt_connect(), *c = kt_connect();

	kt_lock(h, "LOCK bad@:x");
	kt_send(c, "LOCK bad@:x");
	kt_send(c, "@0 PING");
	kt_send(c, "@x PING");
	kt_send(c, "@0 CANCEL");	/* not a CANCEL: no channel */
	kt_send(c, "@5 PING");		/* channel 5 is free */
	kt_expect_line(c, "@5 OK PONG");
	kt_send(c, "PING");
	kt_expect_silence(c, kt_ms(200));
	kt_req(h, "OK 1", "UNLOCK bad@:x");
	kt_expect_prefix(c, "OK ");
	kt_expect_prefix(c, "ERR SYNTAX @0 is not a channel");
	kt_expect_prefix(c, "ERR SYNTAX @x is not a channel");
	kt_expect_prefix(c, "ERR SYNTAX @0 is not a channel");
	kt_expect_line(c, "OK PONG");
	kt_req(c, "OK 1", "UNLOCK bad@:x");
}
END_TEST

START_TEST(a_wait_on_one_channel_holds_up_no_other)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	uint64_t	 t0, t1, t2;

	t0 = kt_lock(a, "LOCK w:k");
	kt_send(b, "LOCK w:k");			/* channel 0 waits */
	kt_send(b, "PING");			/* and this waits behind it */
	kt_send(b, "@2 LOCK w:k");		/* channel 2 waits too */
	kt_send(b, "@2 PING");
	kt_send(b, "@1 LOCK w:j");		/* channel 1 does not wait */
	t1 = pc_token(b, 1);
	kt_req(b, "@1 OK PONG", "@1 PING");
	kt_req(b, "@1 OK 1", "@1 UNLOCK w:j");
	kt_expect_silence(b, 50);
	/* Grants in queue order; each channel's replies in its order. */
	kt_req(a, "OK 1", "UNLOCK w:k");
	t2 = kt_expect_token(b);
	ck_assert(t2 > t0 && t2 > t1);
	kt_expect_line(b, "OK PONG");
	/* The release grants channel 2: its reply and UNLOCK's come in
	 * either order, channel 2's PING after its grant. */
	kt_send(b, "UNLOCK w:k");
	pc_expect_any(b, 2, (const char *const []){ "OK 1", "@2 OK " });
	kt_expect_line(b, "@2 OK PONG");
	kt_req(b, "@2 OK 1", "@2 UNLOCK w:k");
	kt_wait_stat(b, "keys", 0);
	ck_assert_int_eq(kt_stat(b, "channels"), 0);
}
END_TEST

START_TEST(held_notheld_deadlock_and_unlockall_are_per_channel)
{
	struct kt_conn	*c = kt_connect(), *d = kt_connect(), *e;
	const char	*line;
	json_t		*info;
	json_int_t	 cid;

	kt_send(c, "@1 LOCK h:a");
	pc_token(c, 1);
	kt_send(c, "@1 LOCK h:a");
	line = kt_expect_prefix(c, "@1 ERR HELD ");
	ck_assert_msg(strstr(line, "this channel") != NULL, "%s", line);
	kt_send(c, "@3 UNLOCK h:a");
	kt_expect_prefix(c, "@3 ERR NOTHELD ");
	kt_send(c, "@2 LOCK h:b");
	pc_token(c, 2);
	/* Channel 2 waits for channel 1's h:a: not HELD, a wait. */
	kt_send(c, "@2 LOCK h:a timeout=20000");
	json_decref(kt_wait_queue(d, "h:a", 1, 1));
	/* Channel 1 asking for channel 2's h:b closes a cycle. */
	kt_send(c, "@1 LOCK h:b");
	line = kt_expect_prefix(c, "@1 ERR DEADLOCK ");
	info = kt_info(d, "h:a");
	cid = kt_jint(pu_jarr_at(info, "holders", 0), "client");
	json_decref(info);
	{
		char	who[48];

		snprintf(who, sizeof(who), "client %lld/2", (long long)cid);
		ck_assert_msg(strstr(line, who) != NULL, "\"%s\" names %s",
		    line, who);
	}
	/* INFO: the holder and the waiter with their channels. */
	info = kt_info(d, "h:a");
	ck_assert_int_eq(kt_jint(pu_jarr_at(info, "holders", 0), "channel"),
	    1);
	ck_assert_int_eq(kt_jint(pu_jarr_at(info, "waiters", 0), "channel"),
	    2);
	ck_assert_int_eq(kt_jint(pu_jarr_at(info, "waiters", 0), "client"),
	    cid);
	json_decref(info);
	kt_send(d, "TRYLOCK h:b");
	line = kt_expect_prefix(d, "ERR LOCKED ");
	ck_assert_msg(strstr(line, "/2") != NULL, "%s", line);
	/* UNLOCKALL of channel 1 releases its lock only; channel 2 gets it. */
	kt_send(c, "@1 LOCK h:c");
	pc_token(c, 1);
	kt_send(c, "@1 UNLOCKALL");
	pc_expect_any(c, 2, (const char *const []){ "@1 OK 2", "@2 OK " });
	info = kt_info(d, "h:b");
	ck_assert_int_eq(kt_jint(pu_jarr_at(info, "holders", 0), "channel"),
	    2);
	json_decref(info);
	kt_req(c, "@2 OK 2", "@2 UNLOCKALL");

	/* Between connections: channels are the graph's owners. */
	e = kt_connect();
	kt_send(d, "@5 LOCK h:x");
	pc_token(d, 5);
	kt_send(e, "@5 LOCK h:y");
	pc_token(e, 5);
	kt_send(d, "@5 LOCK h:y timeout=20000");
	json_decref(kt_wait_queue(c, "h:y", 1, 1));
	kt_send(e, "@5 LOCK h:x");
	kt_expect_prefix(e, "@5 ERR DEADLOCK ");
	kt_send(e, "@6 LOCK h:x timeout=0");	/* another channel: no cycle */
	kt_expect_prefix(e, "@6 ERR LOCKED ");
	kt_req(e, "@5 OK 1", "@5 UNLOCK h:y");
	pc_token(d, 5);
	kt_req(d, "@5 OK 2", "@5 UNLOCKALL");
	kt_wait_stat(c, "keys", 0);
	kt_wait_stat(c, "channels", 0);
}
END_TEST

START_TEST(cancel_withdraws_its_own_channel_only)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();

	kt_lock(a, "LOCK c:k");
	kt_send(b, "@1 LOCK c:k");
	kt_send(b, "@2 LOCK c:k");
	json_decref(kt_wait_queue(a, "c:k", 1, 2));
	kt_send(b, "@2 CANCEL");
	kt_expect_prefix(b, "@2 ERR CANCELLED ");
	kt_expect_line(b, "@2 OK 1");
	json_decref(kt_wait_queue(a, "c:k", 1, 1));
	kt_req(b, "@3 OK 0", "@3 CANCEL");
	kt_req(b, "OK 0", "CANCEL");
	kt_send(b, "@1 CANCEL");
	kt_expect_prefix(b, "@1 ERR CANCELLED ");
	kt_expect_line(b, "@1 OK 1");
	ck_assert_int_eq(kt_stat(a, "cancels"), 2);
	ck_assert_int_eq(kt_stat(a, "waiting"), 0);
	kt_req(a, "OK 1", "UNLOCK c:k");
	kt_wait_stat(a, "keys", 0);
	kt_wait_stat(a, "channels", 0);
}
END_TEST

START_TEST(closing_releases_every_channel)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	json_t		*s;

	kt_lock(a, "LOCK r:w");
	kt_send(b, "@1 LOCK r:a");
	pc_token(b, 1);
	kt_send(b, "@2 LOCK r:b r:c");
	pc_token(b, 2);
	kt_lock(b, "LOCK r:d");
	kt_send(b, "@3 LOCK r:w");
	kt_send(b, "@3 PING");
	json_decref(kt_wait_queue(a, "r:w", 1, 1));
	ck_assert_int_eq(kt_stat(a, "channels"), 3);
	kt_conn_close(b);
	kt_wait_stat(a, "clients", 1);
	kt_wait_stat(a, "keys", 1);
	s = kt_stats(a);
	ck_assert_int_eq(kt_jint(s, "disconnect_releases"), 4);
	ck_assert_int_eq(kt_jint(s, "waiting"), 0);
	ck_assert_int_eq(kt_jint(s, "channels"), 0);
	json_decref(s);
	kt_req(a, "OK 1", "UNLOCK r:w");
	kt_wait_stat(a, "keys", 0);
}
END_TEST

START_TEST(a_thousand_channels_queue_in_fifo_order)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	uint64_t	 last;
	char		*buf;
	size_t		 len = 0, cap = 1000 * 24;

	last = kt_lock(a, "LOCK f:k");
	buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	for (unsigned i = 1; i <= 1000; i++)
		len += (size_t)snprintf(buf + len, cap - len, "@%u LOCK f:k\n",
		    i);
	kt_send_raw(b, buf, len);
	free(buf);
	json_decref(kt_wait_queue(a, "f:k", 1, 1000));
	ck_assert_int_eq(kt_stat(a, "channels"), 1000);
	kt_req(a, "OK 1", "UNLOCK f:k");
	last = pc_token(b, 1);
	for (unsigned i = 1; i <= 1000; i++) {
		char		want[2][32];
		uint64_t	t;

		/* Each UNLOCK grants the next channel in the queue: the two
		 * replies come in either order. */
		kt_send(b, "@%u UNLOCK f:k", i);
		snprintf(want[0], sizeof(want[0]), "@%u OK 1", i);
		if (i == 1000) {
			kt_expect_line(b, want[0]);
			break;
		}
		snprintf(want[1], sizeof(want[1]), "@%u OK ", i + 1);
		kt_recv(b);
		if (strcmp(b->line, want[0]) == 0)
			t = pc_token(b, i + 1);
		else {
			ck_assert_msg(sscanf(b->line, "@%*u OK %lu", &t) == 1 &&
			    strncmp(b->line, want[1], strlen(want[1])) == 0,
			    "expected %s<token>, got %s", want[1], b->line);
			kt_expect_line(b, want[0]);
		}
		ck_assert(t > last);	/* in queue order */
		last = t;
	}
	kt_wait_stat(a, "keys", 0);
	kt_wait_stat(a, "channels", 0);
}
END_TEST

START_TEST(a_session_keeps_every_channel)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect(), *n, *n2;
	json_t		*r, *ch, *w;
	uint64_t	 t1, t2;
	char		 id[80];

	kt_send(a, "SESSION grace=10000");
	snprintf(id, sizeof(id), "%s", kt_expect_prefix(a, "OK ") + 3);
	kt_send(a, "@1 LOCK s:a");
	t1 = pc_token(a, 1);
	kt_send(a, "@2 LOCK s:b mode=shared");
	t2 = pc_token(a, 2);
	kt_lock(b, "LOCK s:c");
	kt_send(a, "@3 LOCK s:c timeout=60000");
	json_decref(kt_wait_queue(b, "s:c", 1, 1));
	kt_conn_close(a);
	kt_wait_stat(b, "sessions_detached", 1);
	ck_assert_int_eq(kt_stat(b, "channels"), 3);	/* the session's */
	ck_assert_int_eq(kt_stat(b, "held"), 3);
	ck_assert_int_eq(kt_stat(b, "waiting"), 1);
	r = kt_info(b, "s:a");
	ck_assert_int_eq(kt_jint(pu_jarr_at(r, "holders", 0), "channel"), 1);
	ck_assert(json_is_integer(json_object_get(pu_jarr_at(r, "holders",
	    0), "detached_ms")));
	json_decref(r);

	n = kt_connect();
	kt_send(n, "RESUME %s", id);
	r = kt_expect_json(n);
	ck_assert_uint_eq(json_array_size(json_object_get(r, "held")), 0);
	ck_assert(json_is_null(json_object_get(r, "waiting")));
	ck_assert_uint_eq(json_array_size(json_object_get(r, "channels")), 3);
	ch = pu_jarr_at(r, "channels", 0);
	ck_assert_int_eq(kt_jint(ch, "channel"), 1);
	ck_assert_uint_eq((uint64_t)kt_jint(pu_jarr_at(ch, "held", 0),
	    "token"), t1);
	ck_assert(json_is_null(json_object_get(ch, "waiting")));
	ch = pu_jarr_at(r, "channels", 1);
	ck_assert_int_eq(kt_jint(ch, "channel"), 2);
	ck_assert_str_eq(json_string_value(json_object_get(pu_jarr_at(ch,
	    "held", 0), "mode")), "shared");
	ck_assert_uint_eq((uint64_t)kt_jint(pu_jarr_at(ch, "held", 0),
	    "token"), t2);
	ch = pu_jarr_at(r, "channels", 2);
	ck_assert_int_eq(kt_jint(ch, "channel"), 3);
	ck_assert_uint_eq(json_array_size(json_object_get(ch, "held")), 0);
	w = json_object_get(ch, "waiting");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(w,
	    "keys"), 0)), "s:c");
	json_decref(r);
	ck_assert_int_eq(kt_stat(b, "channels"), 3);

	/* The waiting channel's reply comes on the new connection; the
	 * locks are the channels' own. */
	kt_send(n, "@1 LOCK s:a");
	kt_expect_prefix(n, "@1 ERR HELD ");
	kt_req(b, "OK 1", "UNLOCK s:c");
	ck_assert(pc_token(n, 3) > t2);
	kt_req(n, "@1 OK 1", "@1 UNLOCK s:a");

	/* A takeover of a connection the server still thinks alive moves
	 * its channels too. */
	n2 = kt_connect();
	kt_send(n2, "RESUME %s", id);
	r = kt_expect_json(n2);
	ck_assert_uint_eq(json_array_size(json_object_get(r, "channels")), 2);
	ck_assert_int_eq(kt_jint(pu_jarr_at(r, "channels", 0), "channel"), 2);
	ck_assert_int_eq(kt_jint(pu_jarr_at(r, "channels", 1), "channel"), 3);
	json_decref(r);
	kt_expect_eof(n, kt_ms(2000));
	kt_req(n2, "@3 OK 1", "@3 UNLOCK s:c");
	kt_req(n2, "@2 OK 1", "@2 UNLOCKALL");
	kt_req(n2, "OK", "QUIT");
	kt_wait_stat(b, "sessions", 0);
	kt_wait_stat(b, "keys", 0);
	kt_wait_stat(b, "channels", 0);
}
END_TEST

START_TEST(a_session_expires_with_every_channel)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();

	kt_req(a, "OK PONG", "PING");
	kt_send(a, "SESSION grace=200");
	kt_expect_prefix(a, "OK ");
	kt_send(a, "@1 LOCK x:a");
	pc_token(a, 1);
	kt_lock(b, "LOCK x:b");
	kt_send(a, "@2 LOCK x:b");
	json_decref(kt_wait_queue(b, "x:b", 1, 1));
	kt_conn_close(a);
	kt_wait_stat(b, "sessions_detached", 1);
	kt_wait_stat(b, "sessions", 0);
	ck_assert_int_eq(kt_stat(b, "sessions_expired"), 1);
	/* the wait goes with the session: at once, or through backend etcd
	 * once the replica applies the delete its end asked for */
	kt_wait_stat(b, "waiting", 0);
	kt_req(b, "OK 1", "UNLOCK x:b");
	kt_wait_stat(b, "keys", 0);
}
END_TEST

START_TEST(max_channels_bounds_the_channels_in_use)
{
	struct kt_conn	*c;
	char		*longline;

	kt_start("--max-channels", "3");
	c = kt_connect();
	kt_send(c, "@1 LOCK m:a");
	pc_token(c, 1);
	kt_send(c, "@2 LOCK m:b");
	pc_token(c, 2);
	kt_send(c, "@3 LOCK m:c");
	pc_token(c, 3);
	kt_send(c, "@4 PING");
	kt_expect_prefix(c, "@4 ERR LIMIT ");
	/* TOOLONG, SYNTAX and BADKEY come before LIMIT */
	kt_send(c, "@4 FROB");
	kt_expect_prefix(c, "@4 ERR SYNTAX ");
	kt_send(c, "@4 LOCK \x01");
	kt_expect_prefix(c, "@4 ERR BADKEY ");
	longline = pu_repeat("x", 5000);
	kt_send(c, "@4 LOCK %s", longline);
	kt_expect_prefix(c, "@4 ERR TOOLONG ");
	free(longline);
	ck_assert_int_eq(kt_stat(c, "channels"), 3);
	kt_req(c, "@2 OK PONG", "@2 PING");	/* one in use is fine */
	kt_req(c, "OK PONG", "PING");		/* channel 0 never counts */
	kt_req(c, "@3 OK 1", "@3 UNLOCK m:c");
	kt_req(c, "@4 OK PONG", "@4 PING");	/* a slot is free again */
	ck_assert_int_eq(kt_stat(c, "channels"), 2);
	kt_conn_close(c);
	kt_daemon_stop(kt_d);
	kt_start("--max-channels", "0");
	c = kt_connect();
	kt_send(c, "@1 PING");
	kt_expect_prefix(c, "@1 ERR LIMIT ");
	kt_req(c, "OK PONG", "PING");
}
END_TEST

/* PROTOCOL.md, Channels: a channel is forgotten when it holds and waits
 * for nothing, however its last hold ended: a ttl that runs out frees its
 * slot of max-channels too. */
START_TEST(a_channel_whose_last_hold_expires_is_forgotten)
{
	struct kt_conn	*c, *b;

	kt_start("--max-channels", "2");
	c = kt_connect();
	b = kt_connect();
	/* (ttls that outlast the STATS below on a loaded machine) */
	kt_send(c, "@1 LOCK xt:a ttl=%" PRIu64, (uint64_t)kt_ms(1000));
	pc_token(c, 1);
	kt_lock(b, "LOCK xt:b");
	kt_send(c, "@2 LOCK xt:b ttl=%" PRIu64, (uint64_t)kt_ms(1000));
	json_decref(kt_wait_queue(b, "xt:b", 1, 1));
	kt_req(b, "OK 1", "UNLOCK xt:b");
	pc_token(c, 2);		/* granted after a wait, then its ttl */
	ck_assert_int_eq(kt_stat(b, "channels"), 2);
	kt_wait_stat(b, "held", 0);
	kt_wait_stat(b, "channels", 0);
	kt_req(c, "@3 OK PONG", "@3 PING");
	kt_req(c, "@4 OK PONG", "@4 PING");
}
END_TEST

/* ... and a channel whose wait timed out, or whose ttl ran out, while its
 * session was detached is not brought back by RESUME. */
START_TEST(a_detached_sessions_idle_channel_is_not_resumed)
{
	struct kt_conn	*c, *b;
	json_t		*r;
	char		 id[80];

	kt_start("--max-channels", "2");
	c = kt_connect();
	b = kt_connect();
	kt_send(c, "SESSION grace=10000");
	snprintf(id, sizeof(id), "%s", kt_expect_prefix(c, "OK ") + 3);
	kt_lock(b, "LOCK xt:c");
	/* the grant first: a wait's ERR TIMEOUT may come before a later
	 * channel's reply (valgrind at load 16 saw @5's before @6's) */
	kt_send(c, "@6 LOCK xt:d ttl=%" PRIu64, (uint64_t)kt_ms(200));
	pc_token(c, 6);
	kt_send(c, "@5 LOCK xt:c timeout=%" PRIu64, (uint64_t)kt_ms(200));
	json_decref(kt_wait_queue(b, "xt:c", 1, 1));
	kt_conn_close(c);
	kt_wait_stat(b, "sessions_detached", 1);
	kt_wait_stat(b, "held", 1);	/* b's: the ttl ran out */
	json_decref(kt_wait_queue(b, "xt:c", 1, 0));	/* timed out */
	c = kt_connect();
	kt_send(c, "RESUME %s", id);
	r = kt_expect_json(c);
	ck_assert_uint_eq(json_array_size(json_object_get(r, "channels")), 0);
	json_decref(r);
	ck_assert_int_eq(kt_stat(b, "channels"), 0);
	kt_req(c, "@7 OK PONG", "@7 PING");
	kt_req(c, "@8 OK PONG", "@8 PING");
	kt_req(c, "OK", "QUIT");
}
END_TEST

/* PROTOCOL.md, CLIENTS: "the keys it waits for", on every channel:
 * channel 0's first, then by channel number; the longest wait's time;
 * a detached session's likewise. */
START_TEST(clients_lists_the_waits_of_every_channel)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	struct kt_conn	*op = kt_connect_unix();
	json_t		*r, *list, *e, *w;
	uint64_t	 bid = 0;
	size_t		 i;

	kt_lock(a, "LOCK cw:1");
	kt_lock(a, "LOCK cw:2");
	kt_send(b, "SESSION grace=10000");
	kt_expect_prefix(b, "OK ");
	kt_send(b, "@5 LOCK cw:2 timeout=60000");
	json_decref(kt_wait_queue(a, "cw:2", 1, 1));
	kt_send(b, "@3 LOCK cw:1 cw:x timeout=60000");
	json_decref(kt_wait_queue(a, "cw:1", 1, 1));
	kt_send(b, "@4 LOCK other");
	pc_token(b, 4);
	for (int pass = 0; pass < 2; pass++) {
		kt_send(op, "CLIENTS");
		r = kt_expect_json(op);
		list = json_object_get(r, "clients");
		e = NULL;
		for (i = 0; i < json_array_size(list); i++) {
			json_t	*x = json_array_get(list, i);

			if (json_object_get(x, "waited_ms") != NULL)
				e = x;
		}
		ck_assert_msg(e != NULL, "no client waits in CLIENTS");
		if (pass == 0)
			bid = (uint64_t)kt_jint(e, "id");
		ck_assert_uint_eq((uint64_t)kt_jint(e, "id"), bid);
		ck_assert_int_eq(kt_jint(e, "channels"), 3);
		ck_assert_int_eq(kt_jint(e, "held"), 1);
		w = json_object_get(e, "waiting_for");
		ck_assert_uint_eq(json_array_size(w), 3);
		ck_assert_str_eq(json_string_value(json_array_get(w, 0)),
		    "cw:1");
		ck_assert_str_eq(json_string_value(json_array_get(w, 1)),
		    "cw:x");
		ck_assert_str_eq(json_string_value(json_array_get(w, 2)),
		    "cw:2");
		ck_assert_int_eq(json_object_get(e, "detached_ms") != NULL,
		    pass == 1);
		json_decref(r);
		if (pass == 0) {
			kt_conn_close(b);	/* the session detaches */
			kt_wait_stat(a, "sessions_detached", 1);
		}
	}
	kt_conn_close(op);
}
END_TEST

static Suite *
protocol_channels_suite(void)
{
	Suite	*s = suite_create("protocol_channels");
	TCase	*tc;

	tc = kt_tcase(s, "channels", KT_PRIVATE, 60, NULL);
	if (tc != NULL) {
		tcase_add_test(tc, channel_numbers_and_what_a_channel_may_send);
		tcase_add_test(tc,
		    a_line_with_a_bad_channel_waits_for_channel_0s_turn);
		tcase_add_test(tc, a_wait_on_one_channel_holds_up_no_other);
		tcase_add_test(tc,
		    held_notheld_deadlock_and_unlockall_are_per_channel);
		tcase_add_test(tc, cancel_withdraws_its_own_channel_only);
		tcase_add_test(tc, closing_releases_every_channel);
		tcase_add_test(tc, a_thousand_channels_queue_in_fifo_order);
		tcase_add_test(tc, a_session_keeps_every_channel);
		tcase_add_test(tc, a_session_expires_with_every_channel);
		tcase_add_test(tc, clients_lists_the_waits_of_every_channel);
	}
	tc = kt_tcase(s, "settings", KT_PRIVATE, 60, kt_setup_none);
	if (tc != NULL) {
		tcase_add_test(tc, max_channels_bounds_the_channels_in_use);
		tcase_add_test(tc,
		    a_channel_whose_last_hold_expires_is_forgotten);
		tcase_add_test(tc,
		    a_detached_sessions_idle_channel_is_not_resumed);
	}
	return s;
}

const struct check_program check_program = {
	.name = "protocol_channels_test",
	.init = kt_init,
	.suites = { protocol_channels_suite, NULL }
};
