# The daemon around the core: listeners and signals (server), one
# client's I/O (conn), the command handlers (commands), the settings
# (config), the log, the clock, the counters (stats), the fencing-token
# file (token), systemd's notify socket, TLS, and live upgrade (upgrade:
# the processes; server_upgrade: what the server hands over).
src_libkeylockd_a_SOURCES += \
	src/daemon/clock.c src/daemon/clock.h \
	src/daemon/log.c src/daemon/log.h \
	src/daemon/stats.c src/daemon/stats.h \
	src/daemon/config.c src/daemon/config.h \
	src/daemon/token.c src/daemon/token.h \
	src/daemon/commands.c src/daemon/commands.h \
	src/daemon/conn.c src/daemon/conn.h \
	src/daemon/session.c src/daemon/session.h \
	src/daemon/users.c src/daemon/users.h \
	src/daemon/server.c src/daemon/server.h src/daemon/server_impl.h \
	src/daemon/server_upgrade.c \
	src/daemon/upgrade.c src/daemon/upgrade.h \
	src/daemon/notify.c src/daemon/notify.h \
	src/daemon/tls.c src/daemon/tls.h \
	src/daemon/ssl_rt.c src/daemon/ssl_rt.h
