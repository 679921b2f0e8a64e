/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * sd_notify and socket activation without libsystemd. The notification
 * socket may be a path or, with a leading '@', an abstract address. A send
 * that fails is not an error worth stopping for: the service manager will
 * notice on its own.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "notify.h"
#include "util.h"

#define LISTEN_FDS_START	3

bool
notify_enabled(void)
{
	const char	*path = getenv("NOTIFY_SOCKET");

	return path != NULL && path[0] != '\0';
}

void
notify_send(const char *state)
{
	const char		*path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un	 sun;
	socklen_t		 sl;
	size_t			 n;
	int			 fd;

	if (path == NULL || (path[0] != '/' && path[0] != '@') ||
	    (n = strlen(path)) >= sizeof(sun.sun_path))
		return;
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	memcpy(sun.sun_path, path, n);
	if (path[0] == '@')
		sun.sun_path[0] = '\0';
	sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1)
		return;
	(void)sendto(fd, state, strlen(state), MSG_NOSIGNAL,
	    (struct sockaddr *)&sun, sl);
	close(fd);
}

/*
 * sd_notify_barrier(3), spoken directly: BARRIER=1 with the write end of a
 * pipe, which systemd closes once it has handled every earlier message
 * from this process. Waits at most timeout_ms; false if it did not come.
 */
bool
notify_barrier(int timeout_ms)
{
	const char		*path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un	 sun;
	struct msghdr		 mh;
	struct iovec		 iov;
	struct pollfd		 pfd;
	union {
		struct cmsghdr	 h;
		char		 buf[CMSG_SPACE(sizeof(int))];
	}			 cm;
	char			 msg[] = "BARRIER=1";
	size_t			 n;
	int			 fd, p[2];
	bool			 ok = false;

	if (path == NULL || (path[0] != '/' && path[0] != '@') ||
	    (n = strlen(path)) >= sizeof(sun.sun_path))
		return false;
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	memcpy(sun.sun_path, path, n);
	if (path[0] == '@')
		sun.sun_path[0] = '\0';
	if (pipe2(p, O_CLOEXEC) == -1)
		return false;
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) != -1) {
		memset(&mh, 0, sizeof(mh));
		memset(&cm, 0, sizeof(cm));
		iov.iov_base = msg;
		iov.iov_len = sizeof(msg) - 1;
		mh.msg_name = &sun;
		mh.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un,
		    sun_path) + n);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
		CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
		CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &p[1], sizeof(int));
		ok = sendmsg(fd, &mh, MSG_NOSIGNAL) != -1;
		close(fd);
	}
	close(p[1]);
	if (ok) {
		pfd.fd = p[0];
		pfd.events = POLLIN;
		pfd.revents = 0;
		ok = poll(&pfd, 1, timeout_ms) == 1;
	}
	close(p[0]);
	return ok;
}

int
notify_listen_fds(const char **names, int max)
{
	static char	 namebuf[1024];
	const char	*pid = getenv("LISTEN_PID");
	const char	*fds = getenv("LISTEN_FDS");
	const char	*fdnames = getenv("LISTEN_FDNAMES");
	uint64_t	 p, n;
	char		*save = NULL, *tok;

	if (pid == NULL || fds == NULL ||
	    !kl_parse_u64(pid, strlen(pid), 1, INT32_MAX, &p) ||
	    (pid_t)p != getpid() ||
	    !kl_parse_u64(fds, strlen(fds), 0, (uint64_t)max, &n))
		return 0;
	snprintf(namebuf, sizeof(namebuf), "%s", fdnames != NULL ? fdnames :
	    "");
	tok = strtok_r(namebuf, ":", &save);
	for (int i = 0; i < (int)n; i++) {
		names[i] = tok != NULL ? tok : "";
		if (tok != NULL)
			tok = strtok_r(NULL, ":", &save);
		fcntl(LISTEN_FDS_START + i, F_SETFD, FD_CLOEXEC);
		fcntl(LISTEN_FDS_START + i, F_SETFL, fcntl(LISTEN_FDS_START +
		    i, F_GETFL) | O_NONBLOCK);
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return (int)n;
}
