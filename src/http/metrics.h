/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The optional HTTP listener for monitoring (libevent's evhttp): /metrics
 * in the Prometheus text exposition format, /stats as STATS's JSON and
 * /healthz. It reads the server's counters and never changes them.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

/* The HTTP listener's fixed bounds (keylockd(8), THE HTTP LISTENER). */
/* request line and header lines, their line ends not counted (evhttp's
 * measure; keylockd(8), The HTTP listener) */
#define METRICS_MAX_HEADERS	8192
/* idle, reading or writing; and a request's line and headers, from the
 * connection's accept or the request's first byte */
#define METRICS_TIMEOUT_S	10

struct server;
struct metrics;

/* Listens on addr ("HOST:PORT", "[V6]:PORT"), or on fd, a listening
 * socket for addr handed over by a live upgrade (-1: none); NULL with
 * errbuf set. */
struct metrics	*metrics_new(struct server *srv, const char *addr, int fd,
		    char *errbuf, size_t errlen);
void		 metrics_free(struct metrics *m);
/* The bound port (useful when the configured one was 0). */
int		 metrics_port(const struct metrics *m);
/* The listening socket (live upgrade hands it over). */
int		 metrics_fd(const struct metrics *m);
/* Stops accepting (pause) or starts again; server.c's pause on EMFILE. */
void		 metrics_pause(struct metrics *m, bool pause);

/* Splits "HOST:PORT" or "[V6]:PORT" into host (no brackets) and port;
 * -1 if addr is not of that form. */
int		 metrics_split(const char *addr, char *host, size_t hostlen,
		    uint16_t *port);

/* Whether a request's Host header value hdr (NULL: none) may be
 * answered: no Host, an IP literal, localhost, own (the configured host)
 * or a name in hosts (the metrics-hosts list; NULL: none). */
bool		 metrics_host_ok(const char *hdr, const char *own,
		    const char *hosts);

/* The exposition text for the server's state now; malloc'd, or NULL. */
char		*metrics_render(struct server *srv);

#endif /* METRICS_H */
