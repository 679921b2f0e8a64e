/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * One line per event to stderr, where the journal picks it up. log_warn
 * appends strerror(errno), log_warnx does not; fatal and fatalx exit.
 */
#ifndef LOG_H
#define LOG_H

#include <stdbool.h>

enum log_level {
	LOG_LEVEL_ERROR = 0,
	LOG_LEVEL_WARN,
	LOG_LEVEL_INFO,
	LOG_LEVEL_DEBUG
};

#define KL_PRINTF(f, a)	__attribute__((format(printf, f, a)))

void	log_set_level(enum log_level level);
bool	log_parse_level(const char *s, enum log_level *level);
const char *log_level_name(enum log_level level);
bool	log_is_debug(void);

void	log_warn(const char *fmt, ...) KL_PRINTF(1, 2);
void	log_warnx(const char *fmt, ...) KL_PRINTF(1, 2);
void	log_info(const char *fmt, ...) KL_PRINTF(1, 2);
void	log_debug(const char *fmt, ...) KL_PRINTF(1, 2);
void	fatal(const char *fmt, ...) KL_PRINTF(1, 2) __attribute__((noreturn));
void	fatalx(const char *fmt, ...) KL_PRINTF(1, 2) __attribute__((noreturn));

#endif /* LOG_H */
