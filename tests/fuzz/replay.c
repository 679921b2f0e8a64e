/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * A main() for any libFuzzer harness, so make check can replay a corpus
 * without libFuzzer: every file named on the command line, and every file
 * under every directory named (recursively, in name order), goes through
 * LLVMFuzzerTestOneInput once, in a buffer of exactly its size so the
 * sanitizers see any read past the end. With no arguments it replays
 * REPLAY_CORPUS (a path under $srcdir, set at compile time), if defined.
 * Symbolic links inside a directory are skipped, so a loop cannot recur.
 * Exit status: 0 when every input ran, 1 when a path could not be read or
 * there was nothing to replay, 2 on a usage error; a broken invariant
 * aborts inside the harness.
 */
#define _POSIX_C_SOURCE 200809L

#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);
int	LLVMFuzzerInitialize(int *, char ***) __attribute__((weak));

static int	replay_path(const char *, bool, unsigned long *);
static int	replay_dir(const char *, unsigned long *);
static int	replay_file(const char *, unsigned long *);
static int	replay_name_filter(const struct dirent *);

static int
replay_file(const char *path, unsigned long *count)
{
	FILE	*f;
	uint8_t	*buf = NULL, *exact;
	size_t	 cap = 0, len = 0, n;

	if ((f = fopen(path, "rb")) == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	do {
		if (len == cap) {
			uint8_t	*nbuf;

			cap = cap ? cap * 2 : 4096;
			if ((nbuf = realloc(buf, cap)) == NULL) {
				fprintf(stderr, "replay: out of memory\n");
				exit(1);
			}
			buf = nbuf;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		fprintf(stderr, "replay: %s: read error\n", path);
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	/* Exactly len bytes, so one byte too far is a sanitizer report. */
	if ((exact = malloc(len > 0 ? len : 1)) == NULL) {
		fprintf(stderr, "replay: out of memory\n");
		exit(1);
	}
	if (len > 0)
		memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	(*count)++;
	return 0;
}

static int
replay_name_filter(const struct dirent *d)
{
	return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

static int
replay_dir(const char *path, unsigned long *count)
{
	struct dirent	**list;
	int		  n, rc = 0;

	if ((n = scandir(path, &list, replay_name_filter, alphasort)) < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		size_t	 len = strlen(path) + strlen(list[i]->d_name) + 2;
		char	*sub;

		if ((sub = malloc(len)) == NULL) {
			fprintf(stderr, "replay: out of memory\n");
			exit(1);
		}
		snprintf(sub, len, "%s/%s", path, list[i]->d_name);
		if (replay_path(sub, false, count) == -1)
			rc = -1;
		free(sub);
		free(list[i]);
	}
	free(list);
	return rc;
}

static int
replay_path(const char *path, bool follow, unsigned long *count)
{
	struct stat	st;

	if ((follow ? stat(path, &st) : lstat(path, &st)) == -1) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (S_ISDIR(st.st_mode))
		return replay_dir(path, count);
	if (S_ISREG(st.st_mode))
		return replay_file(path, count);
	return 0;
}

int
main(int argc, char **argv)
{
	unsigned long	 count = 0;
	int		 rc = 0;

	if (LLVMFuzzerInitialize != NULL)
		LLVMFuzzerInitialize(&argc, &argv);
	if (argc < 2) {
#ifdef REPLAY_CORPUS
		const char	*srcdir = getenv("srcdir");
		char		 path[4096];

		if (srcdir == NULL || *srcdir == '\0')
			srcdir = ".";
		if (snprintf(path, sizeof(path), "%s/%s", srcdir,
		    REPLAY_CORPUS) >= (int)sizeof(path)) {
			fprintf(stderr, "replay: corpus path too long\n");
			return 2;
		}
		rc = replay_path(path, true, &count);
#else
		fprintf(stderr, "usage: %s file-or-directory ...\n",
		    argc > 0 ? argv[0] : "replay");
		return 2;
#endif
	}
	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i], true, &count) == -1)
			rc = -1;
	printf("replayed %lu inputs\n", count);
	if (rc == -1 || count == 0)
		return 1;
	return 0;
}
