# keylockd.service and keylockd.socket, generated from their .in files by
# make (not config.status), so that `make sbindir=...` is followed. They go
# to $(systemdsystemunitdir): $(prefix)/lib/systemd/system unless given,
# e.g. `make install systemdsystemunitdir=$(pkg-config
# --variable=systemdsystemunitdir systemd)`; under $(prefix) so that
# `make distcheck` and installs as a user work.
systemdsystemunitdir = $(prefix)/lib/systemd/system
systemdsystemunit_DATA = systemd/keylockd.service systemd/keylockd.socket
CLEANFILES += systemd/keylockd.service systemd/keylockd.socket
EXTRA_DIST += systemd/keylockd.service.in systemd/keylockd.socket.in

KL_UNIT_SED = sed -e 's|@sbindir[@]|$(sbindir)|g' \
	-e 's|@sysconfdir[@]|$(sysconfdir)|g'

systemd/keylockd.service: $(srcdir)/systemd/keylockd.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && \
	$(KL_UNIT_SED) $(srcdir)/systemd/keylockd.service.in >$@.tmp && \
	mv $@.tmp $@
systemd/keylockd.socket: $(srcdir)/systemd/keylockd.socket.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && \
	$(KL_UNIT_SED) $(srcdir)/systemd/keylockd.socket.in >$@.tmp && \
	mv $@.tmp $@
