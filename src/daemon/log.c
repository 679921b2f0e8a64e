/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Logging to stderr with a syslog-style priority prefix ("<4>") that
 * journald understands, so levels survive into journalctl. Never logs per
 * request above debug (HACKING.md, Logging).
 */
#include <sys/stat.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"

static enum log_level	log_level = LOG_LEVEL_INFO;
static int		log_journal = -1;	/* stderr is the journal */

static const char *const log_names[] = { "error", "warn", "info", "debug" };
static const int log_prio[] = { 3, 4, 6, 7 };

void
log_set_level(enum log_level level)
{
	log_level = level;
}

bool
log_parse_level(const char *s, enum log_level *level)
{
	for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++) {
		if (strcasecmp(s, log_names[i]) == 0) {
			*level = (enum log_level)i;
			return true;
		}
	}
	return false;
}

const char *
log_level_name(enum log_level level)
{
	return log_names[level];
}

bool
log_is_debug(void)
{
	return log_level >= LOG_LEVEL_DEBUG;
}

/* systemd's rule: JOURNAL_STREAM names stderr's device and inode. */
static int
log_stderr_is_journal(void)
{
	const char		*js = getenv("JOURNAL_STREAM");
	struct stat		 st;
	unsigned long long	 dev, ino;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2 ||
	    fstat(STDERR_FILENO, &st) == -1)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	    (unsigned long long)st.st_ino == ino;
}

static void __attribute__((format(printf, 3, 0)))
log_vwrite(enum log_level level, const char *errstr, const char *fmt,
    va_list ap)
{
	char	buf[1024];
	int	n;

	char	prefix[32];

	if (level > log_level)
		return;
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (n < 0)
		return;
	/* journald reads "<N>" as the priority; a terminal gets words. */
	if (log_journal < 0)
		log_journal = log_stderr_is_journal();
	if (log_journal)
		snprintf(prefix, sizeof(prefix), "<%d>", log_prio[level]);
	else
		snprintf(prefix, sizeof(prefix), "keylockd: %s: ",
		    log_names[level]);
	if (errstr != NULL)
		fprintf(stderr, "%s%s: %s\n", prefix, buf, errstr);
	else
		fprintf(stderr, "%s%s\n", prefix, buf);
}

#define LOG_BODY(level, errstr) do {					\
	va_list	ap;							\
	va_start(ap, fmt);						\
	log_vwrite(level, errstr, fmt, ap);				\
	va_end(ap);							\
} while (0)

void
log_warn(const char *fmt, ...)
{
	const char	*e = strerror(errno);

	LOG_BODY(LOG_LEVEL_WARN, e);
}

void
log_warnx(const char *fmt, ...)
{
	LOG_BODY(LOG_LEVEL_WARN, NULL);
}

void
log_info(const char *fmt, ...)
{
	LOG_BODY(LOG_LEVEL_INFO, NULL);
}

void
log_debug(const char *fmt, ...)
{
	LOG_BODY(LOG_LEVEL_DEBUG, NULL);
}

void
fatal(const char *fmt, ...)
{
	const char	*e = strerror(errno);

	LOG_BODY(LOG_LEVEL_ERROR, e);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	LOG_BODY(LOG_LEVEL_ERROR, NULL);
	exit(1);
}
