/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * TLS for client connections, with OpenSSL driven directly on the same
 * non-blocking sockets and event loop as plain connections, so a TLS
 * client costs one SSL_read and one SSL_write per batch, as a plain one
 * costs one recv and one send. Optional client certificates (mutual TLS).
 */
#ifndef TLS_H
#define TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct tls_ctx;
struct tls_conn;

/* Loads cert and key (PEM) and, if ca is not NULL, requires clients to
 * present a certificate signed by it and, if crl is not NULL, not revoked
 * by the CRL of its issuer in that file. NULL with err set on failure.
 * A connection made with a context keeps it after tls_ctx_free(): a
 * reload swaps contexts under open connections. */
struct tls_ctx	*tls_ctx_new(const char *cert, const char *key, const char *ca,
		    const char *crl, char *err, size_t errlen);
void		 tls_ctx_free(struct tls_ctx *ctx);

struct tls_conn	*tls_conn_new(struct tls_ctx *ctx, int fd);
void		 tls_conn_free(struct tls_conn *t);

/*
 * Like recv(2) and send(2) on a non-blocking socket: > 0 bytes, 0 at the
 * peer's close_notify or EOF (read only), -1 with errno EAGAIN when the
 * socket is not ready. *want is set when the operation waits for the
 * other direction (a read that must write, a write that must read).
 * Other failures are -1 with errno EPROTO.
 */
ssize_t		 tls_read(struct tls_conn *t, void *buf, size_t len,
		    bool *want_write);
ssize_t		 tls_write(struct tls_conn *t, const void *buf, size_t len,
		    bool *want_read);
/* As tls_read, but the bytes stay to be read (SSL_peek): decrypted, so
 * what a later tls_read of at most as many returns. It reads from the
 * socket, and may write to it, as tls_read does. */
ssize_t		 tls_peek(struct tls_conn *t, void *buf, size_t len,
		    bool *want_write);
/* Decrypted bytes are waiting inside OpenSSL (no socket event will say so). */
bool		 tls_pending(const struct tls_conn *t);
/* The common name of the peer's certificate, verified against
 * tls-client-ca, into buf; false if there is none (or it does not fit). */
bool		 tls_peer_cn(const struct tls_conn *t, char *buf, size_t len);

#endif /* TLS_H */
