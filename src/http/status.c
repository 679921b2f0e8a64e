/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The status page. /, /status.css and /status.js send the embedded
 * status.html, status.css and status.js as they are; the script fetches
 * /status.json, which is STATS plus INFO of each hot key, both from the
 * stats module's builders, the lists cut short so a busy key cannot make
 * the reply large. The script builds the DOM with textContent, and the
 * page runs under a Content-Security-Policy that admits only this
 * listener's style and script files and nothing inline, so key and client
 * names (user input) stay text. This file never changes the server's
 * state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>

#include "clock.h"
#include "conn.h"
#include "session.h"
#include "status.h"
#include "util.h"

/* A table without connections (a test's) names nobody. */
static const char *
status_owner_name(const struct lt_owner *o, int64_t *detached_ms,
    uint64_t *client, uint32_t *channel, uint64_t *frontend)
{
	*frontend = owner_frontend(o);
	*client = owner_client(o);
	*channel = owner_channel(o);
	*detached_ms = owner_detached_ms(o, kl_now_ms());
	return owner_name(o);
}

/* status-names no: the page is unauthenticated, and a NAME is a label its
 * client chose (a host, a job, a user); the client id is shown instead. */
static const char *
status_owner_noname(const struct lt_owner *o, int64_t *detached_ms,
    uint64_t *client, uint32_t *channel, uint64_t *frontend)
{
	*frontend = owner_frontend(o);
	*client = owner_client(o);
	*channel = owner_channel(o);
	*detached_ms = owner_detached_ms(o, kl_now_ms());
	return NULL;
}

/* Parses s, which the stats module built, and frees it. */
static json_t *
status_load(char *s)
{
	json_t	*v;

	if (s == NULL)
		return NULL;
	v = json_loads(s, 0, NULL);
	free(s);
	return v;
}

static int
status_cut(json_t *info, const char *list)
{
	json_t	*a = json_object_get(info, list);

	if (!json_is_array(a))
		return -1;
	while (json_array_size(a) > STATUS_LIST_MAX)
		if (json_array_remove(a, json_array_size(a) - 1) == -1)
			return -1;
	return 0;
}

/* INFO of every key STATS names as hot, in its order. */
static json_t *
status_keys(const json_t *stats, const struct locktable *lt,
    uint64_t now_ms, bool names)
{
	json_t	*hot = json_object_get(stats, "hot_keys"), *a, *k;
	size_t	 i;

	if (!json_is_array(hot) || (a = json_array()) == NULL)
		return NULL;
	json_array_foreach(hot, i, k) {
		json_t	*key = json_object_get(k, "key"), *info = NULL;

		if (json_is_string(key))
			info = status_load(stats_info_json(lt,
			    json_string_value(key), json_string_length(key),
			    now_ms, names ? status_owner_name :
			    status_owner_noname, STATUS_LIST_MAX));
		if (info == NULL || status_cut(info, "holders") == -1 ||
		    status_cut(info, "waiters") == -1) {
			json_decref(info);
			json_decref(a);
			return NULL;
		}
		/* It takes info, whatever it returns. */
		if (json_array_append_new(a, info) == -1) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

char *
status_json(const struct stats *st, const struct locktable *lt,
    uint64_t now_ms, const char *version, const char *backend, bool names)
{
	json_t	*root, *stats;
	char	*s = NULL;

	if ((root = json_object()) == NULL)
		return NULL;
	/* The setters take the value, NULL included, whatever they return;
	 * root keeps stats alive for status_keys. */
	stats = status_load(stats_to_json(st, lt, now_ms, version, backend));
	if (json_object_set_new(root, "stats", stats) == 0 &&
	    json_object_set_new(root, "keys", status_keys(stats, lt,
	    now_ms, names)) == 0 &&
	    json_object_set_new(root, "names", json_boolean(names)) == 0 &&
	    json_object_set_new(root, "list_max",
	    json_integer(STATUS_LIST_MAX)) == 0)
		s = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return s;
}

/* Cache-Control no-store and nosniff are metrics_request_cb's, on every
 * reply. */
static void
status_send(struct evhttp_request *req, const char *type,
    const void *body, size_t len, bool copy)
{
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct evbuffer		*out = evbuffer_new();

	/* libevent 2.1 would send a body after HEAD's headers. */
	if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD)
		len = 0;
	if (out == NULL || (copy ? evbuffer_add(out, body, len) :
	    evbuffer_add_reference(out, body, len, NULL, NULL)) == -1) {
		if (out != NULL)
			evbuffer_free(out);
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	evhttp_add_header(h, "Content-Type", type);
	evhttp_add_header(h, "Referrer-Policy", "no-referrer");
	evhttp_send_reply(req, HTTP_OK, "OK", out);
	evbuffer_free(out);
}

int
status_serve(struct evhttp_request *req, const char *path,
    const struct stats *st, const struct locktable *lt, const char *backend,
    bool names)
{
	static const struct {
		const char		*path, *type;
		const unsigned char	*body;
		const size_t		*len;
	} files[] = {
		{ "/", "text/html; charset=utf-8", status_html,
		    &status_html_len },
		{ "/status.css", "text/css; charset=utf-8", status_css,
		    &status_css_len },
		{ "/status.js", "text/javascript; charset=utf-8", status_js,
		    &status_js_len }
	};
	char	*body;

	if (path == NULL)
		return -1;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		if (strcmp(path, files[i].path) != 0)
			continue;
		/* the page's policy; on the other two it does no harm */
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "Content-Security-Policy", STATUS_CSP);
		status_send(req, files[i].type, files[i].body,
		    *files[i].len, false);
		return 0;
	}
	if (strcmp(path, "/status.json") != 0)
		return -1;
	if ((body = status_json(st, lt, kl_now_ms(), PACKAGE_VERSION,
	    backend, names)) == NULL) {
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return 0;
	}
	status_send(req, "application/json", body, strlen(body),
	    true);
	free(body);
	return 0;
}
