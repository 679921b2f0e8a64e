/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * OpenSSL on the daemon's own non-blocking sockets. The handshake happens
 * inside the first reads and writes (accept state). Partial writes and a
 * moving write buffer are allowed, because the connection's output buffer
 * is compacted and grown between attempts. Never logs: callers do.
 */
#include <sys/stat.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ssl_rt.h"
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

	ssl_rt.ERR_error_string_n(ssl_rt.ERR_get_error(), buf, sizeof(buf));
	snprintf(err, errlen, "%s %s: %s", what, path, buf);
}

/* Whether path (tls-cert, tls-key, tls-client-ca, tls-crl) is a regular
 * file: OpenSSL would open a FIFO and wait, a start or a SIGHUP hung
 * until someone wrote into it. */
static bool
tls_file_check(const char *what, const char *path, char *err, size_t errlen)
{
	struct stat	st;

	if (stat(path, &st) == -1) {
		snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
		return false;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s %s: not a regular file", what, path);
		return false;
	}
	return true;
}

/* Client certificates are also checked against the CRLs in crl (PEM):
 * the one of the issuer of each must be there. */
static bool
tls_load_crl(struct tls_ctx *ctx, const char *crl, char *err, size_t errlen)
{
	X509_STORE	*store = ssl_rt.SSL_CTX_get_cert_store(ctx->ssl);
	X509_LOOKUP	*lu;

	if (store == NULL || (lu = ssl_rt.X509_STORE_add_lookup(store,
	    ssl_rt.X509_LOOKUP_file())) == NULL ||
	    ssl_rt.X509_load_crl_file(lu, crl, X509_FILETYPE_PEM) <= 0) {
		tls_err(err, errlen, "tls-crl", crl);
		return false;
	}
	ssl_rt.X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
	return true;
}

struct tls_ctx *
tls_ctx_new(const char *cert, const char *key, const char *ca,
    const char *crl, char *err, size_t errlen)
{
	struct tls_ctx	*ctx;

	if (crl != NULL && ca == NULL) {
		snprintf(err, errlen, "tls-crl %s: without tls-client-ca no "
		    "client certificate is asked for", crl);
		return NULL;
	}
	if (!tls_file_check("tls-cert", cert, err, errlen) ||
	    !tls_file_check("tls-key", key, err, errlen) ||
	    (ca != NULL && !tls_file_check("tls-client-ca", ca, err,
	    errlen)) ||
	    (crl != NULL && !tls_file_check("tls-crl", crl, err, errlen)))
		return NULL;
	if (!ssl_rt_load("TLS", err, errlen))
		return NULL;
	if ((ctx = kl_calloc(1, sizeof(*ctx))) == NULL ||
	    (ctx->ssl = ssl_rt.SSL_CTX_new(ssl_rt.TLS_server_method())) == NULL) {
		snprintf(err, errlen, "out of memory for TLS");
		kl_free(ctx);
		return NULL;
	}
	ssl_rt.SSL_CTX_ctrl(ctx->ssl, SSL_CTRL_SET_MIN_PROTO_VERSION,
	    TLS1_2_VERSION, NULL);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	/* A peer that just closes is a closed connection, not an error. */
	ssl_rt.SSL_CTX_set_options(ctx->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
#ifdef SSL_OP_NO_RENEGOTIATION
	/* TLS 1.2 renegotiation loops would spend the one event loop's
	 * time (libssl 1.1 allows a client's by default). */
	ssl_rt.SSL_CTX_set_options(ctx->ssl, SSL_OP_NO_RENEGOTIATION);
#endif
	ssl_rt.SSL_CTX_ctrl(ctx->ssl, SSL_CTRL_MODE,
	    SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS,
	    NULL);
	if (ssl_rt.SSL_CTX_use_certificate_chain_file(ctx->ssl, cert) != 1) {
		tls_err(err, errlen, "tls-cert", cert);
		goto fail;
	}
	if (ssl_rt.SSL_CTX_use_PrivateKey_file(ctx->ssl, key,
	    SSL_FILETYPE_PEM) != 1 ||
	    ssl_rt.SSL_CTX_check_private_key(ctx->ssl) != 1) {
		tls_err(err, errlen, "tls-key", key);
		goto fail;
	}
	if (ca != NULL) {
		if (ssl_rt.SSL_CTX_load_verify_locations(ctx->ssl, ca,
		    NULL) != 1) {
			tls_err(err, errlen, "tls-client-ca", ca);
			goto fail;
		}
		ssl_rt.SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER |
		    SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	}
	if (crl != NULL && !tls_load_crl(ctx, crl, err, errlen))
		goto fail;
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
	ssl_rt.SSL_CTX_free(ctx->ssl);
	kl_free(ctx);
}

struct tls_conn *
tls_conn_new(struct tls_ctx *ctx, int fd)
{
	struct tls_conn	*t;

	if ((t = kl_calloc(1, sizeof(*t))) == NULL)
		return NULL;
	if ((t->ssl = ssl_rt.SSL_new(ctx->ssl)) == NULL ||
	    ssl_rt.SSL_set_fd(t->ssl, fd) != 1) {
		tls_conn_free(t);
		return NULL;
	}
	ssl_rt.SSL_set_accept_state(t->ssl);
	return t;
}

void
tls_conn_free(struct tls_conn *t)
{
	if (t == NULL)
		return;
	if (t->ssl != NULL) {
		(void)ssl_rt.SSL_shutdown(t->ssl);	/* best effort, no waiting */
		ssl_rt.SSL_free(t->ssl);
	}
	kl_free(t);
}

/* Maps an SSL error to the errno convention of tls.h. */
static ssize_t
tls_result(struct tls_conn *t, int n, bool *want_other, int other)
{
	int	e = ssl_rt.SSL_get_error(t->ssl, n);

	ssl_rt.ERR_clear_error();
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

/* SSL_read or SSL_peek: the same call, the same results. */
static ssize_t
tls_in(struct tls_conn *t, int (*fn)(SSL *, void *, int), void *buf,
    size_t len, bool *want_write)
{
	int	n;

	errno = 0;
	n = fn(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (n > 0)
		return n;
	return tls_result(t, n, want_write, SSL_ERROR_WANT_WRITE);
}

ssize_t
tls_read(struct tls_conn *t, void *buf, size_t len, bool *want_write)
{
	return tls_in(t, ssl_rt.SSL_read, buf, len, want_write);
}

ssize_t
tls_peek(struct tls_conn *t, void *buf, size_t len, bool *want_write)
{
	return tls_in(t, ssl_rt.SSL_peek, buf, len, want_write);
}

ssize_t
tls_write(struct tls_conn *t, const void *buf, size_t len, bool *want_read)
{
	int	n;

	errno = 0;
	n = ssl_rt.SSL_write(t->ssl, buf, len > INT32_MAX ? INT32_MAX :
	    (int)len);
	if (n > 0)
		return n;
	return tls_result(t, n, want_read, SSL_ERROR_WANT_READ);
}

bool
tls_pending(const struct tls_conn *t)
{
	return ssl_rt.SSL_pending(t->ssl) > 0;
}

bool
tls_peer_cn(const struct tls_conn *t, char *buf, size_t len)
{
	X509	*cert;
	int	 n;

	if (len < 2 || (cert = ssl_rt.peer_cert(t->ssl)) == NULL)
		return false;
	n = ssl_rt.SSL_get_verify_result(t->ssl) != X509_V_OK ? -1 :
	    ssl_rt.X509_NAME_get_text_by_NID(ssl_rt.X509_get_subject_name(
	    cert), NID_commonName, buf, (int)(len > INT32_MAX ? INT32_MAX :
	    len));
	ssl_rt.X509_free(cert);
	/* Not there, cut short, or with a NUL inside: no name. */
	return n > 0 && (size_t)n < len - 1 && strlen(buf) == (size_t)n;
}
