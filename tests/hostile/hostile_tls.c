/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The probe over TLS (hostile_util.h, hu_probe_start_tls): libkeylock is
 * its client, on the daemon's --tls-port with the test certificates
 * (tests/certs), so that a test can show TLS clients are served as
 * plain ones are. Only hostile_test links it, with libkeylock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostile_util.h"
#include "keylock.h"

static enum kt_read
hu_tls_rt(struct hu_probe *p, const char *req, const char **line,
    size_t *len)
{
	enum keylock_status	st = keylock_request(p->kl, req, NULL);

	/* the server's answer, an ERR too: the caller judges the line */
	if (st == KEYLOCK_OK || st < KEYLOCK_ERR_IO) {
		*line = keylock_reply(p->kl);
		*len = strlen(*line);
		return KT_LINE;
	}
	snprintf(p->why, sizeof(p->why), "%s", keylock_message(p->kl));
	return st == KEYLOCK_ERR_DEADLINE ? KT_TIMEOUT :
	    st == KEYLOCK_ERR_CLOSED ? KT_EOF : KT_ERROR;
}

static void
hu_tls_close(struct hu_probe *p)
{
	keylock_free(p->kl);
	p->kl = NULL;
}

static const struct hu_probe_io hu_probe_tls = {
	hu_tls_rt, hu_tls_close
};

const char *
hu_test_cert(char *buf, size_t len, const char *name)
{
	const char	*top = getenv("top_srcdir");

	snprintf(buf, len, "%s/tests/certs/%s", top != NULL && top[0] !=
	    '\0' ? top : ".", name);
	return buf;
}

void
hu_probe_start_tls_at(const char *file, int line, struct hu_probe *p,
    const struct kt_daemon *d, const char *key, int64_t reply_ms)
{
	char			 ca[4096], server[64];
	struct keylock_tls_opts	 o = { .ca_file = hu_test_cert(ca,
				    sizeof(ca), "ca.pem") };
	enum keylock_status	 st;

	if (d->tls_port == 0)
		kt_fail_at(file, line, "TLS probe: the daemon has no "
		    "--tls-port");
	snprintf(server, sizeof(server), "tls://127.0.0.1:%d", d->tls_port);
	hu_probe_init(p, key, reply_ms);
	if ((p->kl = keylock_new()) == NULL)
		kt_fail_at(file, line, "TLS probe: out of memory");
	keylock_set_timeout(p->kl, (long)reply_ms);
	if ((st = keylock_set_tls(p->kl, &o)) != KEYLOCK_OK ||
	    (st = keylock_connect(p->kl, server, NULL)) != KEYLOCK_OK)
		kt_fail_at(file, line, "TLS probe: %s: %s: %s", server,
		    keylock_status_word(st), keylock_message(p->kl));
	p->io = &hu_probe_tls;
	hu_probe_launch_at(file, line, p);
}
