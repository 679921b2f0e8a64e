/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The status page on the metrics listener: / is an HTML file
 * (src/http/status.html) whose style and script are /status.css and
 * /status.js (status.css, status.js), all three embedded at build time;
 * the script draws /status.json every second. It only reads the server's
 * state.
 */
#ifndef STATUS_H
#define STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "locktable.h"
#include "stats.h"

#define STATUS_LIST_MAX	20	/* holders and waiters shown per hot key */

struct evhttp_request;

/* The page's files (status_files.c, generated from them by
 * src/http/local.mk), each with a NUL after its last byte that its _len
 * does not count. */
extern const unsigned char	status_html[], status_css[], status_js[];
extern const size_t		status_html_len, status_css_len,
				status_js_len;

/* The page's Content-Security-Policy: its style, script and data from
 * this listener, nothing inline, nothing from elsewhere. */
#define STATUS_CSP	"default-src 'none'; style-src 'self'; "	\
	"script-src 'self'; connect-src 'self'; img-src 'self'; "	\
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* What /status.json says: {"stats": STATS, "keys": [INFO of each hot key
 * in STATS's order, its lists cut at STATUS_LIST_MAX], "names": names,
 * "list_max": N}; with names false, every holder's and waiter's "name"
 * is null (status-names). malloc'd (free with free()), or NULL on no
 * memory. */
char	*status_json(const struct stats *st, const struct locktable *lt,
	    uint64_t now_ms, const char *version, const char *backend,
	    bool names);

/* Answers GET or HEAD of /, /status.css, /status.js and /status.json and
 * returns 0; any other path (NULL too) is not the page's: -1, nothing
 * sent. */
int	 status_serve(struct evhttp_request *req, const char *path,
	    const struct stats *st, const struct locktable *lt,
	    const char *backend, bool names);

#endif /* STATUS_H */
