/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * https:// to etcd: the etcd client's TLS (etcd.h, struct etcd_opts). A
 * connection to an https endpoint is an evhttp connection over libevent's
 * OpenSSL bufferevent, in connecting state: the server's certificate must
 * chain to the CA (etcd_opts.ca_file, else the system's) and name the
 * endpoint's host (its IP address, or its DNS name, which is also sent as
 * SNI); a client certificate and key are sent when given (etcd's
 * --client-cert-auth). TLS 1.2 at least.
 *
 * Like the daemon's own TLS (src/daemon/tls.c), and for the same reason,
 * OpenSSL is opened at run time, with libevent's OpenSSL bufferevents
 * (libevent_openssl, built against that OpenSSL): only when an https
 * endpoint is configured. A daemon with plain endpoints never maps them.
 *
 * An SSL object serves one TCP connection: evhttp would reconnect a
 * closed connection on the same bufferevent, so etcd.c remakes a TLS
 * connection once it has closed instead (etcd_conn.stale).
 */
#include <sys/socket.h>

#include <arpa/inet.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "etcd_impl.h"
#include "util.h"

#define ETLS_STR_(x)	#x
#define ETLS_STR(x)	ETLS_STR_(x)
#ifdef OPENSSL_VERSION_MAJOR
#define ETLS_LIBSSL	"libssl.so." ETLS_STR(OPENSSL_VERSION_MAJOR)
#else
#define ETLS_LIBSSL	"libssl.so.1.1"
#endif
/* libevent 2.1's soname; its OpenSSL part is built against the system's
 * OpenSSL, the one of the headers above. */
#define ETLS_LIBEVENT_SSL "libevent_openssl-2.1.so.7"

#define ETLS_SSL_FUNCS(X)						\
	X(ERR_clear_error) X(ERR_error_string_n) X(ERR_get_error)	\
	X(SSL_CTX_check_private_key) X(SSL_CTX_ctrl) X(SSL_CTX_free)	\
	X(SSL_CTX_load_verify_locations) X(SSL_CTX_new)			\
	X(SSL_CTX_set_default_verify_paths) X(SSL_CTX_set_verify)	\
	X(SSL_CTX_use_PrivateKey_file)					\
	X(SSL_CTX_use_certificate_chain_file) X(SSL_free) X(SSL_new)	\
	X(SSL_ctrl) X(SSL_get0_param) X(SSL_get_verify_result)		\
	X(SSL_in_init) X(SSL_in_before) X(SSL_state_string_long)	\
	X(TLS_client_method) X(X509_VERIFY_PARAM_set1_host)		\
	X(X509_VERIFY_PARAM_set1_ip_asc) X(X509_verify_cert_error_string)
#define ETLS_EV_FUNCS(X)						\
	X(bufferevent_openssl_socket_new)				\
	X(bufferevent_openssl_set_allow_dirty_shutdown)			\
	X(bufferevent_openssl_get_ssl) X(bufferevent_get_openssl_error)

static struct {
#define ETLS_FIELD(f) __typeof__(&f) f;
	ETLS_SSL_FUNCS(ETLS_FIELD)
	ETLS_EV_FUNCS(ETLS_FIELD)
#undef ETLS_FIELD
} fn;
static void	*lib_ssl, *lib_ev;

/* Opens both libraries once and for the process; false with err set. */
static bool
etls_load(char *err, size_t errlen)
{
	void	*ssl, *ev, *sym;

	if (lib_ev != NULL)
		return true;
	if ((ssl = dlopen(ETLS_LIBSSL, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		snprintf(err, errlen, "https needs OpenSSL's %s: %s",
		    ETLS_LIBSSL, dlerror());
		return false;
	}
	if ((ev = dlopen(ETLS_LIBEVENT_SSL, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		snprintf(err, errlen, "https needs libevent's %s: %s",
		    ETLS_LIBEVENT_SSL, dlerror());
		dlclose(ssl);
		return false;
	}
#define ETLS_SYM(lib, f)						\
	if ((sym = dlsym(lib, #f)) == NULL) {				\
		snprintf(err, errlen, "https: no %s in %s", #f,		\
		    lib == ssl ? ETLS_LIBSSL : ETLS_LIBEVENT_SSL);	\
		dlclose(ev);						\
		dlclose(ssl);						\
		return false;						\
	}								\
	memcpy(&fn.f, &sym, sizeof(sym));
#define ETLS_SYM_SSL(f)	ETLS_SYM(ssl, f)
#define ETLS_SYM_EV(f)	ETLS_SYM(ev, f)
	ETLS_SSL_FUNCS(ETLS_SYM_SSL)
	ETLS_EV_FUNCS(ETLS_SYM_EV)
#undef ETLS_SYM_EV
#undef ETLS_SYM_SSL
#undef ETLS_SYM
	lib_ssl = ssl;
	lib_ev = ev;
	return true;
}

/* OpenSSL's error queue, emptied, into err after what. */
static void
etls_error(char *err, size_t errlen, const char *what)
{
	unsigned long	 e, last = 0;
	char		 buf[200];

	while ((e = fn.ERR_get_error()) != 0)
		last = e;
	if (last == 0) {
		snprintf(err, errlen, "%s", what);
		return;
	}
	fn.ERR_error_string_n(last, buf, sizeof(buf));
	snprintf(err, errlen, "%s: %s", what, buf);
}

void *
etcd_tls_ctx_new(const struct etcd_opts *o, char *err, size_t errlen)
{
	SSL_CTX	*ctx;
	char	 what[ETCD_URL_MAX + 64];

	if (!etls_load(err, errlen))
		return NULL;
	fn.ERR_clear_error();
	if ((ctx = fn.SSL_CTX_new(fn.TLS_client_method())) == NULL) {
		etls_error(err, errlen, "https: cannot make a TLS context");
		return NULL;
	}
	/* SSL_CTX_set_min_proto_version, a macro of SSL_CTX_ctrl */
	fn.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION,
	    NULL);
	fn.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (o->ca_file != NULL) {
		if (fn.SSL_CTX_load_verify_locations(ctx, o->ca_file,
		    NULL) != 1) {
			snprintf(what, sizeof(what), "etcd CA %s", o->ca_file);
			goto fail;
		}
	} else if (fn.SSL_CTX_set_default_verify_paths(ctx) != 1) {
		snprintf(what, sizeof(what), "the system's CA certificates");
		goto fail;
	}
	if (o->cert_file != NULL) {
		if (fn.SSL_CTX_use_certificate_chain_file(ctx,
		    o->cert_file) != 1) {
			snprintf(what, sizeof(what), "etcd client certificate "
			    "%s", o->cert_file);
			goto fail;
		}
		if (fn.SSL_CTX_use_PrivateKey_file(ctx, o->key_file,
		    SSL_FILETYPE_PEM) != 1) {
			snprintf(what, sizeof(what), "etcd client key %s",
			    o->key_file);
			goto fail;
		}
		if (fn.SSL_CTX_check_private_key(ctx) != 1) {
			snprintf(what, sizeof(what), "etcd client key %s does "
			    "not match certificate %s", o->key_file,
			    o->cert_file);
			goto fail;
		}
	}
	return ctx;
fail:
	etls_error(err, errlen, what);
	fn.SSL_CTX_free(ctx);
	return NULL;
}

void
etcd_tls_ctx_free(void *ctx)
{
	if (ctx != NULL)
		fn.SSL_CTX_free(ctx);
}

static bool
host_is_ip(const char *h)
{
	unsigned char buf[16];

	return inet_pton(AF_INET, h, buf) == 1 ||
	    inet_pton(AF_INET6, h, buf) == 1;
}

struct bufferevent *
etcd_tls_bev_new(struct etcd *e, int ep)
{
	const char		*host = e->eps[ep].host;
	X509_VERIFY_PARAM	*param;
	struct bufferevent	*bev;
	SSL			*ssl;

	fn.ERR_clear_error();
	if ((ssl = fn.SSL_new(e->tls)) == NULL)
		return NULL;
	param = fn.SSL_get0_param(ssl);
	if (host_is_ip(host)) {
		if (fn.X509_VERIFY_PARAM_set1_ip_asc(param, host) != 1)
			goto fail;
	} else if (fn.X509_VERIFY_PARAM_set1_host(param, host, 0) != 1 ||
	    /* SSL_set_tlsext_host_name, a macro of SSL_ctrl */
	    fn.SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME,
	    TLSEXT_NAMETYPE_host_name, (void *)(uintptr_t)host) != 1)
		goto fail;
	/* the bufferevent owns ssl from here, and frees it with itself */
	bev = fn.bufferevent_openssl_socket_new(e->base, -1, ssl,
	    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE |
	    BEV_OPT_DEFER_CALLBACKS);
	if (bev == NULL)
		goto fail;
	/* etcd may close without close_notify; evhttp frames every reply */
	fn.bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	return bev;
fail:
	fn.SSL_free(ssl);
	return NULL;
}

bool
etcd_tls_why(struct evhttp_connection *evcon, char *buf, size_t len)
{
	struct bufferevent	*bev;
	SSL			*ssl;
	unsigned long		 err, last = 0;
	long			 v;
	char			 s[200];

	if (evcon == NULL ||
	    (bev = evhttp_connection_get_bufferevent(evcon)) == NULL ||
	    (ssl = fn.bufferevent_openssl_get_ssl(bev)) == NULL)
		return false;
	/* libevent puts SSL_get_error()'s small code first, then OpenSSL's
	 * queue: the last real error says most */
	while ((err = fn.bufferevent_get_openssl_error(bev)) != 0) {
		if (err > 0xff || last == 0)
			last = err;
	}
	if ((v = fn.SSL_get_verify_result(ssl)) != X509_V_OK) {
		snprintf(buf, len, "TLS: the server's certificate: %s",
		    fn.X509_verify_cert_error_string(v));
		return true;
	}
	if (last == 0 && fn.SSL_in_init(ssl) && !fn.SSL_in_before(ssl)) {
		/* no alert: the server just closed (as etcd does with a
		 * client certificate it does not trust, at times) */
		snprintf(buf, len, "TLS: the server closed the connection "
		    "during the handshake (%s)", fn.SSL_state_string_long(ssl));
		return true;
	}
	if (last == 0)
		return false;
	fn.ERR_error_string_n(last, s, sizeof(s));
	snprintf(buf, len, "TLS: %s", s);
	return true;
}
