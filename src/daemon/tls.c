/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * OpenSSL on the daemon's own non-blocking sockets. The handshake happens
 * inside the first reads and writes (accept state). Partial writes and a
 * moving write buffer are allowed, because the connection's output buffer
 * is compacted and grown between attempts. Never logs: callers do.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tls.h"
#include "util.h"

/*
 * The daemon is not linked with OpenSSL: the first tls_ctx_new() opens
 * libssl (and so libcrypto) and looks up the functions below, and a
 * daemon without TLS never maps them. The reason is packaging, and a lock
 * server's cost of a restart. Most listeners are loopback or unix sockets
 * without TLS; such a daemon does not depend on OpenSSL (the Debian
 * package recommends libssl3 rather than depends on it, and a minimal
 * image need not carry it), and an OpenSSL security update does not
 * restart it: the tools that restart every process still mapping the old
 * library (needrestart and the like) find nothing to do, while a restart
 * of keylockd releases every lock and drops every client. The start-up
 * instructions it also spares are not the reason: per request they come
 * to nothing. The soname is the one of the headers built against.
 * configure finds dlopen() in libc or libdl.
 */
#define TLS_STR_(x)	#x
#define TLS_STR(x)	TLS_STR_(x)
#ifdef OPENSSL_VERSION_MAJOR
#define TLS_LIBSSL	"libssl.so." TLS_STR(OPENSSL_VERSION_MAJOR)
#else
#define TLS_LIBSSL	"libssl.so.1.1"
#endif

#define TLS_FUNCS(X)							\
	X(ERR_clear_error) X(ERR_error_string_n) X(ERR_get_error)	\
	X(SSL_CTX_check_private_key) X(SSL_CTX_ctrl) X(SSL_CTX_free)	\
	X(SSL_CTX_load_verify_locations) X(SSL_CTX_new)			\
	X(SSL_CTX_set_options) X(SSL_CTX_set_verify)			\
	X(SSL_CTX_use_PrivateKey_file)					\
	X(SSL_CTX_use_certificate_chain_file) X(SSL_free)		\
	X(SSL_get_error) X(SSL_new) X(SSL_pending) X(SSL_read)		\
	X(SSL_set_accept_state) X(SSL_set_fd) X(SSL_shutdown)		\
	X(SSL_write) X(TLS_server_method) X(SSL_get_verify_result)	\
	X(X509_free) X(X509_get_subject_name) X(X509_NAME_get_text_by_NID) \
	X(SSL_CTX_get_cert_store) X(X509_STORE_add_lookup)		\
	X(X509_LOOKUP_file) X(X509_load_crl_file) X(X509_STORE_set_flags)

static struct {
#define TLS_FIELD(f) __typeof__(&f) f;
	TLS_FUNCS(TLS_FIELD)
#undef TLS_FIELD
	/* SSL_get1_peer_certificate (3.0), or SSL_get_peer_certificate
	 * (1.1, a macro of the other in 3.0): a reference to release. */
	X509	*(*peer_cert)(const SSL *);
} tls_fn;
static void	*tls_lib;

/* Opens libssl once and for the process; false with err set. */
static bool
tls_load(char *err, size_t errlen)
{
	void	*lib, *sym;

	if (tls_lib != NULL)
		return true;
	if ((lib = dlopen(TLS_LIBSSL, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		snprintf(err, errlen, "TLS needs OpenSSL's %s: %s",
		    TLS_LIBSSL, dlerror());
		return false;
	}
#define TLS_SYM(f)							\
	if ((sym = dlsym(lib, #f)) == NULL) {				\
		snprintf(err, errlen, "TLS: %s has no %s", TLS_LIBSSL, #f); \
		dlclose(lib);						\
		return false;						\
	}								\
	memcpy(&tls_fn.f, &sym, sizeof(sym));
	TLS_FUNCS(TLS_SYM)
#undef TLS_SYM
	if ((sym = dlsym(lib, "SSL_get1_peer_certificate")) == NULL &&
	    (sym = dlsym(lib, "SSL_get_peer_certificate")) == NULL) {
		snprintf(err, errlen, "TLS: %s has no SSL_get1_peer_"
		    "certificate", TLS_LIBSSL);
		dlclose(lib);
		return false;
	}
	memcpy(&tls_fn.peer_cert, &sym, sizeof(sym));
	tls_lib = lib;
	return true;
}

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

	tls_fn.ERR_error_string_n(tls_fn.ERR_get_error(), buf, sizeof(buf));
	snprintf(err, errlen, "%s %s: %s", what, path, buf);
}

/* Client certificates are also checked against the CRLs in crl (PEM):
 * the one of the issuer of each must be there. */
static bool
tls_load_crl(struct tls_ctx *ctx, const char *crl, char *err, size_t errlen)
{
	X509_STORE	*store = tls_fn.SSL_CTX_get_cert_store(ctx->ssl);
	X509_LOOKUP	*lu;

	if (store == NULL || (lu = tls_fn.X509_STORE_add_lookup(store,
	    tls_fn.X509_LOOKUP_file())) == NULL ||
	    tls_fn.X509_load_crl_file(lu, crl, X509_FILETYPE_PEM) <= 0) {
		tls_err(err, errlen, "tls-crl", crl);
		return false;
	}
	tls_fn.X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
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
	if (!tls_load(err, errlen))
		return NULL;
	if ((ctx = kl_calloc(1, sizeof(*ctx))) == NULL ||
	    (ctx->ssl = tls_fn.SSL_CTX_new(tls_fn.TLS_server_method())) == NULL) {
		snprintf(err, errlen, "out of memory for TLS");
		kl_free(ctx);
		return NULL;
	}
	tls_fn.SSL_CTX_ctrl(ctx->ssl, SSL_CTRL_SET_MIN_PROTO_VERSION,
	    TLS1_2_VERSION, NULL);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	/* A peer that just closes is a closed connection, not an error. */
	tls_fn.SSL_CTX_set_options(ctx->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
#ifdef SSL_OP_NO_RENEGOTIATION
	/* TLS 1.2 renegotiation loops would spend the one event loop's
	 * time (libssl 1.1 allows a client's by default). */
	tls_fn.SSL_CTX_set_options(ctx->ssl, SSL_OP_NO_RENEGOTIATION);
#endif
	tls_fn.SSL_CTX_ctrl(ctx->ssl, SSL_CTRL_MODE,
	    SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS,
	    NULL);
	if (tls_fn.SSL_CTX_use_certificate_chain_file(ctx->ssl, cert) != 1) {
		tls_err(err, errlen, "tls-cert", cert);
		goto fail;
	}
	if (tls_fn.SSL_CTX_use_PrivateKey_file(ctx->ssl, key,
	    SSL_FILETYPE_PEM) != 1 ||
	    tls_fn.SSL_CTX_check_private_key(ctx->ssl) != 1) {
		tls_err(err, errlen, "tls-key", key);
		goto fail;
	}
	if (ca != NULL) {
		if (tls_fn.SSL_CTX_load_verify_locations(ctx->ssl, ca,
		    NULL) != 1) {
			tls_err(err, errlen, "tls-client-ca", ca);
			goto fail;
		}
		tls_fn.SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER |
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
	tls_fn.SSL_CTX_free(ctx->ssl);
	kl_free(ctx);
}

struct tls_conn *
tls_conn_new(struct tls_ctx *ctx, int fd)
{
	struct tls_conn	*t;

	if ((t = kl_calloc(1, sizeof(*t))) == NULL)
		return NULL;
	if ((t->ssl = tls_fn.SSL_new(ctx->ssl)) == NULL ||
	    tls_fn.SSL_set_fd(t->ssl, fd) != 1) {
		tls_conn_free(t);
		return NULL;
	}
	tls_fn.SSL_set_accept_state(t->ssl);
	return t;
}

void
tls_conn_free(struct tls_conn *t)
{
	if (t == NULL)
		return;
	if (t->ssl != NULL) {
		(void)tls_fn.SSL_shutdown(t->ssl);	/* best effort, no waiting */
		tls_fn.SSL_free(t->ssl);
	}
	kl_free(t);
}

/* Maps an SSL error to the errno convention of tls.h. */
static ssize_t
tls_result(struct tls_conn *t, int n, bool *want_other, int other)
{
	int	e = tls_fn.SSL_get_error(t->ssl, n);

	tls_fn.ERR_clear_error();
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
	n = tls_fn.SSL_read(t->ssl, buf, len > INT32_MAX ? INT32_MAX :
	    (int)len);
	if (n > 0)
		return n;
	return tls_result(t, n, want_write, SSL_ERROR_WANT_WRITE);
}

ssize_t
tls_write(struct tls_conn *t, const void *buf, size_t len, bool *want_read)
{
	int	n;

	errno = 0;
	n = tls_fn.SSL_write(t->ssl, buf, len > INT32_MAX ? INT32_MAX :
	    (int)len);
	if (n > 0)
		return n;
	return tls_result(t, n, want_read, SSL_ERROR_WANT_READ);
}

bool
tls_pending(const struct tls_conn *t)
{
	return tls_fn.SSL_pending(t->ssl) > 0;
}

bool
tls_peer_cn(const struct tls_conn *t, char *buf, size_t len)
{
	X509	*cert;
	int	 n;

	if (len < 2 || (cert = tls_fn.peer_cert(t->ssl)) == NULL)
		return false;
	n = tls_fn.SSL_get_verify_result(t->ssl) != X509_V_OK ? -1 :
	    tls_fn.X509_NAME_get_text_by_NID(tls_fn.X509_get_subject_name(
	    cert), NID_commonName, buf, (int)(len > INT32_MAX ? INT32_MAX :
	    len));
	tls_fn.X509_free(cert);
	/* Not there, cut short, or with a NUL inside: no name. */
	return n > 0 && (size_t)n < len - 1 && strlen(buf) == (size_t)n;
}
