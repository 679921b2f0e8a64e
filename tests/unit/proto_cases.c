/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The case directories in tests/unit/proto-cases, which are also the fuzz
 * seed corpus: each holds a request and what proto_parse must make of it,
 * and there must be enough of them.
 */
#define _POSIX_C_SOURCE 200809L

#include <sys/types.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_proto.h"
#include "proto.h"

#define CASES_DIR	"tests/unit/proto-cases"
#define CASES_MIN	30

/* Case directories, found by cp_load_cases() before main() builds the
 * suite. */
static char	**case_names;
static int	  ncases;

START_TEST(case_directory_has_enough_cases)
{
	ck_assert_msg(ncases >= CASES_MIN,
	    "found %d cases in $srcdir/" CASES_DIR ", want %d", ncases,
	    CASES_MIN);
}
END_TEST

static char *
read_file(const char *path, size_t *lenp)
{
	FILE	*f;
	char	*buf = NULL;
	size_t	 cap = 0, len = 0, n;

	if ((f = fopen(path, "rb")) == NULL)
		return NULL;
	do {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	*lenp = len;
	return buf;
}

static const char *
cases_dir(void)
{
	static char	 path[4096];
	const char	*srcdir = getenv("srcdir");

	if (srcdir == NULL || *srcdir == '\0')
		srcdir = ".";
	snprintf(path, sizeof(path), "%s/%s", srcdir, CASES_DIR);
	return path;
}

START_TEST(case_directory)
{
	const char	*name = case_names[_i];
	char		 path[4096], got[64], *req_bytes, *want, *buf;
	size_t		 reqlen, wantlen;
	struct request	 req;
	enum kl_err	 err;

	if (snprintf(path, sizeof(path), "%s/%s/request", cases_dir(),
	    name) >= (int)sizeof(path))
		ck_abort_msg("%s: path too long", name);
	req_bytes = read_file(path, &reqlen);
	ck_assert_msg(req_bytes != NULL, "%s: cannot read %s", name, path);
	if (snprintf(path, sizeof(path), "%s/%s/expect", cases_dir(),
	    name) >= (int)sizeof(path))
		ck_abort_msg("%s: path too long", name);
	want = read_file(path, &wantlen);
	ck_assert_msg(want != NULL, "%s: cannot read %s", name, path);
	while (wantlen > 0 && (want[wantlen - 1] == '\n' ||
	    want[wantlen - 1] == ' '))
		wantlen--;

	err = cp_parse_exact(req_bytes, reqlen, &req, &buf);
	if (err != KL_OK)
		snprintf(got, sizeof(got), "%s", proto_err_word(err));
	else if (req.cmd == CMD_NONE)
		snprintf(got, sizeof(got), "OK");
	else
		snprintf(got, sizeof(got), "OK %s", proto_cmd_name(req.cmd));
	ck_assert_msg(strlen(got) == wantlen &&
	    memcmp(got, want, wantlen) == 0, "%s: got \"%s\" (%s), want "
	    "\"%.*s\"", name, got, req.why, (int)wantlen, want);
	cp_assert_why_is_clean(name, &req, err);
	free(buf);
	free(want);
	free(req_bytes);
}
END_TEST

static int
case_name_filter(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

void
cp_load_cases(void)
{
	struct dirent	**list;
	int		  n;

	if ((n = scandir(cases_dir(), &list, case_name_filter,
	    alphasort)) < 0)
		return;
	if ((case_names = calloc((size_t)n + 1, sizeof(*case_names))) == NULL)
		abort();
	for (int i = 0; i < n; i++) {
		if ((case_names[i] = strdup(list[i]->d_name)) == NULL)
			abort();
		free(list[i]);
	}
	free(list);
	ncases = n;
}

void
cp_free_cases(void)
{
	for (int i = 0; i < ncases; i++)
		free(case_names[i]);
	free(case_names);
}

void
cp_add_cases(Suite *s)
{
	TCase	*tc;

	tc = tcase_create("cases");
	/* each case parses one line; check's 4 s default is what two of
	 * them took in a full ASan make check at load 10-16 (forked, and
	 * descheduled), so the timeout is the other suites' */
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, case_directory_has_enough_cases);
	tcase_add_loop_test(tc, case_directory, 0, ncases);
	suite_add_tcase(s, tc);
}
