/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The daemon is not linked with OpenSSL: the first TLS listener or https
 * etcd endpoint opens libssl (and so libcrypto), and libevent's OpenSSL
 * bufferevents for etcd, and looks up the functions of ssl_rt.h; a daemon
 * without TLS never maps them. The reason is packaging, and a lock
 * server's cost of a restart. Most listeners are loopback or unix sockets
 * without TLS; such a daemon does not depend on OpenSSL (the Debian
 * package recommends libssl3 rather than depends on it, and a minimal
 * image need not carry it), and an OpenSSL security update does not
 * restart it: the tools that restart every process still mapping the old
 * library (needrestart and the like) find nothing to do, while a restart
 * of keylockd releases every lock and drops every client. The start-up
 * instructions it also spares are not the reason: per request they come
 * to nothing. The sonames are the ones of the headers built against
 * (libevent_openssl is built against the system's OpenSSL, the one of
 * those headers). configure finds dlopen() in libc or libdl.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "ssl_rt.h"

#define SSL_RT_STR_(x)	#x
#define SSL_RT_STR(x)	SSL_RT_STR_(x)
#ifdef OPENSSL_VERSION_MAJOR
#define SSL_RT_LIBSSL	"libssl.so." SSL_RT_STR(OPENSSL_VERSION_MAJOR)
#else
#define SSL_RT_LIBSSL	"libssl.so.1.1"
#endif
#define SSL_RT_LIBEV	"libevent_openssl-2.1.so.7"

struct ssl_rt	 ssl_rt;
static void	*lib_ssl, *lib_ev;

/* f from lib into ssl_rt, or err set and on to fail. ssl_rt is valid only
 * once every one was found (lib_ssl, lib_ev set). */
#define SSL_RT_SYM(lib, soname, f)					\
	if ((sym = dlsym(lib, #f)) == NULL) {				\
		snprintf(err, errlen, "%s: %s has no %s", what, soname,	\
		    #f);						\
		goto fail;						\
	}								\
	memcpy(&ssl_rt.f, &sym, sizeof(sym));

bool
ssl_rt_load(const char *what, char *err, size_t errlen)
{
	void	*lib, *sym;

	if (lib_ssl != NULL)
		return true;
	if ((lib = dlopen(SSL_RT_LIBSSL, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		snprintf(err, errlen, "%s needs OpenSSL's %s: %s", what,
		    SSL_RT_LIBSSL, dlerror());
		return false;
	}
#define SSL_RT_SYM_SSL(f)	SSL_RT_SYM(lib, SSL_RT_LIBSSL, f)
	SSL_RT_FUNCS(SSL_RT_SYM_SSL)
#undef SSL_RT_SYM_SSL
	if ((sym = dlsym(lib, "SSL_get1_peer_certificate")) == NULL &&
	    (sym = dlsym(lib, "SSL_get_peer_certificate")) == NULL) {
		snprintf(err, errlen, "%s: %s has no SSL_get1_peer_"
		    "certificate", what, SSL_RT_LIBSSL);
		goto fail;
	}
	memcpy(&ssl_rt.peer_cert, &sym, sizeof(sym));
	lib_ssl = lib;
	return true;
fail:
	dlclose(lib);
	return false;
}

bool
ssl_rt_load_ev(const char *what, char *err, size_t errlen)
{
	void	*lib, *sym;

	if (lib_ev != NULL)
		return true;
	if (!ssl_rt_load(what, err, errlen))
		return false;
	if ((lib = dlopen(SSL_RT_LIBEV, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		snprintf(err, errlen, "%s needs libevent's %s: %s", what,
		    SSL_RT_LIBEV, dlerror());
		return false;
	}
#define SSL_RT_SYM_EV(f)	SSL_RT_SYM(lib, SSL_RT_LIBEV, f)
	SSL_RT_EV_FUNCS(SSL_RT_SYM_EV)
#undef SSL_RT_SYM_EV
	lib_ev = lib;
	return true;
fail:
	dlclose(lib);
	return false;
}
