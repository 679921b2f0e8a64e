/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The etcd client against a hostile "etcd": an HTTP server in this
 * process that answers what no etcd sends (a member taken over, or
 * anyone on a plain-HTTP path to it). These replies cannot come from the
 * real cluster the other suites use. The client must bound what it
 * buffers: a reply over max_body, or a watch reply over max_line, fails
 * the call or cuts the stream, before it is read whole.
 */
#include <sys/socket.h>

#include <netinet/in.h>

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "etcd_test.h"

#define H_LIMIT		(1024 * 1024)	/* max_body and max_line here */

static struct evhttp	*h_http;
static int		 h_port;
static size_t		 h_size;	/* bytes of the next reply */
static size_t		 h_chunks;	/* chunks it is sent in */
static char		 h_url[64];
static int		 h_hold;	/* 1: hang up on the first call, hold the
					 * rest, answer status probes as a
					 * healthy member; 2: hang up on every
					 * status probe, hold every call */
static int		 h_nreq;	/* requests seen while h_hold */

/* A JSON object of exactly n bytes (n >= 64): a range reply padded with
 * a member the client does not know. */
static void
range_reply(struct evbuffer *b, size_t n)
{
	const char	*head = "{\"header\":{\"revision\":\"7\"},\"count\":\"0\","
			    "\"pad\":\"";
	size_t		 pad = n - strlen(head) - 2;

	evbuffer_add(b, head, strlen(head));
	for (size_t i = 0; i < pad; i++)
		evbuffer_add(b, "x", 1);
	evbuffer_add(b, "\"}", 2);
}

/* A watch reply line of about n bytes: one PUT event at revision 5 of
 * key "k" whose value is mostly padding, base64 of zeroes ("AAAA"). */
static void
watch_line(struct evbuffer *b, size_t n)
{
	const char	*head = "{\"result\":{\"header\":{\"revision\":\"5\"},"
			    "\"events\":[{\"kv\":{\"key\":\"aw==\","
			    "\"mod_revision\":\"5\",\"create_revision\":\"5\","
			    "\"version\":\"1\",\"value\":\"";
	size_t		 pad = (n - strlen(head) - 8) / 4 * 4;

	evbuffer_add(b, head, strlen(head));
	for (size_t i = 0; i < pad; i += 4)
		evbuffer_add(b, "AAAA", 4);
	evbuffer_add(b, "\"}}]}}\n", 7);
}

/*
 * A watch stream the server never ends. When the client hangs up, evhttp
 * takes an unfinished reply off its connection and leaves it to its user:
 * the connection's close callback frees it then (and only then: a
 * connection freed with the server still holds its requests).
 */
static void
h_stream_closed(struct evhttp_connection *evcon, void *arg)
{
	struct evhttp_request *req = arg;

	if (evhttp_request_get_connection(req) == NULL)
		evhttp_request_free(req);
}

static void
h_request(struct evhttp_request *req, void *arg)
{
	const char	*uri = evhttp_request_get_uri(req);
	struct evbuffer	*b = evbuffer_new();

	ck_assert_ptr_nonnull(b);
	if (h_hold) {
		struct evhttp_connection *evcon =
		    evhttp_request_get_connection(req);

		bool status = strcmp(uri, "/v3/maintenance/status") == 0;

		if (h_hold == 1 && status) {
			/* a leader, and a term that never changes: the probe
			 * moves no call on */
			evbuffer_add_printf(b, "{\"header\":{\"revision\":"
			    "\"7\"},\"leader\":\"1\",\"raftTerm\":\"2\"}");
			evhttp_send_reply(req, 200, "OK", b);
			evbuffer_free(b);
			return;
		}
		evhttp_connection_set_closecb(evcon, h_stream_closed, req);
		if (h_hold == 1 ? h_nreq++ == 0 : status)
			shutdown(bufferevent_getfd(
			    evhttp_connection_get_bufferevent(evcon)),
			    SHUT_RDWR);
	} else if (strcmp(uri, "/v3/watch") == 0) {
		size_t	len, per;

		evhttp_connection_set_closecb(evhttp_request_get_connection(req),
		    h_stream_closed, req);
		evhttp_send_reply_start(req, 200, "OK");
		evbuffer_add_printf(b, "{\"result\":{\"header\":{\"revision\":"
		    "\"4\"},\"created\":true}}\n");
		evhttp_send_reply_chunk(req, b);
		watch_line(b, h_size);
		len = evbuffer_get_length(b);
		per = (len + h_chunks - 1) / h_chunks;
		while (evbuffer_get_length(b) > 0) {
			struct evbuffer *c = evbuffer_new();

			ck_assert_ptr_nonnull(c);
			evbuffer_remove_buffer(b, c, per);
			evhttp_send_reply_chunk(req, c);
			evbuffer_free(c);
		}
		/* the stream stays open, as etcd's does */
	} else if (h_size == 0) {
		/* an error whose text would split a reply line */
		evbuffer_add_printf(b, "{\"error\":\"no\\r\\nOK 1\\u001bx\","
		    "\"message\":\"no\",\"code\":3}");
		evhttp_send_reply(req, 400, "Bad Request", b);
	} else {
		range_reply(b, h_size);
		evhttp_send_reply(req, 200, "OK", b);
	}
	evbuffer_free(b);
}

static void
h_setup(void)
{
	struct evhttp_bound_socket	*s;
	struct sockaddr_in		 sin;
	socklen_t			 len = sizeof(sin);

	/* the client hangs up on the server's writes, as keylockd does
	 * (which ignores SIGPIPE) */
	signal(SIGPIPE, SIG_IGN);
	t_base = event_base_new();
	ck_assert_ptr_nonnull(t_base);
	h_http = evhttp_new(t_base);
	ck_assert_ptr_nonnull(h_http);
	evhttp_set_gencb(h_http, h_request, NULL);
	s = evhttp_bind_socket_with_handle(h_http, "127.0.0.1", 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(getsockname(evhttp_bound_socket_get_fd(s),
	    (struct sockaddr *)&sin, &len), 0);
	h_port = ntohs(sin.sin_port);
	snprintf(h_url, sizeof(h_url), "http://127.0.0.1:%d", h_port);
	h_chunks = 1;
	h_hold = h_nreq = 0;
}

static void
h_teardown(void)
{
	etcd_free(t_e);
	t_e = NULL;
	evhttp_free(h_http);
	h_http = NULL;
	event_base_free(t_base);
	t_base = NULL;
}

static struct etcd *
h_client_in(int timeout_ms)
{
	struct etcd_opts	 o = { .conns = 1, .timeout_ms = timeout_ms,
	    .max_body = H_LIMIT, .max_line = H_LIMIT };
	const char		*why = NULL;
	struct etcd		*e = etcd_new(t_base, h_url, &o, &why);

	ck_assert_msg(e != NULL, "etcd_new: %s", why != NULL ? why : "?");
	return e;
}

static struct etcd *
h_client(void)
{
	return h_client_in(5000);
}

static struct res
h_range(size_t size)
{
	struct res		r = { 0 };
	struct etcd_range	rg = { .key = "k", .keylen = 1 };

	h_size = size;
	ck_assert_ptr_nonnull(etcd_range(t_e, &rg, 0, res_cb, &r));
	ck_assert(t_run_until(&r.done, T_WAIT_MS));
	return r;
}

START_TEST(a_reply_over_max_body_fails_the_call_and_one_under_it_passes)
{
	struct res	r;

	t_e = h_client();
	r = h_range(H_LIMIT - 1000);
	ck_assert_msg(r.status == ETCD_OK, "%s: %s",
	    etcd_status_name(r.status), r.msg);
	ck_assert_int_eq(r.revision, 7);
	r = h_range(4 * H_LIMIT);
	ck_assert_msg(r.status != ETCD_OK, "a 4 MiB reply was taken");
	ck_assert_msg(strstr(r.msg, "too long") != NULL, "%s", r.msg);
	/* the client goes on */
	r = h_range(100);
	ck_assert_msg(r.status == ETCD_OK, "%s: %s",
	    etcd_status_name(r.status), r.msg);
}
END_TEST

static struct wrec *
h_watch(size_t size, size_t chunks)
{
	static struct wrec	w;

	memset(&w, 0, sizeof(w));
	h_size = size;
	h_chunks = chunks;
	t_e = h_client();
	ck_assert_int_eq(etcd_watch_start(t_e, "k", 1, 1, &wrec_cbs, &w), 0);
	/* until the reply is delivered or the stream cut, however slow the
	 * machine */
	for (int i = 0; i < 600 && w.nev == 0 && w.down == 0; i++)
		t_run_for(50);
	etcd_watch_stop(t_e);
	return &w;
}

START_TEST(a_watch_reply_under_max_line_is_delivered)
{
	struct wrec *w = h_watch(H_LIMIT - 1000, 1);

	ck_assert_int_ge(w->created, 1);
	ck_assert_uint_ge(w->nev, 1);
	ck_assert_int_eq(w->down, 0);
}
END_TEST

START_TEST(a_watch_reply_over_max_line_in_one_chunk_cuts_the_stream)
{
	struct wrec *w = h_watch(4 * H_LIMIT, 1);

	ck_assert_int_ge(w->created, 1);
	ck_assert_uint_eq(w->nev, 0);
	ck_assert_int_ge(w->down, 1);
}
END_TEST

START_TEST(a_watch_reply_over_max_line_in_many_chunks_cuts_the_stream)
{
	struct wrec *w = h_watch(4 * H_LIMIT, 64);

	ck_assert_int_ge(w->created, 1);
	ck_assert_uint_eq(w->nev, 0);
	ck_assert_int_ge(w->down, 1);
}
END_TEST

/* etcd's texts reach logs and clients: no control byte gets through. */
START_TEST(an_error_text_loses_its_control_bytes)
{
	struct res r;

	t_e = h_client();
	r = h_range(0);
	ck_assert_int_eq(r.status, ETCD_ERR_GRPC);
	ck_assert_int_eq(r.grpc_code, 3);
	ck_assert_str_eq(r.msg, "no??OK 1?x");
}
END_TEST

/* A range that may be tried again (ETCD_RETRY), against a server in
 * h_hold's way, by a client whose etcd-timeout is timeout_ms; its end. */
static struct res
h_retried_range(int hold, int timeout_ms)
{
	struct res		r = { 0 };
	struct etcd_range	rg = { .key = "k", .keylen = 1 };

	h_hold = hold;
	t_e = h_client_in(timeout_ms);
	ck_assert_ptr_nonnull(etcd_range(t_e, &rg, ETCD_RETRY, res_cb, &r));
	ck_assert(t_run_until(&r.done, T_WAIT_MS));
	return r;
}

/*
 * A call whose deadline meets a try still in flight says why the try
 * before it ended. etcd refusing a TLS 1.3 client's certificate ends each
 * try just after its handshake, and secure.sh saw only "no reply from
 * ... within 5000 ms" when the deadline came during the next try.
 */
START_TEST(a_deadline_during_a_retry_says_why_the_try_before_ended)
{
	struct res r = h_retried_range(1, 2000);

	ck_assert_int_ge(h_nreq, 2);
	ck_assert_int_eq(r.status, ETCD_ERR_TIMEOUT);
	ck_assert_msg(strstr(r.msg, "no reply from") != NULL &&
	    strstr(r.msg, "(the try before: http://127.0.0.1:") != NULL &&
	    strstr(r.msg, "connection closed") != NULL, "%s", r.msg);
}
END_TEST

/* A member whose status probe fails at once is not "silent": the calls
 * the probe moves on say that it failed (over TLS, the alert). */
START_TEST(a_failed_probe_says_it_failed_not_that_it_was_silent)
{
	/* etcd-timeout 5000: the probe has 1000 ms, and its failure comes
	 * well within them however busy the machine */
	struct res r = h_retried_range(2, 5000);

	ck_assert_int_eq(r.status, ETCD_ERR_TIMEOUT);
	ck_assert_msg(strstr(r.msg, "its status request failed") != NULL &&
	    strstr(r.msg, "no status within") == NULL, "%s", r.msg);
}
END_TEST

Suite *
etcd_hostile_suite(void)
{
	Suite	*s = suite_create("etcd_hostile");
	TCase	*tc = tcase_create("hostile");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc,
	    a_reply_over_max_body_fails_the_call_and_one_under_it_passes);
	tcase_add_test(tc, a_watch_reply_under_max_line_is_delivered);
	tcase_add_test(tc, an_error_text_loses_its_control_bytes);
	tcase_add_test(tc,
	    a_deadline_during_a_retry_says_why_the_try_before_ended);
	tcase_add_test(tc,
	    a_failed_probe_says_it_failed_not_that_it_was_silent);
	tcase_add_test(tc,
	    a_watch_reply_over_max_line_in_one_chunk_cuts_the_stream);
	tcase_add_test(tc,
	    a_watch_reply_over_max_line_in_many_chunks_cuts_the_stream);
	suite_add_tcase(s, tc);
	return s;
}
