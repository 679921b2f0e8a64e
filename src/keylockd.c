/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * main: settings, then the server, then the event loop until a signal
 * stops it. Everything else lives in the library the tests link too.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "log.h"
#include "server.h"
#include "server_impl.h"
#include "upgrade.h"

int
main(int argc, char *argv[])
{
	struct config	 cfg;
	struct server	*srv;
	struct upgrade_in in;
	char		 err[512];
	int		 rc;

	/* before anything writes to a socket: server_check() may already
	 * talk to etcd (over TLS), whose members close a refused handshake */
	signal(SIGPIPE, SIG_IGN);
	upgrade_note_path();

	if ((rc = config_load(&cfg, argc, argv)) != 0) {
		config_cleanup(&cfg);
		return rc < 0 ? 0 : rc;
	}
	log_set_level(cfg.log_level);
	if (server_check(&cfg, err, sizeof(err)) == -1) {
		fprintf(stderr, "keylockd: %s\n", err);
		config_cleanup(&cfg);
		return EX_KL_CONFIG;
	}
	if (cfg.check_config) {
		printf("keylockd: configuration %s is valid\n",
		    cfg.file != NULL ? cfg.file : "(built-in defaults)");
		config_cleanup(&cfg);
		return 0;
	}
	log_info("keylockd %s starting, config %s", PACKAGE_VERSION,
	    cfg.file != NULL ? cfg.file : "(none: built-in defaults)");
	srv = server_new(&cfg);
	upgrade_set_timeout((uint64_t)cfg.upgrade_timeout);
	/* a live upgrade's new process takes over the old one's state */
	if (upgrade_in_open(&in))
		server_upgrade_adopt(srv, &in);
	else
		server_listen(srv);
	rc = server_run(srv);
	server_free(srv);
	config_cleanup(&cfg);
	log_info("stopped");
	return rc;
}
