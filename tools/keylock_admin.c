/*
 * keylock: the command-line client of keylockd. SPDX-License-Identifier: MIT
 *
 * The operator's subcommands (keylockd-protocol(7), OPERATOR COMMANDS):
 * clients lists every connection the server has, kill closes one of them
 * as if it had disconnected, so that a stuck holder lets go, upgrade
 * replaces the running server with the binary now installed without
 * releasing anything (keylockd(8), LIVE UPGRADE). All need the unix
 * socket (-S PATH) or the operator's secret (--auth-file).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "keylock.h"
#include "keylock_cli.h"

static long long
admin_int(json_t *o, const char *name)
{
	return (long long)json_integer_value(json_object_get(o, name));
}

/* A detached session has no transport or peer now: "-". */
static const char *
admin_str(json_t *o, const char *name)
{
	const char	*s = json_string_value(json_object_get(o, name));

	return s != NULL ? s : "-";
}

static void
admin_print_client(json_t *o)
{
	const char	*name = json_string_value(json_object_get(o, "name"));
	json_t		*w = json_object_get(o, "waiting_for"), *k;
	size_t		 i;

	printf("%6lld  %-16s %-5s %-22s %9lld ms  holds %lld",
	    admin_int(o, "id"), name != NULL ? name : "-",
	    admin_str(o, "transport"), admin_str(o, "peer"),
	    admin_int(o, "age_ms"), admin_int(o, "held"));
	if (json_array_size(w) > 0) {
		printf(", waits %lld ms for", admin_int(o, "waited_ms"));
		json_array_foreach(w, i, k)
			printf(" %s", json_string_value(k));
	}
	/* a session whose connection dropped, within its grace */
	if (json_is_integer(json_object_get(o, "detached_ms")))
		printf(", detached %lld ms (session)",
		    admin_int(o, "detached_ms"));
	printf("\n");
}

int
admin_clients(const struct cli *cli, int argc, char **argv)
{
	struct keylock		*kl;
	enum keylock_status	 st;
	const char		*text;
	json_t			*root, *a, *o;
	size_t			 i;
	int			 raw = 0;

	if (argc == 2 && strcmp(argv[1], "--json") == 0)
		raw = 1;
	else if (argc != 1)
		cli_usage_error("usage: keylock clients [--json]");
	kl = cli_connect(cli, 0);
	if ((st = keylock_request(kl, "CLIENTS", &text)) != KEYLOCK_OK) {
		int	code = cli_fail(cli, kl, st);

		if (st == KEYLOCK_ERR_AUTH)
			cli_warnx("CLIENTS is for the operator: connect over "
			    "the unix socket (-S PATH) or give the operator's "
			    "secret (--auth-file)");
		keylock_free(kl);
		return code;
	}
	if (raw) {
		printf("%s\n", text);
	} else if ((root = json_loads(text, 0, NULL)) == NULL) {
		keylock_free(kl);
		cli_warnx("CLIENTS: the reply is not JSON");
		return CLI_EXIT_PROTOCOL;
	} else {
		a = json_object_get(root, "clients");
		printf("%lld clients%s\n", admin_int(root, "total"),
		    (long long)json_array_size(a) < admin_int(root, "total") ?
		    " (the oldest listed)" : "");
		printf("%6s  %-16s %-5s %-22s %12s\n", "id", "name", "via",
		    "peer", "age");
		json_array_foreach(a, i, o)
			admin_print_client(o);
		json_decref(root);
	}
	keylock_free(kl);
	return fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
}

int
admin_kill(const struct cli *cli, int argc, char **argv)
{
	struct keylock		*kl;
	enum keylock_status	 st;
	const char		*value;
	char			 line[64];
	long			 id;
	int			 killed;

	if (argc != 2 || (id = cli_parse_number(argv[1], 1, 2147483647L)) < 0)
		cli_usage_error("usage: keylock kill ID (a client id, as "
		    "keylock clients or keylock info KEY show it)");
	kl = cli_connect(cli, 0);
	snprintf(line, sizeof(line), "KILL %ld", id);
	if ((st = keylock_request(kl, line, &value)) != KEYLOCK_OK) {
		int	code = cli_fail(cli, kl, st);

		if (st == KEYLOCK_ERR_AUTH)
			cli_warnx("KILL is for the operator: connect over "
			    "the unix socket (-S PATH) or give the operator's "
			    "secret (--auth-file)");
		keylock_free(kl);
		return code;
	}
	killed = strcmp(value, "1") == 0;
	keylock_free(kl);
	if (killed) {
		printf("client %ld closed: its locks are released\n", id);
		return fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
	}
	cli_warnx("no client %ld", id);
	return CLI_EXIT_NOTACQUIRED;
}

/* The server's --check-config and its hand-off get KL_UPGRADE_DEADLINE_MS
 * (10 s) each; the reply comes after both. */
#define ADMIN_UPGRADE_MS	25000

int
admin_upgrade(const struct cli *cli, int argc, char **argv)
{
	struct keylock		*kl;
	enum keylock_status	 st;
	const char		*text;
	json_t			*root;
	int			 raw = 0;

	if (argc == 2 && strcmp(argv[1], "--json") == 0)
		raw = 1;
	else if (argc != 1)
		cli_usage_error("usage: keylock upgrade [--json]");
	kl = cli_connect(cli, 0);
	keylock_set_timeout(kl, ADMIN_UPGRADE_MS);
	if ((st = keylock_request(kl, "UPGRADE", &text)) != KEYLOCK_OK) {
		int	code = cli_fail(cli, kl, st);

		if (st == KEYLOCK_ERR_AUTH)
			cli_warnx("UPGRADE is for the operator: connect over "
			    "the unix socket (-S PATH) or give the operator's "
			    "secret (--auth-file)");
		else if (st == KEYLOCK_ERR_UPGRADE)
			cli_warnx("the running server carries on with every "
			    "connection and lock");
		keylock_free(kl);
		return code;
	}
	if (raw) {
		printf("%s\n", text);
	} else if ((root = json_loads(text, 0, NULL)) == NULL ||
	    !json_is_integer(json_object_get(root, "pid"))) {
		json_decref(root);
		keylock_free(kl);
		cli_warnx("UPGRADE: the reply is not the expected JSON");
		return CLI_EXIT_PROTOCOL;
	} else {
		printf("keylockd %s, pid %lld, took over after a pause of "
		    "%lld ms: %lld connections handed over, %lld TLS "
		    "connections closed\n", admin_str(root, "version"),
		    admin_int(root, "pid"), admin_int(root, "pause_ms"),
		    admin_int(root, "connections"),
		    admin_int(root, "tls_closed"));
		json_decref(root);
	}
	keylock_free(kl);
	return fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
}
