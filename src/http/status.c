/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The status page. / sends the embedded status.html as it is; the page
 * fetches /status.json, which is STATS plus INFO of each hot key, both
 * from the stats module's builders, the lists cut short so a busy key
 * cannot make the reply large. The page builds its DOM with textContent
 * and runs under a Content-Security-Policy that admits only its own inline
 * style and script, so key and client names (user input) stay text. This
 * file never changes the server's state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>

#include "clock.h"
#include "conn.h"
#include "sha256.h"
#include "status.h"
#include "util.h"

/* A table without connections (a test's) names nobody. */
static const char *
status_owner_name(const struct lt_owner *o)
{
	const struct conn	*c = locktable_owner_udata(o);

	return c != NULL ? conn_name(c) : NULL;
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
    uint64_t now_ms)
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
			    now_ms, status_owner_name, STATUS_LIST_MAX));
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
    uint64_t now_ms, const char *version, const char *backend)
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
	    now_ms)) == 0 &&
	    json_object_set_new(root, "list_max",
	    json_integer(STATUS_LIST_MAX)) == 0)
		s = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return s;
}

/* The text between <tag> and </tag> in the page; NULL if there is none. */
static const char *
status_element(const char *tag, size_t *len)
{
	const char	*page = (const char *)status_html, *open, *close;
	char		 o[16], c[16];

	snprintf(o, sizeof(o), "<%s>", tag);
	snprintf(c, sizeof(c), "</%s>", tag);
	if ((open = strstr(page, o)) == NULL ||
	    (close = strstr(open, c)) == NULL)
		return NULL;
	open += strlen(o);
	*len = (size_t)(close - open);
	return open;
}

/* 'sha256-BASE64' of the element's text, as CSP names it. */
static int
status_hash(const char *tag, char *out, size_t outlen)
{
	unsigned char	 md[SHA256_SIZE];
	char		 b64[BASE64_SIZE(SHA256_SIZE)];
	const char	*text;
	size_t		 len;
	int		 n;

	if ((text = status_element(tag, &len)) == NULL)
		return -1;
	sha256(text, len, md);
	base64_encode(md, sizeof(md), b64);
	n = snprintf(out, outlen, "'sha256-%s'", b64);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

int
status_csp(char *buf, size_t len)
{
	char	style[128], script[128];
	int	n;

	if (status_hash("style", style, sizeof(style)) == -1 ||
	    status_hash("script", script, sizeof(script)) == -1)
		return -1;
	n = snprintf(buf, len, "default-src 'none'; style-src %s; "
	    "script-src %s; connect-src 'self'; img-src 'self'; "
	    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	    style, script);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

static void
status_send(struct evhttp_request *req, const char *type,
    const char *cache, const void *body, size_t len, bool copy)
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
	evhttp_add_header(h, "Cache-Control", cache);
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(h, "Referrer-Policy", "no-referrer");
	evhttp_send_reply(req, HTTP_OK, "OK", out);
	evbuffer_free(out);
}

int
status_serve(struct evhttp_request *req, const char *path,
    const struct stats *st, const struct locktable *lt, const char *backend)
{
	char	csp[512], *body;

	if (path == NULL)
		return -1;
	if (strcmp(path, "/") == 0) {
		if (status_csp(csp, sizeof(csp)) == -1) {
			evhttp_send_error(req, HTTP_INTERNAL, NULL);
			return 0;
		}
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "Content-Security-Policy", csp);
		status_send(req, "text/html; charset=utf-8", "no-cache",
		    status_html, status_html_len, false);
		return 0;
	}
	if (strcmp(path, "/status.json") != 0)
		return -1;
	if ((body = status_json(st, lt, kl_now_ms(), PACKAGE_VERSION,
	    backend)) == NULL) {
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return 0;
	}
	status_send(req, "application/json", "no-store", body, strlen(body),
	    true);
	free(body);
	return 0;
}
