/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * OpenSSL on the daemon's own non-blocking sockets. The handshake happens
 * inside the first reads and writes (accept state). Partial writes and a
 * moving write buffer are allowed, because the connection's output buffer
 * is compacted and grown between attempts. Never logs: callers do.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tls.h"
#include "util.h"

struct tls_ctx {
	SSL_CTX	*ssl;
};

struct tls_conn {
	SSL	*ssl;
};

static void
tls_err(char *err, size_t errlen, const char *what, const char *path)
{
	char	buf[256];

	ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
	snprintf(err, errlen, "%s %s: %s", what, path, buf);
}

struct tls_ctx *
tls_ctx_new(const char *cert, const char *key, const char *ca, char *err,
    size_t errlen)
{
	struct tls_ctx	*ctx;

	if ((ctx = kl_calloc(1, sizeof(*ctx))) == NULL ||
	    (ctx->ssl = SSL_CTX_new(TLS_server_method())) == NULL) {
		snprintf(err, errlen, "out of memory for TLS");
		kl_free(ctx);
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx->ssl, TLS1_2_VERSION);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	/* A peer that just closes is a closed connection, not an error. */
	SSL_CTX_set_options(ctx->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
	SSL_CTX_set_mode(ctx->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
	if (SSL_CTX_use_certificate_chain_file(ctx->ssl, cert) != 1) {
		tls_err(err, errlen, "tls-cert", cert);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx->ssl, key, SSL_FILETYPE_PEM) != 1
	    || SSL_CTX_check_private_key(ctx->ssl) != 1) {
		tls_err(err, errlen, "tls-key", key);
		goto fail;
	}
	if (ca != NULL) {
		if (SSL_CTX_load_verify_locations(ctx->ssl, ca, NULL) != 1) {
			tls_err(err, errlen, "tls-client-ca", ca);
			goto fail;
		}
		SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER |
		    SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	}
	return ctx;
fail:
	tls_ctx_free(ctx);
	return NULL;
}

void
tls_ctx_free(struct tls_ctx *ctx)
{
	if (ctx == NULL)
		return;
	SSL_CTX_free(ctx->ssl);
	kl_free(ctx);
}

struct tls_conn *
tls_conn_new(struct tls_ctx *ctx, int fd)
{
	struct tls_conn	*t;

	if ((t = kl_calloc(1, sizeof(*t))) == NULL)
		return NULL;
	if ((t->ssl = SSL_new(ctx->ssl)) == NULL ||
	    SSL_set_fd(t->ssl, fd) != 1) {
		tls_conn_free(t);
		return NULL;
	}
	SSL_set_accept_state(t->ssl);
	return t;
}

void
tls_conn_free(struct tls_conn *t)
{
	if (t == NULL)
		return;
	if (t->ssl != NULL) {
		(void)SSL_shutdown(t->ssl);	/* best effort, no waiting */
		SSL_free(t->ssl);
	}
	kl_free(t);
}

/* Maps an SSL error to the errno convention of tls.h. */
static ssize_t
tls_result(struct tls_conn *t, int n, bool *want_other, int other)
{
	int	e = SSL_get_error(t->ssl, n);

	ERR_clear_error();
	*want_other = false;
	if (e == SSL_ERROR_ZERO_RETURN)
		return 0;
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		*want_other = e == other;
		errno = EAGAIN;
		return -1;
	}
	if (e == SSL_ERROR_SYSCALL && errno == 0)
		return 0;	/* EOF without close_notify */
	if (e != SSL_ERROR_SYSCALL)
		errno = EPROTO;
	return -1;
}

ssize_t
tls_read(struct tls_conn *t, void *buf, size_t len, bool *want_write)
{
	int	n;

	errno = 0;
	n = SSL_read(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (n > 0)
		return n;
	return tls_result(t, n, want_write, SSL_ERROR_WANT_WRITE);
}

ssize_t
tls_write(struct tls_conn *t, const void *buf, size_t len, bool *want_read)
{
	int	n;

	errno = 0;
	n = SSL_write(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (n > 0)
		return n;
	return tls_result(t, n, want_read, SSL_ERROR_WANT_READ);
}

bool
tls_pending(const struct tls_conn *t)
{
	return SSL_pending(t->ssl) > 0;
}
