/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Fuzz harness for the command layer: the input is split into the byte
 * streams of a few connections (socketpairs into a real server, without
 * listeners), with disconnects and reconnects between chunks. Every reply
 * line must start "OK" or "ERR ", after "@N " on a channel; when every client has gone, the lock
 * table must be empty. The event loop runs non-blocking after each chunk.
 */
#include <sys/socket.h>

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "config.h"
#include "conn.h"
#include "locktable.h"
#include "log.h"
#include "server.h"
#include "stats.h"

#define FS_CONNS	3

int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fs_client {
	int	fd;		/* the client's end; -1 when closed */
	char	line[512];	/* the reply being read */
	size_t	len;
};

static struct config	fs_cfg;
static bool		fs_ready;
static char		fs_dir[64];

static void
fs_cleanup(void)
{
	char	path[sizeof(fs_dir) + 16];

	if (fs_dir[0] == '\0')
		return;
	snprintf(path, sizeof(path), "%s/token", fs_dir);
	unlink(path);
	rmdir(fs_dir);
}

static void
fs_init(void)
{
	static const char *const args[] = { "keylockd", "--config",
			    "/dev/null", "--state-dir", fs_dir, "--unix", "",
			    "--no-tcp", "--log-level", "error", "--max-line",
			    "256", "--max-output", "65536", "--max-locks", "8" };
	static char	*argv[sizeof(args) / sizeof(args[0]) + 1];
	int		 argc = (int)(sizeof(args) / sizeof(args[0]));

	/* tmpfs when there is one: the token mark's fsync is the cost. */
	snprintf(fs_dir, sizeof(fs_dir), "%s/kl-fuzz-session-XXXXXX",
	    access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (mkdtemp(fs_dir) == NULL)
		abort();
	atexit(fs_cleanup);
	for (int i = 0; i < argc; i++)
		if ((argv[i] = strdup(args[i])) == NULL)
			abort();
	if (config_load(&fs_cfg, argc, argv) != 0)
		abort();
	log_set_level(LOG_LEVEL_ERROR);
	fs_ready = true;
}

static void
fs_open(struct server *srv, struct fs_client *c)
{
	int	sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == -1)
		abort();
	if (conn_new(server_conns(srv), sv[0], "fuzz", CONN_UNIX) == NULL)
		abort();
	c->fd = sv[1];
	c->len = 0;
}

/* A reply: "OK..." or "ERR ...", on channel 0 or after "@N " for a
 * channel N from 1 to 4294967295 (keylockd-protocol(7), CHANNELS). */
static void
fs_check_reply(const char *line, size_t len)
{
	size_t		i = 1;
	uint64_t	n = 0;

	if (len > 0 && line[0] == '@') {
		while (i < len && line[i] >= '0' && line[i] <= '9' && i < 12)
			n = n * 10 + (uint64_t)(line[i++] - '0');
		assert(i > 1 && line[1] != '0' && n >= 1 && n <= UINT32_MAX);
		assert(i < len && line[i] == ' ');
		line += i + 1;
		len -= i + 1;
	}
	assert(len >= 2);
	assert(memcmp(line, "OK", 2) == 0 ||
	    (len > 4 && memcmp(line, "ERR ", 4) == 0));
}

/* Reads what the server sent; every complete line must be a reply. */
static void
fs_drain(struct fs_client *c)
{
	char	buf[4096];
	ssize_t	n;

	while (c->fd != -1 && (n = read(c->fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (c->len < sizeof(c->line))
					c->line[c->len++] = buf[i];
				continue;
			}
			fs_check_reply(c->line, c->len);
			c->len = 0;
		}
	}
}

static void
fs_run(struct server *srv, struct fs_client *cl)
{
	for (int round = 0; round < 4; round++) {
		event_base_loop(server_base(srv), EVLOOP_NONBLOCK);
		for (int i = 0; i < FS_CONNS; i++)
			fs_drain(&cl[i]);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fs_client	 cl[FS_CONNS];
	struct server		*srv;
	const uint8_t		*p = data, *end = data + size;

	if (!fs_ready)
		fs_init();
	srv = server_new(&fs_cfg);
	for (int i = 0; i < FS_CONNS; i++)
		fs_open(srv, &cl[i]);
	while (p < end) {
		uint8_t			 op = *p++;
		size_t			 len = op & 0x3f;
		struct fs_client	*c = &cl[(op >> 6) % FS_CONNS];

		if ((op >> 6) == 3) {
			/* Hang up a client and connect a fresh one. */
			c = &cl[len % FS_CONNS];
			close(c->fd);
			fs_run(srv, cl);
			fs_open(srv, c);
			continue;
		}
		if (len > (size_t)(end - p))
			len = (size_t)(end - p);
		/* The server may have closed this one (QUIT, limits). */
		if (write(c->fd, p, len) == -1 && errno != EAGAIN &&
		    errno != EPIPE && errno != ECONNRESET)
			abort();
		p += len;
		fs_run(srv, cl);
	}
	for (int i = 0; i < FS_CONNS; i++) {
		close(cl[i].fd);
		cl[i].fd = -1;
	}
	fs_run(srv, cl);
	/* Every client has gone: only detached sessions may hold, wait or
	 * keep channels (keylockd-protocol(7), SESSIONS), and server_free()
	 * ends them. */
	assert(server_stats(srv)->clients == 0);
	assert(server_stats(srv)->input_bytes == 0);
	assert(server_stats(srv)->sessions ==
	    server_stats(srv)->sessions_detached);
	if (server_stats(srv)->sessions == 0) {
		assert(server_stats(srv)->channels == 0);
		assert(server_stats(srv)->channel_bytes == 0);
		assert(locktable_counters(backend_table(
		    server_backend(srv)))->keys == 0);
		assert(locktable_counters(backend_table(
		    server_backend(srv)))->waiting == 0);
	}
	assert(locktable_check(backend_table(server_backend(srv))) == NULL);
	server_free(srv);
	return 0;
}
