/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * notify_recv: the service manager's end of sd_notify, for tests. It binds
 * a unix datagram socket at PATH (or, with a leading '@', in the abstract
 * namespace), then prints each datagram's assignments one per line,
 * flushed at once, until one of them is STOPPING=1 or SECONDS (default
 * 60) pass. The socket exists once "listening" is printed. Exits 0 after
 * STOPPING=1, 1 on the deadline, 2 on errors.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NR_DGRAM_MAX	4096

static long long
nr_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
main(int argc, char *argv[])
{
	struct sockaddr_un	 sun;
	socklen_t		 sl;
	struct pollfd		 pfd;
	char			 buf[NR_DGRAM_MAX + 1], *line, *save;
	long long		 deadline;
	size_t			 n;
	ssize_t			 r;
	int			 fd, stop = 0;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: notify_recv PATH|@NAME [SECONDS]\n");
		return 2;
	}
	deadline = nr_now_ms() + 1000LL * (argc == 3 ? atoi(argv[2]) : 60);
	if ((n = strlen(argv[1])) >= sizeof(sun.sun_path)) {
		fprintf(stderr, "notify_recv: path too long\n");
		return 2;
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	memcpy(sun.sun_path, argv[1], n);
	if (argv[1][0] == '@')
		sun.sun_path[0] = '\0';
	sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1 ||
	    bind(fd, (struct sockaddr *)&sun, sl) == -1) {
		perror("notify_recv");
		return 2;
	}
	printf("listening\n");
	fflush(stdout);
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (!stop) {
		long long	left = deadline - nr_now_ms();

		if (left <= 0) {
			fprintf(stderr, "notify_recv: no STOPPING=1 in time\n");
			return 1;
		}
		if (poll(&pfd, 1, (int)left) <= 0)
			continue;
		if ((r = recv(fd, buf, NR_DGRAM_MAX, 0)) < 0) {
			perror("notify_recv");
			return 2;
		}
		buf[r] = '\0';
		for (line = strtok_r(buf, "\n", &save); line != NULL;
		    line = strtok_r(NULL, "\n", &save)) {
			printf("%s\n", line);
			if (strcmp(line, "STOPPING=1") == 0)
				stop = 1;
		}
		fflush(stdout);
	}
	close(fd);
	if (argv[1][0] != '@')
		unlink(argv[1]);
	return 0;
}
