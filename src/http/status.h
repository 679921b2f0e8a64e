/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The status page on the metrics listener: / is one self-contained HTML
 * file (src/status.html, embedded at build time) that draws /status.json
 * every second. It only reads the server's state.
 */
#ifndef STATUS_H
#define STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "locktable.h"
#include "stats.h"

#define STATUS_LIST_MAX	20	/* holders and waiters shown per hot key */

struct evhttp_request;

/* The page's bytes (status_html.c, generated from status.html), with a
 * NUL after the last one that status_html_len does not count. */
extern const unsigned char	status_html[];
extern const size_t		status_html_len;

/* What /status.json says: {"stats": STATS, "keys": [INFO of each hot key
 * in STATS's order, its lists cut at STATUS_LIST_MAX], "list_max": N}.
 * malloc'd (free with free()), or NULL on no memory. */
char	*status_json(const struct stats *st, const struct locktable *lt,
	    uint64_t now_ms, const char *version, const char *backend);

/* The Content-Security-Policy that admits the page's own inline style and
 * script (by their SHA-256) and nothing else; -1 if it does not fit or
 * the page has no <style> or <script>. */
int	 status_csp(char *buf, size_t len);

/* Answers GET or HEAD of / and /status.json and returns 0; any other path
 * (NULL too) is not the page's: -1, nothing sent. */
int	 status_serve(struct evhttp_request *req, const char *path,
	    const struct stats *st, const struct locktable *lt,
	    const char *backend);

#endif /* STATUS_H */
