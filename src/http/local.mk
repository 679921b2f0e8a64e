# The HTTP listener: /metrics and /stats (metrics.c) and the status page
# (status.c; status.html, status.css and status.js).
src_libkeylockd_a_SOURCES += \
	src/http/metrics.c src/http/metrics.h \
	src/http/status.c src/http/status.h
nodist_src_libkeylockd_a_SOURCES += src/http/status_files.c

# The status page's three files as C arrays, made with od(1) and awk(1)
# alone so it builds out of tree and in distcheck; a NUL ends each
# (status.h).
STATUS_FILES = src/http/status.html src/http/status.css src/http/status.js
EXTRA_DIST += $(STATUS_FILES)
CLEANFILES += src/http/status_files.c
src/http/status_files.c: $(STATUS_FILES)
	$(AM_V_GEN)$(MKDIR_P) src/http && { \
	echo '/* Generated from the status page by src/http/local.mk. */'; \
	echo '#include "status.h"'; \
	for ext in html css js; do \
	echo "const unsigned char status_$$ext[] = {"; \
	od -An -v -tu1 $(srcdir)/src/http/status.$$ext | \
	    awk '{ for (i = 1; i <= NF; i++) printf "%s,", $$i; print "" }'; \
	echo '0 };'; \
	echo "const size_t status_$${ext}_len = sizeof(status_$$ext) - 1;"; \
	done; \
	} >$@-t && mv $@-t $@
