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
 * Like the daemon's own TLS, and for the same reason (src/daemon/ssl_rt.c),
 * OpenSSL is opened at run time, with libevent's OpenSSL bufferevents:
 * only when an https endpoint is configured. A daemon with plain
 * endpoints never maps them.
 *
 * An SSL object serves one TCP connection: evhttp would reconnect a
 * closed connection on the same bufferevent, so etcd.c remakes a TLS
 * connection once it has closed instead (etcd_conn.stale).
 */
#include <sys/socket.h>

#include <arpa/inet.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "etcd_impl.h"
#include "ssl_rt.h"
#include "util.h"


/* OpenSSL's error queue, emptied, into err after what. */
static void
etls_error(char *err, size_t errlen, const char *what)
{
	unsigned long	 e, last = 0;
	char		 buf[200];

	while ((e = ssl_rt.ERR_get_error()) != 0)
		last = e;
	if (last == 0) {
		snprintf(err, errlen, "%s", what);
		return;
	}
	ssl_rt.ERR_error_string_n(last, buf, sizeof(buf));
	snprintf(err, errlen, "%s: %s", what, buf);
}

void *
etcd_tls_ctx_new(const struct etcd_opts *o, char *err, size_t errlen)
{
	SSL_CTX	*ctx;
	char	 what[ETCD_URL_MAX + 64];

	if (!ssl_rt_load_ev("https", err, errlen))
		return NULL;
	ssl_rt.ERR_clear_error();
	if ((ctx = ssl_rt.SSL_CTX_new(ssl_rt.TLS_client_method())) == NULL) {
		etls_error(err, errlen, "https: cannot make a TLS context");
		return NULL;
	}
	/* SSL_CTX_set_min_proto_version, a macro of SSL_CTX_ctrl */
	ssl_rt.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION,
	    NULL);
	ssl_rt.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (o->ca_file != NULL) {
		if (ssl_rt.SSL_CTX_load_verify_locations(ctx, o->ca_file,
		    NULL) != 1) {
			snprintf(what, sizeof(what), "etcd CA %s", o->ca_file);
			goto fail;
		}
	} else if (ssl_rt.SSL_CTX_set_default_verify_paths(ctx) != 1) {
		snprintf(what, sizeof(what), "the system's CA certificates");
		goto fail;
	}
	if (o->cert_file != NULL) {
		if (ssl_rt.SSL_CTX_use_certificate_chain_file(ctx,
		    o->cert_file) != 1) {
			snprintf(what, sizeof(what), "etcd client certificate "
			    "%s", o->cert_file);
			goto fail;
		}
		if (ssl_rt.SSL_CTX_use_PrivateKey_file(ctx, o->key_file,
		    SSL_FILETYPE_PEM) != 1) {
			snprintf(what, sizeof(what), "etcd client key %s",
			    o->key_file);
			goto fail;
		}
		if (ssl_rt.SSL_CTX_check_private_key(ctx) != 1) {
			snprintf(what, sizeof(what), "etcd client key %s does "
			    "not match certificate %s", o->key_file,
			    o->cert_file);
			goto fail;
		}
	}
	return ctx;
fail:
	etls_error(err, errlen, what);
	ssl_rt.SSL_CTX_free(ctx);
	return NULL;
}

void
etcd_tls_ctx_free(void *ctx)
{
	if (ctx != NULL)
		ssl_rt.SSL_CTX_free(ctx);
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

	ssl_rt.ERR_clear_error();
	if ((ssl = ssl_rt.SSL_new(e->tls)) == NULL)
		return NULL;
	param = ssl_rt.SSL_get0_param(ssl);
	if (host_is_ip(host)) {
		if (ssl_rt.X509_VERIFY_PARAM_set1_ip_asc(param, host) != 1)
			goto fail;
	} else if (ssl_rt.X509_VERIFY_PARAM_set1_host(param, host, 0) != 1 ||
	    /* SSL_set_tlsext_host_name, a macro of SSL_ctrl */
	    ssl_rt.SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME,
	    TLSEXT_NAMETYPE_host_name, (void *)(uintptr_t)host) != 1)
		goto fail;
	/* the bufferevent owns ssl from here, and frees it with itself */
	bev = ssl_rt.bufferevent_openssl_socket_new(e->base, -1, ssl,
	    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE |
	    BEV_OPT_DEFER_CALLBACKS);
	if (bev == NULL)
		goto fail;
	/* etcd may close without close_notify; evhttp frames every reply */
	ssl_rt.bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	return bev;
fail:
	ssl_rt.SSL_free(ssl);
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
	    (ssl = ssl_rt.bufferevent_openssl_get_ssl(bev)) == NULL)
		return false;
	/* libevent puts SSL_get_error()'s small code first, then OpenSSL's
	 * queue: the last real error says most */
	while ((err = ssl_rt.bufferevent_get_openssl_error(bev)) != 0) {
		if (err > 0xff || last == 0)
			last = err;
	}
	if ((v = ssl_rt.SSL_get_verify_result(ssl)) != X509_V_OK) {
		snprintf(buf, len, "TLS: the server's certificate: %s",
		    ssl_rt.X509_verify_cert_error_string(v));
		return true;
	}
	if (last == 0 && ssl_rt.SSL_in_init(ssl) && !ssl_rt.SSL_in_before(ssl)) {
		/* no alert: the server just closed (as etcd does with a
		 * client certificate it does not trust, at times) */
		snprintf(buf, len, "TLS: the server closed the connection "
		    "during the handshake (%s)", ssl_rt.SSL_state_string_long(ssl));
		return true;
	}
	if (last == 0)
		return false;
	ssl_rt.ERR_error_string_n(last, s, sizeof(s));
	snprintf(buf, len, "TLS: %s", s);
	return true;
}
