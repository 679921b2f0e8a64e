/*
 * libkeylock: the C client of keylockd. SPDX-License-Identifier: MIT
 *
 * What keylock.c and keylock_io.c share and users never see: the handle's
 * body and the socket layer. kli_ names are not exported from the shared
 * library (lib/local.mk keeps only keylock_*).
 */
#ifndef KEYLOCK_INT_H
#define KEYLOCK_INT_H

#include <stddef.h>
#include <stdint.h>

#include "keylock.h"

#define KEYLOCK_BUF_INITIAL	4096	/* most requests and replies */
#define KEYLOCK_REPLY_MAX	(64 * 1024 * 1024)	/* INFO of a busy key */
#define KEYLOCK_MSG_MAX		512	/* a local error text */

/* Input: data[off..len) is unread, data[scan..len) not yet searched for
 * LF. Output: data[0..len) is the request being built. */
struct keylock_buf {
	char		*data;
	size_t		 len, cap, off, scan;
};

struct keylock {
	int			 fd;
	long			 timeout_ms;	/* < 0: none */
	int			 pending;	/* a LOCK awaits its reply */
	int64_t			 lock_deadline;	/* monotonic ms, -1: none */
	enum keylock_status	 last;
	struct keylock_buf	 out, in;
	const char		*reply;		/* in in.data, or "" */
	const char		*message;	/* in reply, msgbuf, or "" */
	char			 msgbuf[KEYLOCK_MSG_MAX];
};

int64_t		 kli_now_ms(void);
/* now + keylock_timeout(), or -1 for none. */
int64_t		 kli_deadline(const struct keylock *kl, int64_t now);
int		 kli_buf_reserve(struct keylock_buf *b, size_t len);
enum keylock_status kli_buf_add(struct keylock *kl, const char *data,
		    size_t len);

enum keylock_status kli_status(struct keylock *kl, enum keylock_status st);
enum keylock_status kli_fail(struct keylock *kl, enum keylock_status st,
		    const char *fmt, ...)
		    __attribute__((__format__(__printf__, 3, 4)));

enum keylock_status kli_connect(struct keylock *kl, const char *server);
/* Before a request: connected, nothing in flight, the last reply gone. */
enum keylock_status kli_begin(struct keylock *kl);
/* Sends the output buffer by deadline (-1: none). */
enum keylock_status kli_send(struct keylock *kl, int64_t deadline);
/* Reads one reply line into kl->reply; KEYLOCK_PENDING when deadline
 * passes first (the connection stays open). */
enum keylock_status kli_recv(struct keylock *kl, int64_t deadline);

#endif /* KEYLOCK_INT_H */
