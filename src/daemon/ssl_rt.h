/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * OpenSSL opened at run time, for the daemon's TLS (tls.c) and https to
 * etcd (src/etcd/etcd_tls.c): one table of the functions both call, looked
 * up once per process. Why the daemon is not linked with OpenSSL is
 * written in ssl_rt.c.
 */
#ifndef SSL_RT_H
#define SSL_RT_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/bufferevent_ssl.h>

#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

/* libssl's (and, through it, libcrypto's) */
#define SSL_RT_FUNCS(X)							\
	X(ERR_clear_error) X(ERR_error_string_n) X(ERR_get_error)	\
	X(SHA256)							\
	X(SSL_CTX_check_private_key) X(SSL_CTX_ctrl) X(SSL_CTX_free)	\
	X(SSL_CTX_get_cert_store) X(SSL_CTX_load_verify_locations)	\
	X(SSL_CTX_new) X(SSL_CTX_set_default_verify_paths)		\
	X(SSL_CTX_set_options) X(SSL_CTX_set_verify)			\
	X(SSL_CTX_use_PrivateKey_file)					\
	X(SSL_CTX_use_certificate_chain_file) X(SSL_ctrl) X(SSL_free)	\
	X(SSL_get0_param) X(SSL_get_error) X(SSL_get_verify_result)	\
	X(SSL_in_before) X(SSL_in_init) X(SSL_new) X(SSL_peek)		\
	X(SSL_pending) X(SSL_read) X(SSL_set_accept_state)		\
	X(SSL_set_fd)							\
	X(SSL_shutdown) X(SSL_state_string_long) X(SSL_write)		\
	X(TLS_client_method) X(TLS_server_method)			\
	X(X509_LOOKUP_file) X(X509_NAME_get_text_by_NID)		\
	X(X509_STORE_add_lookup) X(X509_STORE_set_flags)		\
	X(X509_VERIFY_PARAM_set1_host) X(X509_VERIFY_PARAM_set1_ip_asc)	\
	X(X509_free) X(X509_get_subject_name) X(X509_load_crl_file)	\
	X(X509_verify_cert_error_string)
/* libevent's OpenSSL bufferevents (https to etcd only) */
#define SSL_RT_EV_FUNCS(X)						\
	X(bufferevent_get_openssl_error)				\
	X(bufferevent_openssl_get_ssl)					\
	X(bufferevent_openssl_set_allow_dirty_shutdown)			\
	X(bufferevent_openssl_socket_new)

struct ssl_rt {
#define SSL_RT_FIELD(f) __typeof__(&f) f;
	SSL_RT_FUNCS(SSL_RT_FIELD)
	SSL_RT_EV_FUNCS(SSL_RT_FIELD)
#undef SSL_RT_FIELD
	/* SSL_get1_peer_certificate (3.0), or SSL_get_peer_certificate
	 * (1.1, a macro of the other in 3.0): a reference to release. */
	X509	*(*peer_cert)(const SSL *);
};

/* Valid once ssl_rt_load() said true; SSL_RT_EV_FUNCS once
 * ssl_rt_load_ev() did. */
extern struct ssl_rt ssl_rt;

/* libssl, once and for the process; false with err set, what ("TLS",
 * "https") leading it. */
bool	ssl_rt_load(const char *what, char *err, size_t errlen);
/* libssl and libevent_openssl. */
bool	ssl_rt_load_ev(const char *what, char *err, size_t errlen);

#endif /* SSL_RT_H */
