/*
 * libkeylock: the C client of keylockd. SPDX-License-Identifier: MIT
 *
 * TLS under a handle, with OpenSSL on the non-blocking socket that
 * keylock_io.c connected: the context (CA, client certificate), the
 * handshake by the connect deadline, and reads and writes that report
 * WANT_READ and WANT_WRITE as EAGAIN plus the event to poll for. The
 * server's certificate is checked (name or IP address) unless the caller
 * said insecure. Bytes go through a BIO of our own so that writes use
 * MSG_NOSIGNAL: a closed server is an error, never SIGPIPE. Nothing here
 * is global; each handle owns its context.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "keylock.h"
#include "keylock_int.h"

static enum keylock_status	 tls_ctx_new(struct keylock *,
				    const struct keylock_tls_opts *);
static enum keylock_status	 tls_load(struct keylock *, SSL_CTX *,
				    const char *, const char *, const char *);
static enum keylock_status	 tls_set_peer(struct keylock *, const char *);
static ssize_t			 tls_result(struct keylock *, int,
				    const char *, short *);
static enum keylock_status	 tls_fail(struct keylock *, const char *);
static int			 tls_bio_write(BIO *, const char *, int);
static int			 tls_bio_read(BIO *, char *, int);
static long			 tls_bio_ctrl(BIO *, int, long, void *);
static void			 tls_settings_free(struct keylock *);
static const char		*env_or(const char *, const char *);

enum keylock_status
keylock_set_tls(struct keylock *kl, const struct keylock_tls_opts *opts)
{
	enum keylock_status	st;

	if (opts == NULL) {
		tls_settings_free(kl);
		kl->tls_on = 0;
		return kli_status(kl, KEYLOCK_OK);
	}
	if ((st = tls_ctx_new(kl, opts)) != KEYLOCK_OK)
		return st;
	kl->tls_on = 1;
	return kli_status(kl, KEYLOCK_OK);
}

enum keylock_status
kli_tls_start(struct keylock *kl, const char *server, const char *host,
    int64_t deadline)
{
	static const struct keylock_tls_opts	 none;
	enum keylock_status			 st;
	BIO					*bio;
	char					 what[KEYLOCK_MSG_MAX / 2];
	ssize_t					 n;
	short					 events;
	int					 r;

	if (kl->tls_ctx == NULL && (st = tls_ctx_new(kl, &none)) !=
	    KEYLOCK_OK) {
		kli_close(kl);
		return st;
	}
	snprintf(what, sizeof(what), "TLS handshake with %s", server);
	ERR_clear_error();
	kl->tls_fatal = kl->tls_heard = 0;
	/* Kept until keylock_free(): a BIO in use points at it. */
	if (kl->tls_bio == NULL && (kl->tls_bio = BIO_meth_new(
	    BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
	    "keylock socket")) != NULL) {
		BIO_meth_set_write(kl->tls_bio, tls_bio_write);
		BIO_meth_set_read(kl->tls_bio, tls_bio_read);
		BIO_meth_set_ctrl(kl->tls_bio, tls_bio_ctrl);
	}
	if (kl->tls_bio == NULL || (kl->ssl = SSL_new(kl->tls_ctx)) == NULL ||
	    (bio = BIO_new(kl->tls_bio)) == NULL)
		return tls_fail(kl, "TLS setup");
	BIO_set_data(bio, (void *)(intptr_t)kl->fd);
	BIO_set_init(bio, 1);
	SSL_set_bio(kl->ssl, bio, bio);
	if ((st = tls_set_peer(kl, kl->tls_name != NULL ? kl->tls_name :
	    host)) != KEYLOCK_OK)
		return st;
	SSL_set_connect_state(kl->ssl);
	for (;;) {
		ERR_clear_error();
		if ((r = SSL_connect(kl->ssl)) == 1)
			return kli_status(kl, KEYLOCK_OK);
		if ((n = tls_result(kl, r, what, &events)) == -2)
			return kl->last;
		if (n == 0) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_TLS, "%s: the server "
			    "closed the connection", what);
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return kli_fail_errno(kl, errno, "%s", what);
		if ((r = kli_wait_fd(kl->fd, events, deadline)) == -1)
			return kli_fail_errno(kl, errno, "poll");
		if (r == 0) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_DEADLINE, "%s: timed "
			    "out", what);
		}
	}
}

ssize_t
kli_tls_read(struct keylock *kl, void *buf, size_t len, short *events)
{
	int	n;

	ERR_clear_error();
	if ((n = SSL_read(kl->ssl, buf, len > INT_MAX ? INT_MAX :
	    (int)len)) > 0) {
		kl->tls_heard = 1;
		return n;
	}
	return tls_result(kl, n, "TLS read", events);
}

ssize_t
kli_tls_write(struct keylock *kl, const void *buf, size_t len,
    short *events)
{
	int	n;

	ssize_t	r;

	ERR_clear_error();
	if ((n = SSL_write(kl->ssl, buf, len > INT_MAX ? INT_MAX :
	    (int)len)) > 0)
		return n;
	/* As send(2), which never says 0 for a closed peer. */
	if ((r = tls_result(kl, n, "TLS write", events)) == 0) {
		errno = EPIPE;
		r = -1;
	}
	return r;
}

size_t
kli_tls_pending(const struct keylock *kl)
{
	return kl->ssl != NULL ? (size_t)SSL_pending(kl->ssl) : 0;
}

/* Says close_notify when the session is sound, without waiting. */
void
kli_tls_close(struct keylock *kl)
{
	if (!kl->tls_fatal && SSL_is_init_finished(kl->ssl))
		(void)SSL_shutdown(kl->ssl);
	SSL_free(kl->ssl);
	kl->ssl = NULL;
	ERR_clear_error();
}

/* After keylock_close(): frees what the handle's TLS settings hold. */
void
kli_tls_free(struct keylock *kl)
{
	tls_settings_free(kl);
	BIO_meth_free(kl->tls_bio);
	kl->tls_bio = NULL;
}

static enum keylock_status
tls_ctx_new(struct keylock *kl, const struct keylock_tls_opts *o)
{
	enum keylock_status	 st;
	SSL_CTX			*ctx;
	char			*name = NULL;
	const char		*ca, *cert, *key;

	ca = env_or(o->ca_file, "KEYLOCK_TLS_CA");
	cert = env_or(o->cert_file, "KEYLOCK_TLS_CERT");
	key = env_or(o->key_file, "KEYLOCK_TLS_KEY");
	if (key != NULL && cert == NULL)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a TLS key file needs "
		    "a certificate file");
	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL ||
	    (o->server_name != NULL &&
	    (name = strdup(o->server_name)) == NULL)) {
		SSL_CTX_free(ctx);
		ERR_clear_error();
		return kli_fail(kl, KEYLOCK_ERR_NOMEM, "out of memory for "
		    "TLS");
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	/* A server that dies is CLOSED, as without TLS: replies are lines,
	 * so a cut cannot pass for a whole one. */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
	SSL_CTX_set_verify(ctx, o->insecure ? SSL_VERIFY_NONE :
	    SSL_VERIFY_PEER, NULL);
	if ((st = tls_load(kl, ctx, ca, cert, key)) != KEYLOCK_OK) {
		SSL_CTX_free(ctx);
		free(name);
		return st;
	}
	/* A live connection keeps its own reference to the old context. */
	tls_settings_free(kl);
	kl->tls_ctx = ctx;
	kl->tls_name = name;
	return KEYLOCK_OK;
}

static void
tls_settings_free(struct keylock *kl)
{
	SSL_CTX_free(kl->tls_ctx);
	kl->tls_ctx = NULL;
	free(kl->tls_name);
	kl->tls_name = NULL;
}

static enum keylock_status
tls_load(struct keylock *kl, SSL_CTX *ctx, const char *ca, const char *cert,
    const char *key)
{
	const char	*files[] = { ca, cert, key };
	char		 ebuf[128];
	unsigned long	 e;

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (files[i] != NULL && access(files[i], R_OK) == -1)
			return kli_fail(kl, KEYLOCK_ERR_TLS, "%s: %s",
			    files[i], kli_errstr(errno, ebuf, sizeof(ebuf)));
	if (ca != NULL ? SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 :
	    SSL_CTX_set_default_verify_paths(ctx) != 1)
		goto fail;
	if (cert == NULL)
		return KEYLOCK_OK;
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, key != NULL ? key : cert,
	    SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1)
		goto fail;
	return KEYLOCK_OK;
fail:
	e = ERR_peek_last_error();
	ERR_clear_error();
	return kli_fail(kl, KEYLOCK_ERR_TLS, "TLS files (CA %s, certificate "
	    "%s, key %s): %s", ca != NULL ? ca : "system",
	    cert != NULL ? cert : "none",
	    key != NULL ? key : cert != NULL ? cert : "none",
	    e != 0 && ERR_reason_error_string(e) != NULL ?
	    ERR_reason_error_string(e) : "unusable");
}

/* The name the certificate must carry: an IP address, or a DNS name that
 * is also sent as SNI. */
static enum keylock_status
tls_set_peer(struct keylock *kl, const char *name)
{
	struct in6_addr	addr;
	int		ok;

	if (inet_pton(AF_INET, name, &addr) == 1 ||
	    inet_pton(AF_INET6, name, &addr) == 1)
		ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(kl->ssl),
		    name);
	else
		ok = SSL_set_tlsext_host_name(kl->ssl, name) == 1 &&
		    SSL_set1_host(kl->ssl, name) == 1;
	if (!ok)
		return tls_fail(kl, "TLS server name");
	return KEYLOCK_OK;
}

/*
 * What SSL_read, _write or _connect returning ret means, as recv(2) would
 * say it; -2 once a TLS failure is reported. A server that drops the
 * connection before its first reply has, as a rule, refused the client's
 * certificate: under TLS 1.3 it says so after the client's handshake ends,
 * and its alert may be lost to a reset.
 */
static ssize_t
tls_result(struct keylock *kl, int ret, const char *what, short *events)
{
	char	ebuf[128];
	int	err = errno, e = SSL_get_error(kl->ssl, ret);

	if (!kl->tls_heard && SSL_is_init_finished(kl->ssl) &&
	    (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL &&
	    ERR_peek_error() == 0 && err != EAGAIN && err != EINTR))) {
		kli_fail(kl, KEYLOCK_ERR_TLS, "%s: the server closed the "
		    "connection before its first reply (%s): was the client "
		    "certificate refused?", what, err != 0 ?
		    kli_errstr(err, ebuf, sizeof(ebuf)) : "end of file");
		kl->tls_fatal = 1;
		kli_close(kl);
		return -2;
	}
	switch (e) {
	case SSL_ERROR_WANT_READ:
		*events = POLLIN;
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_WANT_WRITE:
		*events = POLLOUT;
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		if (ERR_peek_error() != 0)
			break;
		kl->tls_fatal = 1;
		if (err == 0)
			return 0;
		errno = err;
		return -1;
	default:
		break;
	}
	tls_fail(kl, what);
	return -2;
}

/* Closes and reports the TLS failure: the certificate check's verdict
 * if that failed, else OpenSSL's reason (an alert from the server). */
static enum keylock_status
tls_fail(struct keylock *kl, const char *what)
{
	unsigned long	 e = ERR_peek_last_error();
	long		 v = X509_V_OK;
	const char	*why;

	if (kl->ssl != NULL && SSL_get_verify_mode(kl->ssl) != SSL_VERIFY_NONE)
		v = SSL_get_verify_result(kl->ssl);

	if (v != X509_V_OK)
		why = X509_verify_cert_error_string(v);
	else if (e != 0 && ERR_reason_error_string(e) != NULL)
		why = ERR_reason_error_string(e);
	else
		why = "failed";
	kli_fail(kl, KEYLOCK_ERR_TLS, "%s: %s%s", what, v != X509_V_OK ?
	    "server certificate not trusted: " : "", why);
	kl->tls_fatal = 1;
	kli_close(kl);
	return kl->last;
}

static int
tls_bio_write(BIO *b, const char *data, int len)
{
	ssize_t	n;

	BIO_clear_retry_flags(b);
	n = send((int)(intptr_t)BIO_get_data(b), data, (size_t)len,
	    MSG_NOSIGNAL);
	if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		BIO_set_retry_write(b);
	return (int)n;
}

static int
tls_bio_read(BIO *b, char *data, int len)
{
	ssize_t	n;

	BIO_clear_retry_flags(b);
	n = recv((int)(intptr_t)BIO_get_data(b), data, (size_t)len, 0);
	if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		BIO_set_retry_read(b);
	return (int)n;
}

/* A socket has nothing to flush or tell; OpenSSL asks for little else. */
static long
tls_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	return cmd == BIO_CTRL_FLUSH;
}

static const char *
env_or(const char *value, const char *name)
{
	if (value == NULL && (value = getenv(name)) != NULL && *value == '\0')
		value = NULL;
	return value;
}
